//! The stream a node's connection writes to: it counts the bytes the
//! socket takes, and over TLS holds each flush's first write back for one
//! turn of the scheduler so that the requests handed over meanwhile go out
//! with it.
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
//! So over TLS the first write after a flush waits one turn of the
//! scheduler, as
//! [`tokio::task::yield_now`] does: until every task runnable on the
//! worker has run and the I/O driver was polled — so until those tasks
//! handed over their requests — and then writes them all: one syscall, one
//! record. A lone request gains nothing by waiting, and the turn costs
//! the worker a poll of the I/O driver and often a wake-up of the other
//! worker (measured at 1 in flight: +13–20 µs of CPU per check over TLS,
//! +30 µs p50); so after held writes that nothing joined, the next few
//! flushes go out at once ([`unheld_after`]).
//!
//! Over TLS, while replies are due on the connection, the held write
//! also waits for the next of them to be read — Nagle's rule, with a
//! reply for the acknowledgement: the server answers a connection's
//! requests in order, so a request written now would mostly queue behind
//! those anyway, and every request handed over until then joins the
//! write. Without it the connection settled into small batches over TLS
//! (measured at load average 4: about 2 replies per read against 10
//! plain, so every per-batch cost — a wake-up, a read, a decryption, a
//! sealed record — was paid 4× as often), and holding made TLS/plain
//! client CPU per decision 1.36 and 1.12 in two runs where the turn alone
//! made it 2.05 and 1.32.
//!
//! Over plain TCP nothing is held ([`Holding`]): each flush is written
//! as redis-rs' driver makes it, as bare redis-rs writes it. There the
//! holds cost more than they saved: with the reply wait the server, done
//! with what it had read, sat idle until the client had read the replies
//! and written the next requests, where without it they had reached the
//! server while it worked; the turn alone kept part of that. Where the
//! server is the bottleneck (GCRA checks on one master, 64 in flight,
//! against bare redis-rs on one connection, four runs of alternated
//! rounds, each hold on its own connection in the same process), the
//! ratio of decisions per second was 0.71–0.76 with both holds, 0.79–0.90
//! with the turn alone and 0.89–0.96 with neither at depth 1; 0.84–0.96,
//! 0.82–0.93 and 0.91–0.98 at depth 16 — at the same reads per decision
//! on the server (0.033 at depth 1, 0.008 at 16) and client CPU per
//! decision within 10% of each other. Over TLS it was not measured again:
//! there every write is a sealed record, which the server decrypts.
//!
//! Two simpler holds measured worse. Waking the task's own waker queues
//! it behind the runnable tasks too, but notifies an idle worker, which
//! steals the driver: twice the futex calls and context switches, and
//! more CPU than the writes saved. `yield_now` alone ends at the next poll,
//! and the next request handed over polls the driver at once: half the
//! requests still went out alone.
//!
//! The codec keeps the held bytes; none of them count as written before
//! the socket took them (see [`Socket::written`](super::Socket::written)).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Shared;

/// A write this large goes out at once: a full TLS record's plaintext,
/// nothing to gain by waiting for more.
const FULL_RECORD: usize = 16 * 1024;

/// The longest a held write waits for a due reply. Under load replies
/// come every few hundred microseconds, so the wait rarely reaches it; a
/// server that hangs (or a slow script, a `WAIT`) would otherwise keep
/// what was handed over off the wire until it answers — and a request the
/// handle then gives up on would never reach the node. Above all the
/// compare-and-delete sent behind an acquisition that timed out must be on
/// the wire before the connection is dropped, so that a node that resumes
/// runs it right after the acquisition (`faults::acquire`: 7 locks were
/// left held by no one when the wait had no bound).
const REPLY_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

/// The most flushes that go out without holding after holds that no
/// request joined: a lone caller pays the turn on one request in 9.
const MOST_UNHELD: u8 = 8;

/// How many flushes go out without holding after `lone_holds` holds in a
/// row that no request joined: none after one (a busy connection has those
/// now and then: the requests of a turn went to other nodes), then 2, 4,
/// and [`MOST_UNHELD`].
fn unheld_after(lone_holds: u8) -> u8 {
    match lone_holds.checked_sub(1) {
        None | Some(0) => 0,
        Some(doublings) => 1u8
            .checked_shl(u32::from(doublings))
            .unwrap_or(MOST_UNHELD)
            .min(MOST_UNHELD),
    }
}

/// What a [`Counted`] stream writes to: the TCP socket or the TLS session
/// over it.
pub(super) trait Stream: AsyncRead + AsyncWrite + Send + Sync {}
impl<S: AsyncRead + AsyncWrite + Send + Sync> Stream for S {}

/// Whether and how long a flush's first write is held back (see the
/// module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holding {
    /// Never: over plain TCP.
    Never,
    /// One turn of the scheduler, then while replies are due until the
    /// next of them is read (at most [`REPLY_WAIT`]): over TLS, where
    /// each write is a sealed record.
    TurnThenReply,
}

/// A stream that counts the bytes its socket accepts and, over TLS, holds
/// each flush's first write back (see [`Holding`]).
pub(super) struct Counted {
    inner: Pin<Box<dyn Stream>>,
    shared: Arc<Shared>,
    holding: Holding,
    /// Whether this flush's writes were held back already.
    held: bool,
    /// The scheduler turn a held write waits for.
    turn: Option<Arc<Turn>>,
    /// Flushes still to write without holding them back.
    unheld: u8,
    /// Holds in a row that no request joined.
    lone_holds: u8,
    /// Whether bytes were written since a read last returned any: the
    /// server owes replies.
    reply_due: bool,
    /// The bound on a held write's wait for a due reply ([`REPLY_WAIT`]),
    /// armed while it waits; made once, reset for each wait.
    reply_wait: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether `reply_wait` is armed for the current wait.
    waiting: bool,
}

impl Counted {
    pub(super) fn new(inner: Pin<Box<dyn Stream>>, shared: Arc<Shared>, holding: Holding) -> Self {
        Counted {
            inner,
            shared,
            holding,
            held: false,
            turn: None,
            unheld: 0,
            lone_holds: 0,
            reply_due: false,
            reply_wait: None,
            waiting: false,
        }
    }

    /// Over TLS, `Pending` the first time a flush writes (unless the write
    /// fills a record, or holding is off for now), until the tasks
    /// runnable on this worker have run.
    fn hold(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<()> {
        if self.held || len >= FULL_RECORD || self.holding == Holding::Never {
            return Poll::Ready(());
        }
        if self.unheld > 0 {
            self.unheld -= 1;
            self.held = true;
            return Poll::Ready(());
        }
        let turn = self.turn.get_or_insert_with(|| Turn::start(cx, len));
        // Woken early (by a request handed over, say), the driver takes it
        // into the codec's buffer and comes back here: still held.
        if !turn.over(cx) {
            return Poll::Pending;
        }
        let turn_len = turn.len;
        // Replies are due: held until the next of them is read (the driver
        // reads before it writes, so that read wakes it), or REPLY_WAIT has
        // passed, and the requests handed over meanwhile go out with this
        // one.
        if self.reply_due && !self.reply_wait_over(cx) {
            return Poll::Pending;
        }
        self.waiting = false;
        if len > turn_len {
            self.lone_holds = 0;
        } else {
            // Nothing joined: the requests may be coming one at a time.
            self.lone_holds = self.lone_holds.saturating_add(1);
            self.unheld = unheld_after(self.lone_holds);
        }
        self.turn = None;
        self.held = true;
        Poll::Ready(())
    }

    /// Whether the held write has waited [`REPLY_WAIT`] for a due reply;
    /// if not, the task of `cx` is woken when it has.
    fn reply_wait_over(&mut self, cx: &mut Context<'_>) -> bool {
        let deadline = tokio::time::Instant::now() + REPLY_WAIT;
        let sleep = self
            .reply_wait
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.waiting {
            sleep.as_mut().reset(deadline);
            self.waiting = true;
        }
        sleep.as_mut().poll(cx).is_ready()
    }

    fn count(&mut self, written: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = written {
            self.reply_due |= *n > 0;
            // Read after the driver ended, which orders it after this.
            self.shared
                .written
                .fetch_add(u64::try_from(*n).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
    }
}

/// One turn of the scheduler: over when tokio wakes the tasks that
/// yielded, which it does once it has run every task runnable on this
/// worker and polled the I/O driver.
struct Turn {
    /// The length of the held write when the turn started.
    len: usize,
    over: AtomicBool,
    /// The task holding its write back.
    task: AtomicWaker,
}

impl Turn {
    /// A turn starting now, for the task of `cx` holding `len` bytes.
    fn start(cx: &Context<'_>, len: usize) -> Arc<Self> {
        let turn = Arc::new(Turn {
            len,
            over: AtomicBool::new(false),
            task: AtomicWaker::new(),
        });
        turn.task.register(cx.waker());
        // `yield_now` hands the waker of its first poll to the scheduler's
        // yielded tasks, and is done with it.
        let waker = Waker::from(Arc::clone(&turn));
        let yielding = std::pin::pin!(tokio::task::yield_now());
        let _pending = yielding.poll(&mut Context::from_waker(&waker));
        turn
    }

    /// Whether the turn is over; if not, the task of `cx` is woken when it
    /// is.
    fn over(&self, cx: &Context<'_>) -> bool {
        self.task.register(cx.waker());
        self.over.load(Ordering::Acquire)
    }
}

impl Wake for Turn {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.over.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = self.inner.as_mut().poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = read {
            if buf.filled().len() > before {
                self.reply_due = false;
            }
        }
        read
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
