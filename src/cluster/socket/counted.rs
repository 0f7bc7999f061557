//! The stream a node's connection writes to: it counts the bytes the
//! socket takes, and holds each flush's first write back for one turn of
//! the scheduler so that the requests handed over meanwhile go out with it.
//!
//! redis-rs' connection driver encodes the requests it finds in its
//! channel into one buffer and writes that buffer when the channel runs
//! dry. Under load the channel ran dry after almost every request: a task
//! handing over a request wakes the driver into tokio's LIFO slot, so the
//! driver ran — and wrote — before the other tasks woken by the same reply
//! handed over theirs. Each request was then its own `writev` and, over
//! TLS, its own record: sealed, its own allocation in rustls, its own
//! wake-up of the server (measured with the load bench: 0.77 writes per
//! check over TLS, 0.60 plain, at 64 in flight).
//!
//! So the first write after a flush returns `Pending` with the task woken
//! at once. Tokio queues a task that woke itself behind every task already
//! runnable on its worker, so the driver runs again once those tasks have
//! handed over their requests, and then writes them all: one syscall, one
//! record. A lone request waits one empty turn of the scheduler, a few
//! microseconds.
//!
//! The codec keeps the held bytes; none of them count as written before
//! the socket took them (see [`Socket::written`](super::Socket::written)).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Shared;

/// A write this large goes out at once: a full TLS record's plaintext,
/// nothing to gain by waiting for more.
const FULL_RECORD: usize = 16 * 1024;

/// What a [`Counted`] stream writes to: the TCP socket or the TLS session
/// over it.
pub(super) trait Stream: AsyncRead + AsyncWrite + Send + Sync {}
impl<S: AsyncRead + AsyncWrite + Send + Sync> Stream for S {}

/// A stream that counts the bytes its socket accepts and holds each
/// flush's first write back for one turn of the scheduler.
pub(super) struct Counted {
    inner: Pin<Box<dyn Stream>>,
    shared: Arc<Shared>,
    /// Whether this flush's writes were held back already.
    held: bool,
}

impl Counted {
    pub(super) fn new(inner: Pin<Box<dyn Stream>>, shared: Arc<Shared>) -> Self {
        Counted {
            inner,
            shared,
            held: false,
        }
    }

    /// `Pending`, with the task woken, the first time a flush writes (unless
    /// the write fills a record): the tasks queued ahead of it run first.
    fn hold(&mut self, cx: &Context<'_>, len: usize) -> Poll<()> {
        if self.held || len >= FULL_RECORD {
            return Poll::Ready(());
        }
        self.held = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn count(&self, written: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = written {
            // Read after the driver ended, which orders it after this.
            self.shared
                .written
                .fetch_add(u64::try_from(*n).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.inner.as_mut().poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.hold(cx, buf.len()));
        let written = this.inner.as_mut().poll_write(cx, buf);
        this.count(&written);
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let len = bufs.iter().map(|buf| buf.len()).sum();
        std::task::ready!(this.hold(cx, len));
        let written = this.inner.as_mut().poll_write_vectored(cx, bufs);
        this.count(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = std::task::ready!(self.inner.as_mut().poll_flush(cx));
        // The next write starts a new flush: held back again.
        self.held = false;
        Poll::Ready(flushed)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.as_mut().poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
