//! Invalidations of cached denials, across processes: every change that
//! can make a cached denial wrong (a reset, an unblock, a reward, an
//! override change) is published by the script that makes it, on a channel
//! in the subject's own slot (`SPUBLISH`; `PUBLISH` on a standalone server
//! or Sentinel primary), and every process with a deny cache follows those
//! channels: the hub here is the [`ChannelSink`] of the transport's
//! subscriber (`cluster/subscriber.rs`), which holds the connections and
//! reports what it hears and which slots it follows.
//!
//! The message is the state key of the limit that changed, so a listener
//! knows the limiter (kind and name) and the subject; a quota slice giving
//! units back (`slice.lua`) sends its slices key instead, which listeners
//! hear as [`Listener::returned`]. The same messages revoke the quota
//! slices a process holds (`limit/stages/slices/table.rs`): a reset, block or
//! override change ends them; units given back only lift denials. Each master has one
//! channel per slot it serves, `<namespace>:{<tag>}:deny`, where `<tag>` is
//! a short string hashing to that slot: a fixed 16384 subscriptions per
//! process, however many subjects are cached.
//!
//! The hub keeps an epoch, bumped by every invalidation and every lost or
//! regained subscription, and which slots' channels are followed now: a
//! slot is live only while its own subscription was confirmed by the node
//! that owns the slot now (in the router's table) and that node's
//! subscription connection answers its health checks. A denial may be
//! cached only if the epoch did not move while its check was in flight,
//! and is cached and answered only while its subject's slot is live: an
//! invalidation that raced the check's reply, or that could have been
//! missed, keeps it out.
//!
//! It lives here, above the transport, because the deny caches and the
//! slice tables are its listeners and the limiters' scripts its
//! publishers; one hub per [`Cluster`] handle (and its clones) is kept in
//! the handle's extension slot ([`Invalidations::of`]).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, PoisonError, RwLock, Weak};

use crate::cluster::{ChannelSink, Cluster};
use crate::keys::{ParsedKey, SLOT_COUNT, slot};

/// The part of a limit's quota slices key (`<state key>:slices`), whose
/// name is the message when a slice gives units back.
pub(crate) const SLICES_PART: &str = "slices";

/// Something that caches denials and must forget them.
pub(crate) trait Listener: Send + Sync {
    /// The limit `kind`/`name` of `subject` changed.
    fn invalidate(&self, kind: &str, name: &str, subject: &[u8]);
    /// Units of the limit `kind`/`name` of `subject` came back from a
    /// quota slice (the message is the slices key): what was denied may
    /// be admitted now, and nothing else changed.
    fn returned(&self, kind: &str, name: &str, subject: &[u8]) {
        self.invalidate(kind, name, subject);
    }
    /// Anything may have changed (a subscription was lost).
    fn invalidate_all(&self);
}

/// One tag per slot: `TAGS[s]` hashes to slot `s`.
static TAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let slots = usize::from(SLOT_COUNT);
    let mut tags = vec![String::new(); slots];
    let mut missing = slots;
    let mut n: u64 = 0;
    // About 170,000 short strings fill every slot (coupon collector).
    while missing > 0 {
        let tag = format!("{n:x}");
        let s = usize::from(slot(tag.as_bytes()));
        if tags[s].is_empty() {
            tags[s] = tag;
            missing -= 1;
        }
        n += 1;
    }
    tags
});

/// The shard channel of `slot` under `namespace` (cluster deployments).
fn slot_channel(namespace: &str, slot: u16) -> String {
    format!("{namespace}:{{{}}}:deny", TAGS[usize::from(slot)])
}

/// The one channel of a standalone server or Sentinel primary.
fn server_channel(namespace: &str) -> String {
    format!("{namespace}:deny")
}

/// How a script on `slot` tells every process's deny caches and slice
/// tables of a change: the command (`SPUBLISH`, or `PUBLISH` where one
/// server serves every slot) and the channel.
pub(crate) fn publish_to(cluster: &Cluster, slot: u16) -> (&'static str, String) {
    if cluster.is_standalone() {
        ("PUBLISH", server_channel(cluster.namespace()))
    } else {
        ("SPUBLISH", slot_channel(cluster.namespace(), slot))
    }
}

/// The process-wide (per [`Cluster`] handle and its clones) hub of
/// invalidations.
pub(crate) struct Invalidations {
    namespace: String,
    epoch: AtomicU64,
    /// Per slot: its channel is followed on its owner now.
    live: Box<[AtomicBool]>,
    /// How many slots are live.
    live_count: AtomicUsize,
    started: AtomicBool,
    listeners: RwLock<Vec<Weak<dyn Listener>>>,
}

impl Invalidations {
    /// The hub of `cluster`'s handle and its clones, made on first use.
    /// Takes the extension slot's lock: not for the check path, where a
    /// deny cache or slice table holds the `Arc` it got when built.
    pub(crate) fn of(cluster: &Cluster) -> Arc<Invalidations> {
        cluster.extension(|| Invalidations::new(cluster.namespace()))
    }

    fn new(namespace: &str) -> Self {
        Invalidations {
            namespace: namespace.to_owned(),
            epoch: AtomicU64::new(0),
            live: (0..SLOT_COUNT).map(|_| AtomicBool::new(false)).collect(),
            live_count: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            listeners: RwLock::new(Vec::new()),
        }
    }

    /// Bumped by every invalidation and subscription change.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Whether `slot`'s channel is followed now, on the slot's owner.
    pub(crate) fn is_live(&self, slot: u16) -> bool {
        self.live
            .get(usize::from(slot))
            .is_some_and(|l| l.load(Ordering::SeqCst))
    }

    /// Starts the transport's subscriber for this hub, once, so that other
    /// processes' invalidations reach it. Needs a running tokio runtime:
    /// without one nothing starts, and the next call tries again. One
    /// atomic load once started: a check may call it every time.
    pub(crate) fn follow(self: &Arc<Self>, cluster: &Cluster) {
        if self.started.load(Ordering::SeqCst) {
            return;
        }
        // The runtime first: a call without one must not take the start
        // from a concurrent call with one.
        if tokio::runtime::Handle::try_current().is_err()
            || self.started.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let sink: Arc<dyn ChannelSink> = self.clone();
        cluster.follow_channels(Arc::downgrade(&sink));
    }

    /// `listener` hears of every change from now on, until it is dropped,
    /// and `cluster`'s channels are followed (subscribing takes a moment,
    /// a command per slot: started now, if a runtime is running, rather
    /// than at the first check). Returns the handle's hub.
    pub(crate) fn listen(cluster: &Cluster, listener: Arc<dyn Listener>) -> Arc<Invalidations> {
        let hub = Invalidations::of(cluster);
        hub.register(Arc::downgrade(&listener));
        hub.follow(cluster);
        hub
    }

    /// Keeps what a check sent at epoch `ticket` learned of a subject of
    /// `slot`: `keep` runs only if the slot is live and nothing was
    /// announced since, and `forget` after it if an announcement came
    /// meanwhile (it found nothing to forget).
    pub(crate) fn keep_unless_announced(
        &self,
        ticket: u64,
        slot: u16,
        keep: impl FnOnce(),
        forget: impl FnOnce(),
    ) {
        if self.epoch() != ticket || !self.is_live(slot) {
            return;
        }
        keep();
        if self.epoch() != ticket {
            forget();
        }
    }

    /// `listener` hears of every change from now on, until it is dropped.
    pub(crate) fn register(&self, listener: Weak<dyn Listener>) {
        let mut listeners = self
            .listeners
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        listeners.retain(|l| l.strong_count() > 0);
        listeners.push(listener);
    }

    fn each(&self, f: impl Fn(&dyn Listener)) {
        let listeners = self
            .listeners
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        for listener in listeners.iter().filter_map(Weak::upgrade) {
            f(&*listener);
        }
    }

    /// `key` (a limit's state key) changed: here, or in another process
    /// (a published message). Keys of other namespaces are ignored.
    pub(crate) fn key_changed(&self, key: &[u8]) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        let Ok(parsed) = ParsedKey::parse(key) else {
            return;
        };
        if parsed.namespace != self.namespace {
            return;
        }
        if parsed.part == Some(SLICES_PART) {
            self.each(|l| l.returned(parsed.kind, parsed.name, &parsed.subject));
        } else {
            self.each(|l| l.invalidate(parsed.kind, parsed.name, &parsed.subject));
        }
    }
}

impl ChannelSink for Invalidations {
    fn slot_channel(&self, slot: u16) -> String {
        slot_channel(&self.namespace, slot)
    }

    fn server_channel(&self) -> String {
        server_channel(&self.namespace)
    }

    fn message(&self, payload: &[u8]) {
        self.key_changed(payload);
    }

    /// The subscriptions of `slots` were lost (or are not confirmed):
    /// their messages may be missed, so nothing cached stays (of any slot:
    /// entries are not kept by slot) and nothing new of theirs is cached.
    fn lost(&self, slots: &[u16]) {
        let mut any = false;
        for &slot in slots {
            if let Some(live) = self.live.get(usize::from(slot))
                && live.swap(false, Ordering::SeqCst)
            {
                self.live_count.fetch_sub(1, Ordering::SeqCst);
                any = true;
            }
        }
        if any {
            self.epoch.fetch_add(1, Ordering::SeqCst);
            self.each(|l| l.invalidate_all());
        }
    }

    /// Every slot's subscription was lost.
    fn lost_all(&self) {
        let every: Vec<u16> = (0..SLOT_COUNT).collect();
        self.lost(&every);
    }

    /// `slot`'s channel is followed (again) on its owner: its subscription
    /// was confirmed.
    fn gained(&self, slot: u16) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if let Some(live) = self.live.get(usize::from(slot))
            && !live.swap(true, Ordering::SeqCst)
        {
            self.live_count.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Every slot's channel is followed (a standalone server's one channel).
    fn gained_all(&self) {
        for slot in 0..SLOT_COUNT {
            self.gained(slot);
        }
    }
}

impl std::fmt::Debug for Invalidations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invalidations")
            .field("epoch", &self.epoch())
            .field("live_slots", &self.live_count.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn every_slot_has_a_channel_in_it() {
        let hub = Invalidations::new("sl");
        for s in [0, 1, 5000, 16383] {
            let channel = hub.slot_channel(s);
            assert_eq!(slot(channel.as_bytes()), s, "{channel}");
        }
        assert!(TAGS.iter().all(|t| t.len() <= 5));
    }

    #[derive(Default)]
    struct Seen(Mutex<Vec<String>>);

    impl Listener for Seen {
        fn invalidate(&self, kind: &str, name: &str, subject: &[u8]) {
            let subject = String::from_utf8_lossy(subject);
            self.0
                .lock()
                .unwrap()
                .push(format!("{kind}/{name}/{subject}"));
        }
        fn invalidate_all(&self) {
            self.0.lock().unwrap().push("all".into());
        }
    }

    fn all_live(hub: &Invalidations) -> bool {
        hub.live_count.load(Ordering::SeqCst) == usize::from(SLOT_COUNT)
    }

    #[test]
    fn a_slot_channel_is_named_as_the_scripts_publish_it() {
        let hub = Invalidations::new("sl");
        // The tag of slot 0 is the first hex number hashing to it.
        let tag = (0_u64..)
            .map(|n| format!("{n:x}"))
            .find(|t| slot(t.as_bytes()) == 0)
            .unwrap();
        assert_eq!(hub.slot_channel(0), format!("sl:{{{tag}}}:deny"));
        assert_eq!(hub.server_channel(), "sl:deny");
    }

    #[test]
    fn changes_reach_listeners_and_move_the_epoch() {
        let hub = Invalidations::new("sl");
        let seen = Arc::new(Seen::default());
        let weak: Weak<dyn Listener> = Arc::downgrade(&seen) as Weak<dyn Listener>;
        hub.register(weak);
        assert!(!hub.is_live(7) && !all_live(&hub));
        hub.gained(7);
        assert!(hub.is_live(7) && !hub.is_live(8) && !all_live(&hub));
        hub.gained_all();
        assert!(all_live(&hub));
        let before = hub.epoch();
        hub.key_changed(b"sl:{user%7B1%7D}:gcra:api");
        hub.key_changed(b"other:{u}:gcra:api");
        hub.key_changed(b"not a key");
        assert_eq!(hub.epoch(), before + 3);
        hub.lost(&[7, 9]);
        assert!(!hub.is_live(7) && !hub.is_live(9) && hub.is_live(8));
        assert!(!all_live(&hub));
        // Losing what is not live changes nothing.
        let before = hub.epoch();
        hub.lost(&[7]);
        assert_eq!(hub.epoch(), before);
        // What the subscriber reports: a published message, then every
        // subscription lost.
        hub.message(b"sl:{v}:gcra:api");
        hub.lost_all();
        assert!(!hub.is_live(8) && hub.live_count.load(Ordering::SeqCst) == 0);
        assert_eq!(
            *seen.0.lock().unwrap(),
            ["gcra/api/user{1}", "all", "gcra/api/v", "all"]
        );
        drop(seen);
        // A dropped listener is skipped, then pruned.
        hub.key_changed(b"sl:{u}:gcra:api");
        hub.register(Weak::<Seen>::new());
        assert_eq!(hub.listeners.read().unwrap().len(), 1);
    }
}
