//! Unit tests of the held-back write: what counts as written, and how many
//! writes a burst of requests through redis-rs' connection makes.

use std::future::poll_fn;
use std::sync::atomic::AtomicUsize;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, IntoConnectionInfo};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;

fn written(shared: &Shared) -> u64 {
    shared.written.load(Ordering::Relaxed)
}

/// Asserts that the far end of the stream received exactly `expected`.
async fn received(far: &mut DuplexStream, expected: &[u8]) {
    let mut seen = vec![0; expected.len()];
    far.read_exact(&mut seen).await.unwrap();
    assert_eq!(seen, expected);
}

/// Polls one write of `buf` once.
async fn write_once(counted: &mut Counted, buf: &[u8]) -> Poll<io::Result<usize>> {
    poll_fn(|cx| Poll::Ready(Pin::new(&mut *counted).poll_write(cx, buf))).await
}

#[tokio::test]
async fn a_held_write_is_not_written_until_the_next_turn() {
    let shared = Shared::new();
    let (near, mut far) = tokio::io::duplex(64);
    let mut counted = Counted::new(Box::pin(near), Arc::clone(&shared), Holding::TurnThenReply);

    assert!(
        write_once(&mut counted, b"PING\r\n").await.is_pending(),
        "held for one turn"
    );
    assert!(
        write_once(&mut counted, b"PING\r\n").await.is_pending(),
        "polled again in the same turn: still held"
    );
    assert_eq!(written(&shared), 0, "held bytes are not written");
    tokio::task::yield_now().await;
    // The codec offers its whole buffer again, with a request that joined.
    let Poll::Ready(Ok(12)) = write_once(&mut counted, b"PING\r\nPING\r\n").await else {
        panic!("the turn is over: written");
    };
    assert_eq!(written(&shared), 12);
    let Poll::Ready(Ok(6)) = write_once(&mut counted, b"PING\r\n").await else {
        panic!("more of the same flush is not held again");
    };
    counted.flush().await.unwrap();
    assert!(
        write_once(&mut counted, b"PING\r\n").await.is_pending(),
        "a request joined the last hold: the next flush is held too"
    );
    // Dropped while held, as when the driver ends: those bytes never count.
    drop(counted);
    assert_eq!(written(&shared), 18);

    received(&mut far, b"PING\r\nPING\r\nPING\r\n").await;
}

/// The server's reply to what `counted` wrote, read.
async fn answer(counted: &mut Counted, far: &mut DuplexStream) {
    far.write_all(b"+OK\r\n").await.unwrap();
    let mut reply = [0; 5];
    counted.read_exact(&mut reply).await.unwrap();
}

/// Holds `counted`'s next write for a turn that nothing joins.
async fn lone_hold(counted: &mut Counted, far: &mut DuplexStream) {
    counted.flush().await.unwrap();
    assert!(write_once(counted, b"PING\r\n").await.is_pending(), "held");
    tokio::task::yield_now().await;
    assert!(write_once(counted, b"PING\r\n").await.is_ready());
    answer(counted, far).await;
}

/// The flushes `counted` writes at once before it holds one again, each
/// answered.
async fn unheld_flushes(counted: &mut Counted, far: &mut DuplexStream) -> u8 {
    let mut unheld = 0;
    loop {
        counted.flush().await.unwrap();
        if write_once(counted, b"PING\r\n").await.is_pending() {
            tokio::task::yield_now().await;
            return unheld;
        }
        unheld += 1;
        answer(counted, far).await;
    }
}

#[tokio::test]
async fn lone_holds_in_a_row_turn_holding_off_for_more_and_more_flushes() {
    let (near, mut far) = tokio::io::duplex(1 << 16);
    let mut counted = Counted::new(Box::pin(near), Shared::new(), Holding::TurnThenReply);
    let (counted, far) = (&mut counted, &mut far);
    lone_hold(counted, far).await;
    assert_eq!(
        unheld_flushes(counted, far).await,
        0,
        "one lone hold is normal"
    );
    assert!(write_once(counted, b"PING\r\n").await.is_ready());
    answer(counted, far).await;
    assert_eq!(unheld_flushes(counted, far).await, 2);
    // That hold was lone too (the same bytes after the turn).
    assert!(write_once(counted, b"PING\r\n").await.is_ready());
    answer(counted, far).await;
    assert_eq!(unheld_flushes(counted, far).await, 4);
    assert!(write_once(counted, b"PING\r\n").await.is_ready());
    answer(counted, far).await;
    assert_eq!(unheld_flushes(counted, far).await, MOST_UNHELD);

    // A hold that a request joined: holding is back on every flush.
    let joined = write_once(counted, b"PING\r\nPING\r\n").await;
    assert!(joined.is_ready());
    answer(counted, far).await;
    assert_eq!(unheld_flushes(counted, far).await, 0);
}

/// A stream holding its writes as `holding` says that wrote one request
/// (after its turn) and flushed: its reply is due.
async fn one_request_written(holding: Holding) -> (Arc<Shared>, Counted, DuplexStream) {
    let shared = Shared::new();
    let (near, far) = tokio::io::duplex(1024);
    let mut counted = Counted::new(Box::pin(near), Arc::clone(&shared), holding);
    assert!(write_once(&mut counted, b"PING\r\n").await.is_pending());
    tokio::task::yield_now().await;
    assert!(write_once(&mut counted, b"PING\r\n").await.is_ready());
    counted.flush().await.unwrap();
    (shared, counted, far)
}

#[tokio::test]
async fn over_tls_while_a_reply_is_due_a_write_waits_for_it() {
    let (shared, mut counted, mut far) = one_request_written(Holding::TurnThenReply).await;

    // The next request: its turn passes, but the reply to the first is due.
    assert!(write_once(&mut counted, b"PING\r\n").await.is_pending());
    tokio::task::yield_now().await;
    assert!(
        write_once(&mut counted, b"PING\r\nPING\r\n")
            .await
            .is_pending(),
        "held while a reply is due"
    );
    assert_eq!(written(&shared), 6);
    answer(&mut counted, &mut far).await;
    let Poll::Ready(Ok(12)) = write_once(&mut counted, b"PING\r\nPING\r\n").await else {
        panic!("the reply was read: written, with the request that joined");
    };
    assert_eq!(written(&shared), 18);
}

/// Over plain TCP a write is never held, not even while a reply is due:
/// the server, done with what it read, would sit idle meanwhile (see the
/// module docs). Before, a write waited for its turn and then for the
/// reply here too.
#[tokio::test]
async fn over_plain_tcp_a_write_is_never_held() {
    let shared = Shared::new();
    let (near, mut far) = tokio::io::duplex(1024);
    let mut counted = Counted::new(Box::pin(near), Arc::clone(&shared), Holding::Never);
    let Poll::Ready(Ok(6)) = write_once(&mut counted, b"PING\r\n").await else {
        panic!("the first write of a flush is written at once");
    };
    counted.flush().await.unwrap();
    // The reply to it is due: the next request is written at once all the
    // same.
    let Poll::Ready(Ok(6)) = write_once(&mut counted, b"PING\r\n").await else {
        panic!("written at once, though the reply to the first is due");
    };
    assert_eq!(written(&shared), 12);
    received(&mut far, b"PING\r\nPING\r\n").await;
}

/// A server that does not answer (hung, or busy with a slow script) keeps
/// a held write back for at most REPLY_WAIT: what was handed over reaches
/// the wire, so a node that resumes runs it. Without the bound it stayed
/// held until the connection was dropped, and a compare-and-delete sent
/// behind a timed-out acquisition never reached the node.
#[tokio::test(start_paused = true)]
async fn a_reply_that_never_comes_holds_a_write_back_only_briefly() {
    let (shared, mut counted, mut far) = one_request_written(Holding::TurnThenReply).await;
    // A reply is due and never comes: the next write waits for it...
    assert!(write_once(&mut counted, b"DEL\r\n").await.is_pending());
    tokio::task::yield_now().await;
    assert!(write_once(&mut counted, b"DEL\r\n").await.is_pending());
    assert_eq!(written(&shared), 6);
    // ... but not past REPLY_WAIT: then it is written all the same, with
    // the request that joined meanwhile.
    tokio::time::advance(REPLY_WAIT).await;
    let Poll::Ready(Ok(10)) = write_once(&mut counted, b"DEL\r\nDEL\r\n").await else {
        panic!("written once the wait for the reply is over");
    };
    assert_eq!(written(&shared), 16);
    received(&mut far, b"PING\r\nDEL\r\nDEL\r\n").await;
    // The next wait starts afresh: held again while a reply is due.
    counted.flush().await.unwrap();
    assert!(write_once(&mut counted, b"GET\r\n").await.is_pending());
    tokio::task::yield_now().await;
    assert!(write_once(&mut counted, b"GET\r\n").await.is_pending());
}

#[tokio::test]
async fn a_full_record_is_not_held() {
    let shared = Shared::new();
    let (near, _far) = tokio::io::duplex(2 * FULL_RECORD);
    let mut counted = Counted::new(Box::pin(near), Arc::clone(&shared), Holding::TurnThenReply);
    let big = vec![b'x'; FULL_RECORD];
    let first = write_once(&mut counted, &big).await;
    assert!(matches!(first, Poll::Ready(Ok(FULL_RECORD))), "{first:?}");
    assert_eq!(written(&shared), FULL_RECORD as u64);
}

/// A stream that counts the writes made to it.
struct CountWrites {
    inner: DuplexStream,
    writes: Arc<AtomicUsize>,
}

impl CountWrites {
    fn count(&self, written: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(_)) = written {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        written
    }
}

impl AsyncRead for CountWrites {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountWrites {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count(written)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The length of the first complete RESP command (an array of bulk
/// strings, as clients send) in `buf`, if there is one.
fn command_len(buf: &[u8]) -> Option<usize> {
    let line = |at: usize| -> Option<(usize, usize)> {
        let end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        let n = std::str::from_utf8(&buf[at + 1..end]).ok()?.parse().ok()?;
        Some((n, end + 2))
    };
    let (args, mut at) = line(0)?;
    for _ in 0..args {
        let (len, start) = line(at)?;
        at = start + len + 2;
    }
    (at <= buf.len()).then_some(at)
}

/// A server that answers every command `+OK`.
async fn answer_ok(mut stream: DuplexStream) {
    let mut buf = Vec::new();
    let mut chunk = [0; 4096];
    while let Ok(n @ 1..) = stream.read(&mut chunk).await {
        buf.extend_from_slice(&chunk[..n]);
        let mut replies = Vec::new();
        while let Some(len) = command_len(&buf) {
            buf.drain(..len);
            replies.extend_from_slice(b"+OK\r\n");
        }
        if stream.write_all(&replies).await.is_err() {
            return;
        }
    }
}

/// Over TLS (plain TCP holds nothing). One worker, as the load bench's
/// runtime has per core; tasks that each send a request as soon as their
/// last one is answered, as the bench's.
/// Without the held write, each task handing over its request woke the
/// driver into the LIFO slot, ahead of the other tasks the same replies
/// woke, and almost every request was its own write.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn requests_handed_over_in_one_turn_go_out_in_one_write() {
    const TASKS: usize = 50;
    const ROUNDS: usize = 20;
    let (near, far) = tokio::io::duplex(1 << 16);
    tokio::spawn(answer_ok(far));
    let writes = Arc::new(AtomicUsize::new(0));
    let stream = CountWrites {
        inner: near,
        writes: Arc::clone(&writes),
    };
    let info = "redis://127.0.0.1:1".into_connection_info().unwrap();
    let (conn, driver) = MultiplexedConnection::new_with_config(
        info.redis_settings(),
        Counted::new(Box::pin(stream), Shared::new(), Holding::TurnThenReply),
        AsyncConnectionConfig::new(),
    )
    .await
    .unwrap();
    tokio::spawn(driver);
    let before = writes.load(Ordering::Relaxed);

    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let mut conn = conn.clone();
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let reply: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
                    assert_eq!(reply, "OK");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }

    let writes = writes.load(Ordering::Relaxed) - before;
    let requests = TASKS * ROUNDS;
    assert!(
        writes * 10 <= requests,
        "{requests} requests took {writes} writes"
    );
}
