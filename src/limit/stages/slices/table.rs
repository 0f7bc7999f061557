//! The slices a process holds (see [`Slices`]): per subject, the
//! slice this process decides from, a denial Redis gave when the limit
//! was spent, and one take at a time. Taking and giving back are one call
//! each of `slice.lua`; a reset, block or override change anywhere revokes
//! the subject's slice through the deny caches' invalidation channel.
//! With automatic slicing ([`Slices::when_hot`]) a subject enters the
//! table when [`HotSubjects`] finds it hot and leaves it, its slice given
//! back, when the sweep finds it cooled.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, Weak};
use std::time::{Duration, Instant};

use rand::Rng;

use super::hot::{Heat, HotSubjects};
use super::reply::{Denial, Held, Slice, TakeReply, admitted, denied, local, revoke, spent};
use super::{Ask, Slices};
use crate::cluster::Cluster;
use crate::error::Result;
use crate::keys::{KeyId, KeySet, subject_slot};
use crate::limit::algorithm;
use crate::limit::decision::Decision;
use crate::limit::invalidation::{Invalidations, Listener, SLICES_PART, publish_to};
use crate::limit::quota::Quota;
use crate::limit::script::LimitSpec;

struct Subject {
    held: Mutex<Held>,
    /// One take at a time per subject in this process: the others wait for
    /// it, then decide from what it brought.
    take: tokio::sync::Mutex<()>,
}

/// What the slice table answers a check from alone.
pub(crate) enum Fast {
    /// Decided from the subject's slice or denial.
    Decided(Decision),
    /// The subject is in the table: a take (or an exact check) follows.
    Sliced,
    /// The subject is not in the table.
    Unsliced,
}

/// What a check of a sliced limiter does after looking at its slice.
pub(crate) enum Next {
    Decided(Decision),
    Exact,
}

/// The slices of one limiter in this process.
pub(crate) struct SliceTable {
    config: Slices,
    cluster: Cluster,
    /// State, override, block and slices keys' ids, in the script's order.
    ids: [KeyId; 4],
    /// Read by every decision, written when a subject comes or goes.
    subjects: RwLock<HashMap<Box<[u8]>, Arc<Subject>>>,
    hub: Arc<Invalidations>,
    sweeping: AtomicBool,
    /// With automatic slicing: which subjects enter the table.
    hot: Option<HotSubjects>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SliceTable {
    pub(crate) fn new(cluster: &Cluster, spec: &LimitSpec, config: Slices) -> Result<Arc<Self>> {
        let ids = [
            spec.id.clone(),
            spec.override_id.clone(),
            spec.block_id.clone(),
            spec.id.with_part(SLICES_PART)?,
        ];
        let table = Arc::new(SliceTable {
            config,
            cluster: cluster.clone(),
            ids,
            subjects: RwLock::new(HashMap::new()),
            hub: Invalidations::of(cluster),
            sweeping: AtomicBool::new(false),
            hot: HotSubjects::new(&config, Instant::now()),
        });
        let listener: Arc<dyn Listener> = table.clone();
        table.hub.register(Arc::downgrade(&listener));
        table.hub.follow(cluster);
        Ok(table)
    }

    pub(crate) fn config(&self) -> Slices {
        self.config
    }

    fn keys(&self, subject: &[u8]) -> Result<KeySet> {
        self.cluster.keys().key_set(subject, &self.ids)
    }

    fn read(&self) -> RwLockReadGuard<'_, HashMap<Box<[u8]>, Arc<Subject>>> {
        self.subjects.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The decision the slice held (or a denial) gives now, if any: the
    /// path of almost every decision of a hot subject, which reads no spec
    /// and clones nothing shared. Counts the check towards the subject's
    /// heat.
    pub(crate) fn fast(&self, subject: &[u8], cost: u32) -> Fast {
        let subjects = self.read();
        let Some(entry) = subjects.get(subject) else {
            return Fast::Unsliced;
        };
        let mut held = lock(&entry.held);
        held.heat.checked();
        if cost == 0 {
            return Fast::Sliced; // refused by the exact check
        }
        match local(&mut held, cost, || self.is_live(subject)) {
            Some(d) => Fast::Decided(d),
            None => Fast::Sliced,
        }
    }

    /// Whether a check of `subject`, which is not in the table, should
    /// enter it: always, unless slicing is automatic; then, when this check
    /// makes the subject hot (counted in the sketch).
    pub(crate) fn admits(&self, subject: &[u8]) -> bool {
        match &self.hot {
            None => true,
            Some(hot) => hot.offer(subject, Instant::now()),
        }
    }

    fn is_live(&self, subject: &[u8]) -> bool {
        self.hub.is_live(subject_slot(subject))
    }

    fn subject(&self, subject: &[u8]) -> Option<Arc<Subject>> {
        {
            let subjects = self.read();
            if let Some(s) = subjects.get(subject) {
                return Some(s.clone());
            }
            // Full: no write lock (a hot subject that finds no room asks
            // again at every check).
            if subjects.len() >= self.config.max_subject_count() {
                return None;
            }
        }
        let mut subjects = self
            .subjects
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = subjects.get(subject) {
            return Some(s.clone());
        }
        if subjects.len() >= self.config.max_subject_count() {
            return None;
        }
        let s = Arc::new(Subject {
            held: Mutex::new(Held {
                heat: Heat::starting(Instant::now()),
                ..Held::default()
            }),
            take: tokio::sync::Mutex::new(()),
        });
        subjects.insert(subject.into(), s.clone());
        Some(s)
    }

    /// What a check of `subject` for `cost` under `spec` gets from the
    /// slices: a decision from the slice held or a new one, or `Exact`; an
    /// error of the take, for the failure policy.
    pub(crate) async fn decide(
        self: &Arc<Self>,
        spec: &LimitSpec,
        subject: &[u8],
        cost: u32,
    ) -> Result<Next> {
        self.start_sweeping();
        let entry = match self.subject(subject) {
            Some(entry) if !spec.shadow && cost >= 1 && cost <= spec.capacity => entry,
            _ => return Ok(Next::Exact),
        };
        let live = || self.is_live(subject);
        let seen = {
            let mut held = lock(&entry.held);
            if let Some(d) = local(&mut held, cost, live) {
                return Ok(Next::Decided(d));
            }
            held.takes
        };
        let _taking = entry.take.lock().await;
        let prepared = {
            let mut held = lock(&entry.held);
            if let Some(d) = local(&mut held, cost, live) {
                return Ok(Next::Decided(d));
            }
            // Another task's take, completed while this one waited for it,
            // found the limit spent and brought too little for this
            // request too: denied as Redis denied then, not queued for the
            // next take (under overload, requests would queue without end).
            if held.takes != seen
                && let Some((quota, capacity)) = held.spent
            {
                return Ok(Next::Decided(spent(quota, capacity, cost)));
            }
            self.prepare(&mut held, spec.quota.limit().get(), cost)
        };
        let Some((old, generation, ask)) = prepared else {
            return Ok(Next::Exact);
        };
        let sent = Instant::now();
        let reply = self.take(spec, subject, cost, ask, old.as_ref()).await?;
        Ok(self.taken(&entry, reply, generation, sent, ask, cost))
    }

    /// Before a take: the slice to give back, the generation and what to
    /// ask for (from the rate this process used the last slice at);
    /// `None` while takes pause (exact checks instead).
    fn prepare(&self, held: &mut Held, limit: u32, cost: u32) -> Option<(Option<Slice>, u64, Ask)> {
        let now = Instant::now();
        if held.exact_until.is_some_and(|t| now < t) {
            return None;
        }
        let old = held.retire(now);
        Some((
            old,
            held.generation,
            self.config.ask(held.rate, limit, cost),
        ))
    }

    /// What a take's reply means for the subject's state and this request.
    fn taken(
        &self,
        entry: &Subject,
        reply: TakeReply,
        generation: u64,
        sent: Instant,
        ask: Ask,
        cost: u32,
    ) -> Next {
        let lifetime = self.config.lifetime();
        let mut held = lock(&entry.held);
        let until = sent + ask.lasting;
        held.takes += 1;
        if let Some((_, units)) = &mut held.since_spent {
            *units = units.saturating_add(reply.granted);
        }
        let share = held
            .since_spent
            .map(|(at, units)| (sent.saturating_duration_since(at), units));
        if reply.spent {
            held.since_spent = Some((sent, 0));
        }
        held.spent = (reply.spent && !reply.blocked && held.generation == generation)
            .then_some((reply.quota, reply.capacity));
        // The limit is spent after this take: once its slice is used, the
        // next requests are denied here for a pause rather than each
        // taking the few units that came back since.
        let pause =
            (reply.spent && !reply.overridden && !reply.blocked && held.generation == generation)
                .then(|| sent + self.spent_pause(reply.quota, reply.capacity, share));
        if let Some(member) = reply.member {
            let mut slice = Slice {
                member,
                granted: reply.granted,
                left: reply.granted,
                // The rate is measured from when it could be used.
                taken: Instant::now(),
                until,
                quota: reply.quota,
                capacity: reply.capacity,
                overridden: reply.overridden,
            };
            if held.generation != generation {
                // Revoked while in flight: given back, never used.
                slice.until = sent;
                held.slice = Some(slice);
                return Next::Exact;
            }
            if slice.left >= cost {
                slice.left -= cost;
                let d = admitted(slice.quota, slice.capacity, slice.left, slice.overridden);
                held.denial = pause.map(|until| Denial {
                    until,
                    cost: 1,
                    quota: slice.quota,
                    capacity: slice.capacity,
                });
                held.slice = Some(slice);
                return Next::Decided(d);
            }
            held.slice = Some(slice);
        }
        match reply.retry {
            // The limit itself is spent: Redis would deny this cost until
            // then, unless something announced changes it first.
            Some(retry) if !reply.overridden && !reply.blocked && held.generation == generation => {
                let denial = Denial {
                    until: pause.map_or(sent + retry, |until| until.max(sent + retry)),
                    cost,
                    quota: reply.quota,
                    capacity: reply.capacity,
                };
                let d = denied(
                    denial.quota,
                    denial.capacity,
                    denial.until.saturating_duration_since(Instant::now()),
                );
                held.denial = Some(denial);
                Next::Decided(d)
            }
            Some(_) => Next::Exact,
            None => {
                // The bound (or a block) refused: exact checks for a while.
                let pause = if reply.blocked {
                    lifetime
                } else {
                    lifetime / 8
                };
                held.exact_until = Some(Instant::now() + pause);
                Next::Exact
            }
        }
    }

    /// How long a take that found the limit spent is followed by local
    /// denials (`share`: the time since this process's previous take that
    /// found it spent was sent, and the units taken since, this take's
    /// included): until this process's share of what comes back makes a
    /// slice worth a take, [`Slices::DEFAULT_UNITS_PER_SLICE`] units at
    /// that share (no share is known before a second spent take, nor when
    /// nothing came back to this process); at least a sixteenth of a
    /// lifetime, at most the time half the capacity takes to come back.
    /// Asking sooner costs Redis a take for a few units: at 200,000/s a
    /// unit comes back every 5 µs (a take per request or two without any
    /// pause), and a limit of 2,000/s spent by four processes gave each
    /// about 3 units per sixteenth of a lifetime, about what exact checks
    /// of them would have cost (the skewed bench: such takes were 70% of
    /// its takes). Nothing is lost but time: the units that come back
    /// meanwhile stay in Redis for the next take (any process's), and the
    /// bucket cannot fill in that time, so none is lost while demand
    /// lasts. A reset, block, override or give-back lifts the pause at
    /// once.
    fn spent_pause(&self, quota: Quota, capacity: u32, share: Option<(Duration, u32)>) -> Duration {
        let half_refill =
            (quota.period() / quota.limit().get()).saturating_mul((capacity / 2).max(1));
        let shortest = self.config.lifetime() / 16;
        let worth = f64::from(Slices::DEFAULT_UNITS_PER_SLICE);
        let worth_back = match share {
            Some((over, units)) if units > 0 => {
                let secs = over.as_secs_f64() * worth / f64::from(units);
                Duration::try_from_secs_f64(secs).unwrap_or(half_refill)
            }
            _ => shortest,
        };
        worth_back.max(shortest).min(half_refill)
    }

    /// One `take` call: a new slice of up to `wanted` units, giving `old`
    /// back first.
    async fn take(
        &self,
        spec: &LimitSpec,
        subject: &[u8],
        cost: u32,
        ask: Ask,
        old: Option<&Slice>,
    ) -> Result<TakeReply> {
        let keys = self.keys(subject)?;
        let id = format!("{:016x}", rand::rng().random::<u64>());
        let args = self.args(&keys, Some((&id, ask)), cost, spec.quota, old);
        let reply: Vec<i64> = self.cluster.eval(&algorithm::SLICE, &keys, args).await?;
        TakeReply::parse(&reply, &id, spec)
    }

    /// One `return` call: gives back what `slice` did not use.
    async fn give_back(&self, subject: &[u8], slice: &Slice) -> Result<()> {
        let keys = self.keys(subject)?;
        let args = self.args(&keys, None, 0, slice.quota, Some(slice));
        let _: Vec<i64> = self.cluster.eval(&algorithm::SLICE, &keys, args).await?;
        Ok(())
    }

    /// The script's ARGV: a take of `new` (the new slice's id and what it
    /// asks for), or with none a return of `old`.
    fn args(
        &self,
        keys: &KeySet,
        new: Option<(&str, Ask)>,
        cost: u32,
        quota: Quota,
        old: Option<&Slice>,
    ) -> Vec<Vec<u8>> {
        let (publish, channel) = publish_to(&self.cluster, keys.slot());
        let (member, unused) = old.map_or((String::new(), 0), |s| (s.member.clone(), s.left));
        let micros = |q: Quota| u64::try_from(q.period().as_micros()).unwrap_or(u64::MAX);
        // The quota the given-back slice was taken under, which prices it.
        let (taken_limit, taken_period) = old.map_or((String::new(), String::new()), |s| {
            (s.quota.limit().to_string(), micros(s.quota).to_string())
        });
        let period = micros(quota);
        let (op, id, wanted, lasting) = match new {
            Some((id, ask)) => ("take", id, ask.units, ask.lasting),
            None => ("return", "", 0, Duration::ZERO),
        };
        // Counted in Redis for twice as long as it is decided from.
        let lifetime = u64::try_from(lasting.as_micros() * 2).unwrap_or(u64::MAX);
        vec![
            op.into(),
            id.into(),
            wanted.to_string().into(),
            cost.to_string().into(),
            lifetime.to_string().into(),
            quota.limit().to_string().into(),
            period.to_string().into(),
            quota.burst().to_string().into(),
            self.config.ppm().to_string().into(),
            member.into(),
            unused.to_string().into(),
            publish.into(),
            channel.into(),
            keys.keys()[3].clone(),
            taken_limit.into(),
            taken_period.into(),
        ]
    }

    /// Gives back every slice this process holds of this limiter, all at
    /// once; the first failure is returned after all were tried.
    pub(crate) async fn return_all(&self) -> Result<()> {
        let held = self.drain(|_| true, false);
        let results =
            futures::future::join_all(held.iter().map(|(s, slice)| self.give_back(s, slice))).await;
        results.into_iter().collect::<Result<Vec<()>>>().map(drop)
    }

    /// Takes out of the table the slices `pick` chooses, and forgets idle
    /// subjects. With automatic slicing a subject stays while it is hot,
    /// idle between slices or not (forgotten, it would have to earn its
    /// place again in the sketch); with `cool` (the sweep), one that has
    /// cooled gives its slice back now and leaves once nothing uses its
    /// entry, and its checks are exact from then on. Its slice is taken
    /// out under the lock its decisions take, so no unit given back is
    /// also admitted here: the bound holds across the transition.
    fn drain(&self, pick: impl Fn(&Slice) -> bool, cool: bool) -> Vec<(Box<[u8]>, Slice)> {
        let now = Instant::now();
        let mut out = Vec::new();
        let mut subjects = self
            .subjects
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        subjects.retain(|subject, entry| {
            let mut held = lock(&entry.held);
            let (cooled, give_back) = match &self.hot {
                None => (true, false),
                Some(hot) => {
                    let cooled = cool && hot.cooled(&mut held.heat, now);
                    (cooled, cooled)
                }
            };
            if held.slice.as_ref().is_some_and(|s| give_back || pick(s))
                && let Some(slice) = held.retire(now)
            {
                out.push((subject.clone(), slice));
            }
            let busy = held.slice.is_some()
                || held.denial.as_ref().is_some_and(|d| now < d.until)
                || held.exact_until.is_some_and(|t| now < t)
                || entry.take.try_lock().is_err();
            !cooled || busy || Arc::strong_count(entry) > 1
        });
        out
    }

    /// Once per table: gives back slices that ended, every half lifetime,
    /// while the table lives.
    fn start_sweeping(self: &Arc<Self>) {
        // Read first: a swap on every decision would bounce the line.
        if self.sweeping.load(Ordering::Relaxed) || self.sweeping.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak: Weak<Self> = Arc::downgrade(self);
        let every =
            (self.config.lifetime() / 2).clamp(Duration::from_millis(1), Duration::from_secs(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(table) = weak.upgrade() else { return };
                let now = Instant::now();
                let ended = table.drain(|s| now >= s.until, true);
                futures::future::join_all(ended.iter().map(|(s, slice)| table.give_back(s, slice)))
                    .await;
            }
        });
    }

    /// Every subject's slice ends now (the quota changed).
    pub(crate) fn revoke_all(&self) {
        self.each_subject(revoke);
    }

    fn each_subject(&self, f: impl Fn(&mut Held)) {
        for entry in self.read().values() {
            f(&mut lock(&entry.held));
        }
    }

    fn matches(&self, kind: &str, name: &str) -> bool {
        self.ids[0].kind() == kind && self.ids[0].name() == name
    }
}

impl Listener for SliceTable {
    fn invalidate(&self, kind: &str, name: &str, subject: &[u8]) {
        if self.matches(kind, name)
            && let Some(entry) = self.read().get(subject)
        {
            revoke(&mut lock(&entry.held));
        }
    }

    fn returned(&self, kind: &str, name: &str, subject: &[u8]) {
        if self.matches(kind, name)
            && let Some(entry) = self.read().get(subject)
        {
            lock(&entry.held).denial = None;
        }
    }

    fn invalidate_all(&self) {
        self.each_subject(revoke);
    }
}

impl Drop for SliceTable {
    /// Gives back what is held, in the background, if a runtime runs.
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let held = self.drain(|_| true, false);
        if held.is_empty() {
            return;
        }
        let table = SliceTable {
            config: self.config,
            cluster: self.cluster.clone(),
            ids: self.ids.clone(),
            subjects: RwLock::new(HashMap::new()),
            hub: self.hub.clone(),
            sweeping: AtomicBool::new(true),
            hot: None,
        };
        runtime.spawn(async move {
            let table = table;
            futures::future::join_all(held.iter().map(|(s, slice)| table.give_back(s, slice)))
                .await;
        });
    }
}

impl std::fmt::Debug for SliceTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SliceTable")
            .field("config", &self.config)
            .field("subjects", &self.read().len())
            .finish_non_exhaustive()
    }
}
