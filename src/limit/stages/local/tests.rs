//! The local limiters against their rules, and against what Redis said.

use super::*;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

#[test]
fn a_share_is_the_quota_divided_rounded_up() {
    let q = Quota::per_minute(nz(100));
    assert_eq!(share(q, nz(4)), Quota::per_minute(nz(25)));
    assert_eq!(share(q, nz(3)).limit().get(), 34);
    assert_eq!(share(Quota::per_minute(nz(2)), nz(4)).limit().get(), 1);
    let burst = Quota::per_second(nz(10)).allow_burst(nz(40));
    let shared = share(burst, nz(4));
    assert_eq!((shared.limit().get(), shared.burst().get()), (3, 10));
}

/// Runs `cost`-unit checks of `algorithm` under `quota` at the given
/// times (ms), returning which were admitted.
fn run(algorithm: Algorithm, quota: Quota, at_ms: &[u64]) -> Vec<bool> {
    let spec = LimitSpec::new("t", algorithm, quota, false).unwrap();
    let local = LocalLimits::new(nz(1));
    let mut state = LocalState::default();
    at_ms
        .iter()
        .map(|&ms| {
            let share = local.share(spec.quota);
            let at = Local {
                now: ms * 1000,
                cost: 1,
                limit: u64::from(share.limit().get()),
                capacity: u64::from(algorithm.capacity(&share)),
                period: u64::try_from(share.period().as_micros()).unwrap(),
                consume: true,
            };
            (algorithm.rules().local)(&mut state, at).allowed
        })
        .collect()
}

#[test]
fn every_algorithm_admits_its_limit_per_period_locally() {
    let q = Quota::per_second(nz(3));
    for algorithm in Algorithm::ALL {
        // Three at once, a fourth denied; after two periods, room again.
        let got = run(algorithm, q, &[0, 1, 2, 3, 2500, 2501]);
        assert_eq!(got, [true, true, true, false, true, true], "{algorithm}");
        // Never more than the limit in any second, whatever the pace.
        let times: Vec<u64> = (0..200).map(|i| i * 37).collect();
        let admitted: Vec<u64> = times
            .iter()
            .zip(run(algorithm, q, &times))
            .filter(|(_, ok)| *ok)
            .map(|(t, _)| *t)
            .collect();
        let most = admitted
            .iter()
            .map(|&t| admitted.iter().filter(|&&u| u >= t && u < t + 1000).count())
            .max()
            .unwrap();
        // Only the log is exact in every window; a fixed window (and
        // the counter's estimate) may admit up to twice the limit across
        // a boundary, and GCRA a full burst and then its rate, as in
        // Redis.
        let bound = if algorithm == Algorithm::SlidingLog {
            3
        } else {
            6
        };
        assert!(
            most <= bound,
            "{algorithm}: {most} in one second: {admitted:?}"
        );
        // And close to the limit over 7.4 s (the counter's weighted
        // estimate, rounded up, is the most cautious).
        let least = if algorithm == Algorithm::SlidingWindow {
            7 * 2
        } else {
            7 * 3 - 3
        };
        assert!(admitted.len() >= least, "{algorithm}: {}", admitted.len());
    }
}

#[test]
fn a_denial_says_when_to_retry_and_a_peek_takes_nothing() {
    for algorithm in Algorithm::ALL {
        let (spec, local) = limits(algorithm, Quota::per_second(nz(2)), 1);
        let mut state = Subject::default();
        for _ in 0..2 {
            assert!(local.check(&mut state, &spec, 1, true).verdict.allowed);
        }
        let denied = local.check(&mut state, &spec, 1, true).verdict;
        assert!(!denied.allowed, "{algorithm}");
        let wait = denied.retry_after_us.unwrap();
        assert!(wait > 0 && wait <= 1_000_000, "{algorithm}: {wait}");
        // A cost above the limit is never admitted: no wait to give.
        let mut fresh = Subject::default();
        // A peek reports what is left without its own units, as Redis does.
        let peek = local.check(&mut fresh, &spec, 2, false).verdict;
        assert!(peek.allowed && peek.remaining == 2, "{algorithm}: {peek:?}");
        assert!(
            local.check(&mut fresh, &spec, 2, true).verdict.allowed,
            "{algorithm}"
        );
    }
}

/// A limit of `algorithm` under `quota`, and its local limiters among
/// `instances`.
fn limits(algorithm: Algorithm, quota: Quota, instances: u32) -> (LimitSpec, LocalLimits) {
    let spec = LimitSpec::new("t", algorithm, quota, false).unwrap();
    (spec, LocalLimits::new(nz(instances)))
}

/// What Redis replied: `remaining` left, full again in `reset_ms`.
fn reply(quota: Quota, remaining: u32, reset_ms: u64) -> Decision {
    let mut d = Decision::bypass(quota, quota.burst().get(), BypassReason::Timeout);
    d.bypassed = None;
    d.remaining = remaining;
    d.reset_after = Duration::from_millis(reset_ms);
    d.settled = Settled::Unbounded;
    d
}

/// Checks at once until one is denied: how many were admitted.
fn admitted(local: &LocalLimits, subject: &mut Subject, spec: &LimitSpec) -> u64 {
    (0..1000)
        .take_while(|_| local.check(subject, spec, 1, true).verdict.allowed)
        .count() as u64
}

#[test]
fn a_share_starts_from_what_redis_said_was_left() {
    // 20 per hour among 4: a share of 5.
    let q = Quota::per_hour(nz(20));
    for algorithm in Algorithm::ALL {
        let (spec, local) = limits(algorithm, q, 4);
        // Nothing heard: the full share.
        assert_eq!(admitted(&local, &mut Subject::default(), &spec), 5);
        for (remaining, expected) in [(20, 5), (13, 3), (3, 0), (0, 0)] {
            let mut subject = Subject::default();
            let reset = if remaining == 20 { 0 } else { 3_000 };
            local.learn(&mut subject, &spec, &reply(q, remaining, reset), 0);
            let got = admitted(&local, &mut subject, &spec);
            assert_eq!(got, expected, "{algorithm}: {remaining} left in Redis");
            // What was admitted here is unsettled, until counted.
            assert_eq!(local.settle(&mut subject, &spec), expected, "{algorithm}");
            assert_eq!(local.settle(&mut subject, &spec), 0, "{algorithm}");
        }
        // Units admitted here and not yet in Redis stay taken when a
        // reply comes before they are counted there.
        let mut subject = Subject::default();
        local.learn(&mut subject, &spec, &reply(q, 16, 1_000), 0);
        assert_eq!(admitted(&local, &mut subject, &spec), 4);
        local.learn(&mut subject, &spec, &reply(q, 16, 1_000), 0);
        assert_eq!(admitted(&local, &mut subject, &spec), 0, "{algorithm}");
    }
}

#[test]
fn what_redis_had_in_use_is_freed_when_redis_frees_it() {
    // 4 per second among 2: a share of 2; Redis full again in 300 ms.
    let q = Quota::per_second(nz(4));
    for algorithm in Algorithm::ALL {
        let (spec, local) = limits(algorithm, q, 2);
        let mut subject = Subject::default();
        local.learn(&mut subject, &spec, &reply(q, 0, 300), 0);
        assert_eq!(admitted(&local, &mut subject, &spec), 0, "{algorithm}");
        // The windows now end when Redis' does: at 300 ms the window
        // algorithms are full again, a bucket refills at the share's
        // rate (one unit per 500 ms, so half of its units by then).
        std::thread::sleep(Duration::from_millis(320));
        let expected = if algorithm == Algorithm::Gcra { 0 } else { 2 };
        assert_eq!(
            admitted(&local, &mut subject, &spec),
            expected,
            "{algorithm}"
        );
    }
}

#[test]
fn a_known_block_or_own_quota_holds_locally() {
    let q = Quota::per_hour(nz(20));
    for algorithm in Algorithm::ALL {
        let (spec, local) = limits(algorithm, q, 4);
        let mut blocked = reply(q, 20, 0);
        blocked.allowed = false;
        blocked.blocked = true;
        blocked.retry_after = Some(Duration::from_secs(3600));
        let mut subject = Subject::default();
        local.learn(&mut subject, &spec, &blocked, 0);
        let v = local.check(&mut subject, &spec, 1, true);
        assert!(!v.verdict.allowed && v.blocked, "{algorithm}");
        let wait = v.verdict.retry_after_us.unwrap();
        assert!(wait > 3_599_000_000 && wait <= 3_600_000_000, "{wait}");
        // Unblocked, as the next reply says.
        local.learn(&mut subject, &spec, &reply(q, 20, 0), 0);
        assert!(local.check(&mut subject, &spec, 1, true).verdict.allowed);
        // Its own quota, 8 per hour: a share of 2, whatever the default.
        let own = Quota::per_hour(nz(8));
        let mut overridden = reply(own, 8, 0);
        overridden.overridden = true;
        let mut subject = Subject::default();
        local.learn(&mut subject, &spec, &overridden, 0);
        let v = local.check(&mut subject, &spec, 1, true);
        assert!(v.overridden && v.share == local.share(own), "{algorithm}");
        assert_eq!(admitted(&local, &mut subject, &spec), 1, "{algorithm}");
        // It expires when Redis said it would: the default share then.
        overridden.settled = Settled::For(Duration::ZERO);
        let mut subject = Subject::default();
        local.learn(&mut subject, &spec, &overridden, 0);
        assert!(!local.check(&mut subject, &spec, 1, true).overridden);
    }
}

#[test]
fn after_local_admissions_a_process_keeps_to_its_part_until_redis_is_as_strict() {
    // 20 per hour among 4; Redis said 12 were left: a part of 3 here.
    let q = Quota::per_hour(nz(20));
    for algorithm in Algorithm::ALL {
        let (spec, local) = limits(algorithm, q, 4);
        let mut subject = Subject::default();
        local.learn(&mut subject, &spec, &reply(q, 12, 3_000), 0);
        assert!(local.restraint(&mut subject, &spec, 1).is_none());
        assert!(local.check(&mut subject, &spec, 1, true).verdict.allowed);
        // Redis answers again: this process counts its unit there first;
        // the others have not counted theirs yet (10 left after it and an
        // admission). This process keeps its part, of which the admission
        // took one.
        assert_eq!(local.settle(&mut subject, &spec), 1);
        let mut admitted = reply(q, 10, 3_000);
        admitted.allowed = true;
        local.learn(&mut subject, &spec, &admitted, 1);
        assert!(
            local.restraint(&mut subject, &spec, 1).is_none(),
            "{algorithm}"
        );
        assert!(local.check(&mut subject, &spec, 1, true).verdict.allowed);
        let spent = local.restraint(&mut subject, &spec, 1).unwrap();
        assert!(!spent.verdict.allowed, "{algorithm}");
        // Once Redis is as strict (the others counted theirs), it decides.
        local.learn(&mut subject, &spec, &reply(q, 0, 3_000), 0);
        assert!(
            local.restraint(&mut subject, &spec, 1).is_none(),
            "{algorithm}"
        );
    }
}

#[test]
fn a_local_denial_leaves_less_than_its_cost() {
    // Fast quotas (GCRA: a unit per 3 us, fractional per 7) at steps of
    // 1-4 us, costs 1-3: every denial says fewer are left than asked.
    let quotas = [
        Quota::with_period(nz(1000), Duration::from_millis(3)).allow_burst(nz(3)),
        Quota::with_period(nz(3), Duration::from_millis(7)),
    ];
    for algorithm in Algorithm::ALL {
        for quota in quotas {
            let quota = if algorithm == Algorithm::Gcra {
                quota
            } else {
                Quota::with_period(quota.limit().min(nz(3)), quota.period())
            };
            let mut state = LocalState::default();
            let mut now = 0;
            for i in 0..5000u64 {
                now += 1 + i * 7 % 4;
                let cost = 1 + (i * 5 % 3) as u32;
                let at = Local {
                    now,
                    cost: u64::from(cost),
                    limit: u64::from(quota.limit().get()),
                    capacity: u64::from(algorithm.capacity(&quota)),
                    period: u64::try_from(quota.period().as_micros()).unwrap(),
                    consume: true,
                };
                let v = (algorithm.rules().local)(&mut state, at);
                assert!(
                    v.allowed || v.remaining < u64::from(cost),
                    "{algorithm} {quota:?}: {v:?}"
                );
            }
        }
    }
    // And every state of a GCRA of 3 per 7 ms (2333.3 us a unit): the
    // TAT any number of microseconds ahead, every cost.
    for ahead in 0..=7_001 {
        for cost in 1..=3 {
            let mut state = LocalState {
                tat: 10_000 + ahead,
                ..LocalState::default()
            };
            let at = Local {
                now: 10_000,
                cost,
                limit: 3,
                capacity: 3,
                period: 7_000,
                consume: false,
            };
            let v = (Algorithm::Gcra.rules().local)(&mut state, at);
            assert!(v.allowed || v.remaining < cost, "{ahead} us ahead: {v:?}");
        }
    }
}

#[test]
fn a_local_admission_says_when_more_is_free() {
    // 3 per 600 ms, two admitted at 0 and 10 us: one unit more than the
    // one left is denied a microsecond before `more_after_us`, and
    // admitted at it (the counter states its reset, later).
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::SlidingLog,
        Algorithm::FixedWindow,
    ] {
        let mut state = LocalState::default();
        let at = |now, cost, consume| Local {
            now,
            cost,
            limit: 3,
            capacity: 3,
            period: 600_000,
            consume,
        };
        let local = algorithm.rules().local;
        assert!(local(&mut state, at(0, 1, true)).allowed);
        let v = local(&mut state, at(10, 1, true));
        assert_eq!((v.allowed, v.remaining), (true, 1), "{algorithm}");
        let more = 10 + v.more_after_us;
        assert!(
            !local(&mut state, at(more - 1, 2, false)).allowed,
            "{algorithm}: {v:?}"
        );
        assert!(
            local(&mut state, at(more, 2, false)).allowed,
            "{algorithm}: {v:?}"
        );
    }
}
