//! The check a limiter with one limit sends (the algorithm's file, then
//! `one_limit.lua`: straight-line code that costs Redis less) agrees with
//! the generic check (`limit_prelude.lua`, every algorithm's file,
//! `limit_main.lua`, which multi-limits send) on every input: the same
//! reply, the same state written with the same expiry, the same errors.
//! Both run the algorithm's one `decide`; what this tests is that the two
//! drivers apply the same rules around it (override, block, shadow, mode,
//! a cost above the capacity, the reply's clamps).
//!
//! Both run side by side on the same node, each on its own keys, through
//! random sequences of checks, peeks, inline (migration) checks, overrides,
//! blocks, shadow mode and costs above an override's capacity. The server's
//! clock is replaced by a simulated one — the test's stand-in for
//! `clock.lua`, read from the last two arguments — so that both see the same
//! time to the microsecond.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;

/// `clock.lua` with the time taken from the last two `ARGV` (seconds,
/// microseconds), which it removes: the checks see their own `ARGV` only
/// (a one-limit check's optional arguments are absent when not given).
pub(crate) const TEST_CLOCK: &str = "\
local CLOCK_US = tonumber(table.remove(ARGV))
local CLOCK_S = tonumber(table.remove(ARGV))
local NOW_US = CLOCK_S * 1000000 + CLOCK_US
local NOW_MS = CLOCK_S * 1000 + math.floor(CLOCK_US / 1000)
";

/// An algorithm with a one-limit check of its own: its code in `ARGV`, the
/// generic check of it alone, and its own check, both on the test clock.
struct Pair {
    code: &'static str,
    generic: redis::Script,
    special: redis::Script,
}

impl Pair {
    /// The algorithm of `code` whose one-limit script is `name`, both sides
    /// as the crate sends them but on the test clock.
    fn new(code: &'static str, name: &str) -> Self {
        Pair {
            code,
            generic: on_test_clock("multi_limit"),
            special: on_test_clock(name),
        }
    }
}

/// The crate's script `name` with `clock.lua` replaced by [`TEST_CLOCK`].
pub(crate) fn on_test_clock(name: &str) -> redis::Script {
    let (_, code) = shardlimit::__private::scripts()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no script {name}"));
    let code = code
        .strip_prefix(include_str!("../../src/scripts/clock.lua"))
        .unwrap_or_else(|| panic!("{name} does not start with clock.lua"));
    redis::Script::new(&format!("{TEST_CLOCK}{code}"))
}

fn pairs() -> [Pair; 4] {
    [
        Pair::new("gcra", "gcra"),
        Pair::new("fw", "fixed_window"),
        Pair::new("swc", "sliding_window"),
        Pair::new("slog", "sliding_log"),
    ]
}

/// How a check is given the override and the block.
#[derive(Clone, Copy)]
enum Form<'a> {
    /// By their keys: `KEYS` state, override, block.
    Keys,
    /// Inline (a slot under migration): the state key alone, their values
    /// after the `ARGV` (`''` = none).
    Inline(&'a str, &'a str),
    /// A one-limit check's inline form when neither exists (what a subject
    /// known to have neither is checked with): the state key alone, no
    /// values, the `ARGV` of three keys.
    OneKey,
}

/// One side's keys: state, override, block.
struct Side {
    state: String,
    quota: String,
    block: String,
}

impl Side {
    fn new(namespace: &str, tag: &str, side: &str) -> Self {
        let state = format!("{namespace}:{{{tag}}}:check:{side}");
        Side {
            quota: format!("{state}:quota"),
            block: format!("{state}:block"),
            state,
        }
    }

    /// The check's reply, or its error's text.
    async fn check(
        &self,
        conn: &mut MultiplexedConnection,
        script: &redis::Script,
        args: &[String],
        form: Form<'_>,
        now_us: u64,
    ) -> Result<Vec<i64>, String> {
        let mut invocation = script.prepare_invoke();
        invocation.key(&self.state);
        if let Form::Keys = form {
            invocation.key(&self.quota).key(&self.block);
        }
        for a in args {
            invocation.arg(a);
        }
        if let Form::Inline(quota, block) = form {
            invocation.arg(quota).arg(block);
        }
        invocation
            .arg(now_us / 1_000_000)
            .arg(now_us % 1_000_000)
            .invoke_async(conn)
            .await
            .map_err(|e| e.to_string())
    }

    /// The state's value, of any type (`DUMP`: the same fields written in
    /// the same order give the same bytes), and its expiry (ms since the
    /// epoch; -2: no key).
    async fn state(&self, conn: &mut MultiplexedConnection) -> (Option<Vec<u8>>, i64) {
        let value: Option<Vec<u8>> = redis::cmd("DUMP")
            .arg(&self.state)
            .query_async(conn)
            .await
            .unwrap();
        let expiry: i64 = redis::cmd("PEXPIRETIME")
            .arg(&self.state)
            .query_async(conn)
            .await
            .unwrap();
        (value, expiry)
    }
}

/// A one-limit check's reply in the generic check's form: its compact
/// reply (neither an override nor a block exists: `{verdict, remaining,
/// retry_after_us, reset_after_us}`, verdict = 2 * all_allowed + allowed)
/// with the quota's `capacity`, no flags and no settled bound. Counts the
/// compact replies in `compact`.
fn full(reply: Vec<i64>, capacity: u32, compact: &mut usize) -> Vec<i64> {
    match reply[..] {
        [verdict, remaining, retry, reset] => {
            *compact += 1;
            vec![
                verdict >> 1 & 1,
                verdict & 1,
                remaining,
                retry,
                reset,
                i64::from(capacity),
                0,
                -1,
                0,
                0,
            ]
        }
        _ => reply,
    }
}

/// The one-limit check's `ARGV` for the generic check's `args` (`cost,
/// mode, code, limit, period_us, burst, shadow`): `limit, period_us,
/// burst`, then `cost, mode, shadow` unless all three are their defaults
/// (and `full` is false).
fn one_limit_args(args: &[String], full: bool) -> Vec<String> {
    let mut own = args[3..6].to_vec();
    if full || args[0] != "1" || args[1] != "1" || args[6] != "0" {
        own.extend([args[0].clone(), args[1].clone(), args[6].clone()]);
    }
    own
}

/// Where a one-limit reply has `settled_ms`, a PTTL read a moment apart by
/// the two sides: compared on its own.
const SETTLED: usize = 7;

fn without_settled(reply: &Result<Vec<i64>, String>) -> Result<Vec<i64>, String> {
    reply.clone().map(|mut r| {
        r.remove(SETTLED);
        r
    })
}

/// Both `settled_ms` say the same (-1: no bound, -2: not known), or are the
/// same PTTL read up to a second apart.
fn settled_agree(got: &Result<Vec<i64>, String>, want: &Result<Vec<i64>, String>) -> bool {
    match (got, want) {
        (Ok(g), Ok(w)) => {
            let (g, w) = (g[SETTLED], w[SETTLED]);
            g == w || (g >= 0 && w >= 0 && (g - w).abs() <= 1_000)
        }
        _ => true,
    }
}

/// Sets (or with `None` deletes) `key` on both sides' names, with the same
/// expiry: at least 30 s, longer than the test, so both sides always see the
/// same keys (deleted at the end); random, so the checks' `settled_ms` (the
/// smaller of the override's and the block's PTTL) has two to choose from.
async fn set_both(conn: &mut MultiplexedConnection, keys: [&str; 2], value: Option<&str>) {
    let expiry_ms = server_time_us(conn).await / 1000 + rand::rng().random_range(30_000..60_000);
    for key in keys {
        let cmd = match value {
            Some(v) => redis::cmd("SET")
                .arg(key)
                .arg(v)
                .arg("PXAT")
                .arg(expiry_ms)
                .clone(),
            None => redis::cmd("DEL").arg(key).clone(),
        };
        let _: () = cmd.query_async(conn).await.unwrap();
    }
}

pub(crate) async fn server_time_us(conn: &mut MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    s * 1_000_000 + us
}

#[tokio::test]
async fn each_one_limit_check_agrees_with_the_generic_one() {
    for pair in pairs() {
        agree(&pair).await;
    }
}

async fn agree(pair: &Pair) {
    const SEEDS: u64 = 24;
    const STEPS: usize = 250;
    let code = pair.code;
    let namespace = common::unique_namespace("onecheck");
    let tag = "subject";
    let owner = common::owner(shardlimit::keys::slot(tag.as_bytes())).await;
    let mut conn = common::node(&owner.addr).await;
    let (generic, special) = (&pair.generic, &pair.special);
    let mut compared = 0usize;
    let mut admitted = 0usize;
    let mut denied_for_good = 0usize;
    let (mut settled_known, mut settled_unknown) = (0usize, 0usize);
    let mut compact = 0usize;
    let mut one_key_forms = 0usize;
    for seed in 0..SEEDS {
        let mut rng = StdRng::seed_from_u64(seed);
        let g = Side::new(&namespace, tag, &format!("{code}-g{seed}"));
        let s = Side::new(&namespace, tag, &format!("{code}-s{seed}"));
        // A second ahead of the server, and only ever moving on: a key the
        // checks write expires (by the server's clock) no earlier than the
        // simulated clock says.
        let mut now = server_time_us(&mut conn).await + 1_000_000;
        let limit: u32 = rng.random_range(1..=50);
        let period_us: u64 = rng.random_range(1..=20) * 100_000;
        let burst: u32 = rng.random_range(1..=2 * limit);
        let mut quota = None::<String>;
        let mut block = None::<String>;
        for step in 0..STEPS {
            now += match rng.random_range(0..4) {
                0 => 0,
                1 => rng.random_range(0..1_000),
                2 => rng.random_range(0..period_us / u64::from(limit)),
                _ => rng.random_range(0..period_us),
            };
            match rng.random_range(0..20) {
                0 => {
                    let l: u32 = rng.random_range(1..=50);
                    let b: u32 = rng.random_range(1..=2 * l);
                    let p = rng.random_range(1..=20) * 100_000;
                    quota = Some(format!("{l} {p} {b}"));
                    set_both(&mut conn, [&g.quota, &s.quota], quota.as_deref()).await;
                }
                1 => {
                    quota = None;
                    set_both(&mut conn, [&g.quota, &s.quota], None).await;
                }
                2 => {
                    block = Some((now + rng.random_range(0..2 * period_us)).to_string());
                    set_both(&mut conn, [&g.block, &s.block], block.as_deref()).await;
                }
                3 => {
                    block = None;
                    set_both(&mut conn, [&g.block, &s.block], None).await;
                }
                _ => {}
            }
            // At most the default capacity, as the client checks.
            let capacity = if code == "gcra" { burst } else { limit };
            let cost: u32 = rng.random_range(1..=capacity);
            let inline = rng.random_bool(0.2);
            let mode = match (inline, rng.random_bool(0.8)) {
                (false, true) => "1",
                (false, false) => "0",
                (true, true) => "i1",
                (true, false) => "i0",
            };
            let shadow = if rng.random_bool(0.1) { "1" } else { "0" };
            let args: Vec<String> = vec![
                cost.to_string(),
                mode.to_owned(),
                code.to_owned(),
                limit.to_string(),
                period_us.to_string(),
                burst.to_string(),
                shadow.to_owned(),
            ];
            let values = (
                quota.clone().unwrap_or_default(),
                block.clone().unwrap_or_default(),
            );
            let form = if inline {
                Form::Inline(&values.0, &values.1)
            } else {
                Form::Keys
            };
            let want = g.check(&mut conn, generic, &args, form, now).await;
            let mut own = one_limit_args(&args, rng.random_bool(0.5));
            // Inline with neither an override nor a block: half the time in
            // the one-key form, as a subject known to have neither is checked
            // (mode 1 or 0, defaults left out unless `full`).
            let one_key =
                inline && values.0.is_empty() && values.1.is_empty() && rng.random_bool(0.5);
            if one_key {
                let mut plain = args.clone();
                plain[1] = plain[1].trim_start_matches('i').to_owned();
                own = one_limit_args(&plain, rng.random_bool(0.5));
                one_key_forms += 1;
            }
            let got = s
                .check(
                    &mut conn,
                    special,
                    &own,
                    if one_key { Form::OneKey } else { form },
                    now,
                )
                .await
                .map(|r| full(r, capacity, &mut compact));
            let context = format!(
                "{code}, seed {seed} step {step}: limit {limit} per {period_us} us burst {burst}, \
                 override {quota:?}, block {block:?}, args {args:?}"
            );
            assert_eq!(
                without_settled(&got),
                without_settled(&want),
                "reply, {context}"
            );
            assert!(
                settled_agree(&got, &want),
                "settled_ms: {got:?} against {want:?}, {context}"
            );
            let (g_state, s_state) = (g.state(&mut conn).await, s.state(&mut conn).await);
            assert_eq!(s_state, g_state, "state written, {context}");
            if let Ok(reply) = &want {
                admitted += usize::from(reply[1] == 1);
                denied_for_good += usize::from(reply[1] == 0 && reply[3] == -1);
                settled_known += usize::from(reply[SETTLED] >= 0);
                settled_unknown += usize::from(reply[SETTLED] == -2);
            }
            compared += 1;
        }
        for key in [&g.state, &g.quota, &g.block, &s.state, &s.quota, &s.block] {
            let _: () = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    }
    // The sequences reached both sides of every decision.
    assert!(
        admitted > compared / 10,
        "{code}: {admitted} of {compared} admitted"
    );
    assert!(
        admitted < compared * 9 / 10,
        "{code}: {admitted} of {compared} admitted"
    );
    assert!(
        denied_for_good > 0,
        "{code}: no cost above an override's capacity"
    );
    // Both forms of the reply were compared.
    assert!(
        compact > compared / 10 && compact < compared * 9 / 10,
        "{code}: {compact} of {compared} replies compact"
    );
    assert!(
        one_key_forms > compared / 50,
        "{code}: {one_key_forms} of {compared} checks in the one-key form"
    );
    assert!(
        settled_known > 0 && settled_unknown > 0,
        "{code}: settled_ms known {settled_known} times, not known {settled_unknown} times"
    );
}

/// A malformed override and a state key of another type are refused by
/// both, before anything is written.
#[tokio::test]
async fn each_one_limit_check_refuses_what_the_generic_one_refuses() {
    for pair in pairs() {
        refuse(&pair).await;
    }
}

async fn refuse(pair: &Pair) {
    let namespace = common::unique_namespace("onecheckbad");
    let tag = "subject";
    let owner = common::owner(shardlimit::keys::slot(tag.as_bytes())).await;
    let mut conn = common::node(&owner.addr).await;
    let now = server_time_us(&mut conn).await;
    let args: Vec<String> = ["1", "1", pair.code, "10", "1000000", "10", "0"]
        .map(str::to_owned)
        .to_vec();
    let g = Side::new(&namespace, tag, "g");
    let s = Side::new(&namespace, tag, "s");
    set_both(&mut conn, [&g.quota, &s.quota], Some("ten per second")).await;
    let own = one_limit_args(&args, false);
    for (side, script, args) in [(&g, &pair.generic, &args), (&s, &pair.special, &own)] {
        let refused = side.check(&mut conn, script, args, Form::Keys, now).await;
        let named = format!("malformed override in {}", side.quota);
        assert!(
            refused.as_ref().is_err_and(|e| e.contains(&named)),
            "{refused:?}"
        );
        assert_eq!(side.state(&mut conn).await, (None, -2), "nothing written");
    }
    set_both(&mut conn, [&g.quota, &s.quota], None).await;
    for key in [&g.state, &s.state] {
        let _: () = redis::cmd("SADD")
            .arg(key)
            .arg("x")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let want = g
        .check(&mut conn, &pair.generic, &args, Form::Keys, now)
        .await;
    let got = s
        .check(&mut conn, &pair.special, &own, Form::Keys, now)
        .await;
    // The one-key form (a subject known to have neither override nor
    // block) refuses it the same way.
    let one_key = s
        .check(&mut conn, &pair.special, &own, Form::OneKey, now)
        .await;
    assert!(
        want.as_ref().is_err_and(|e| e.contains("WRONGTYPE")),
        "{want:?}"
    );
    for got in [got, one_key] {
        assert!(
            got.as_ref().is_err_and(|e| e.contains("WRONGTYPE")),
            "{got:?}"
        );
    }
    // A peek of a string state reads it as absent in both forms (as an
    // MGET does), and writes nothing.
    let mut peek = args.clone();
    peek[1] = "0".to_owned();
    let peek = one_limit_args(&peek, false);
    let by_keys = s
        .check(&mut conn, &pair.special, &peek, Form::Keys, now)
        .await;
    let by_one_key = s
        .check(&mut conn, &pair.special, &peek, Form::OneKey, now)
        .await;
    assert_eq!(by_one_key, by_keys, "{}: a peek of a set", pair.code);
    if matches!(pair.code, "gcra" | "fw") {
        assert!(by_keys.is_ok(), "{}: {by_keys:?}", pair.code);
    }
    for key in [&g.state, &s.state] {
        let kind: String = redis::cmd("TYPE")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(kind, "set", "{key} left as it was");
        let _: () = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// A sliding log's admission whose own `PEXPIREAT` deletes its key — the
/// expiry already past by the server's clock, which Redis 7.0 compares with
/// the real time, not the script's: a master descheduled mid-script on a
/// loaded box, or, as here, a check on a clock behind the server's — still
/// answers, from what it read before writing. Both checks read their
/// oldest live entry after writing, from a key gone by then, and failed
/// with "attempt to perform arithmetic on a nil value" (seen under load in
/// `limits_prop::a_denial_leaves_less_than_its_cost`, 10 ms periods).
#[tokio::test]
async fn a_sliding_log_admission_whose_expiry_is_already_past_still_answers() {
    let namespace = common::unique_namespace("slog-past");
    let tag = "subject";
    let owner = common::owner(shardlimit::keys::slot(tag.as_bytes())).await;
    let mut conn = common::node(&owner.addr).await;
    let pair = Pair::new("slog", "sliding_log");
    // The one-limit check's compact replies, made whole.
    let mut compact = 0;
    let args = |period_us: u64| -> Vec<String> {
        ["1", "1", "slog", "5", &period_us.to_string(), "5", "0"]
            .map(str::to_owned)
            .to_vec()
    };
    for (name, script, own) in [
        ("the generic check", &pair.generic, false),
        ("its one-limit check", &pair.special, true),
    ] {
        let side = Side::new(&namespace, tag, &format!("past-{own}"));
        let form = |period_us| {
            if own {
                one_limit_args(&args(period_us), false)
            } else {
                args(period_us)
            }
        };
        // A second behind the server: under a 10 s period the entry lives.
        let then = server_time_us(&mut conn).await - 1_000_000;
        let first = side
            .check(&mut conn, script, &form(10_000_000), Form::Keys, then)
            .await
            .map(|r| full(r, 5, &mut compact))
            .unwrap_or_else(|e| panic!("{name}, first check: {e}"));
        assert_eq!(first[1], 1, "{name}: {first:?}");
        // 5 ms later under a 10 ms period: that entry is live, and the new
        // one's expiry (15 ms after `then`) is a second past.
        let second = side
            .check(&mut conn, script, &form(10_000), Form::Keys, then + 5_000)
            .await
            .map(|r| full(r, 5, &mut compact))
            .unwrap_or_else(|e| panic!("{name}, second check: {e}"));
        assert_eq!(second[1], 1, "{name}: {second:?}");
        // The key is gone, as the expiry said.
        assert_eq!(side.state(&mut conn).await, (None, -2), "{name}");
    }
}
