//! `HeaderBuf`: a header value built on the stack, and the structured-field
//! byte sequence (RFC 9651 §3.3.5) the partition key is written as.

use std::fmt;

use http::HeaderValue;

/// A header value built on the stack and copied once into the
/// `HeaderValue` (its only allocation); it spills to the heap only past
/// `STACK` bytes (about three limits, or a long partition key).
pub(crate) struct HeaderBuf {
    stack: [u8; HeaderBuf::STACK],
    len: usize,
    heap: Option<Vec<u8>>,
}

impl HeaderBuf {
    pub(crate) const STACK: usize = 320;

    pub(crate) fn new() -> Self {
        HeaderBuf {
            stack: [0; Self::STACK],
            len: 0,
            heap: None,
        }
    }

    pub(crate) fn finish(self) -> HeaderValue {
        let bytes = match &self.heap {
            Some(heap) => heap.as_slice(),
            None => &self.stack[..self.len],
        };
        // Everything written is printable ASCII (names, digits, base64):
        // always a valid value. Fall back to nothing rather than panic.
        HeaderValue::from_bytes(bytes).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    fn push(&mut self, bytes: &[u8]) {
        if let Some(heap) = &mut self.heap {
            heap.extend_from_slice(bytes);
        } else if let Some(room) = self.stack.get_mut(self.len..self.len + bytes.len()) {
            room.copy_from_slice(bytes);
            self.len += bytes.len();
        } else {
            let mut heap = Vec::with_capacity(self.len + bytes.len() + Self::STACK);
            heap.extend_from_slice(&self.stack[..self.len]);
            heap.extend_from_slice(bytes);
            self.heap = Some(heap);
        }
    }

    /// `bytes` as a structured-field byte sequence: `:` base64 (RFC 4648
    /// §4, with padding) `:`.
    pub(crate) fn write_byte_sequence(&mut self, bytes: &[u8]) {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let sextet = |n: u32, shift: u32| ALPHABET[((n >> shift) & 0x3f) as usize];
        self.push(b":");
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
            let mut out = [b'='; 4];
            out[0] = sextet(n, 18);
            out[1] = sextet(n, 12);
            if chunk.len() > 1 {
                out[2] = sextet(n, 6);
            }
            if chunk.len() > 2 {
                out[3] = sextet(n, 0);
            }
            self.push(&out);
        }
        self.push(b":");
    }
}

impl fmt::Write for HeaderBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;

    fn byte_sequence(bytes: &[u8]) -> String {
        let mut buf = HeaderBuf::new();
        buf.write_byte_sequence(bytes);
        buf.finish().to_str().unwrap().to_owned()
    }

    #[test]
    fn byte_sequences_are_padded_base64() {
        // RFC 4648 §10's test vectors.
        for (input, output) in [
            ("", "::"),
            ("f", ":Zg==:"),
            ("fo", ":Zm8=:"),
            ("foo", ":Zm9v:"),
            ("foob", ":Zm9vYg==:"),
            ("fooba", ":Zm9vYmE=:"),
            ("foobar", ":Zm9vYmFy:"),
        ] {
            assert_eq!(byte_sequence(input.as_bytes()), output);
        }
        assert_eq!(byte_sequence(&[0xfb, 0xff, 0xbf]), ":+/+/:");
    }

    #[test]
    fn long_values_spill_to_the_heap() {
        let mut buf = HeaderBuf::new();
        let piece = "x".repeat(100);
        for _ in 0..10 {
            buf.write_str(&piece).unwrap();
        }
        buf.write_byte_sequence(&[0; 300]);
        let value = buf.finish();
        assert_eq!(value.len(), 1000 + 2 + 400);
        assert!(value.to_str().unwrap().starts_with(&piece));
    }
}
