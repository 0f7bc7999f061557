//! The rate-limit scripts, assembled from each algorithm's Lua file
//! (`<name>/<name>.lua`) and the drivers in `src/scripts/`: its decision is
//! written once, and every script that decides for it runs that one text.
//!
//! An algorithm's file defines, as locals (see the interface on
//! [`Rules::lua`]): `read`, `decide`, `write` and `adjust`; `BURSTS` is set
//! before it from [`Rules::bursts`]. The one-limit check is the file then
//! `one_limit.lua`, calling them directly; the generic check and the
//! adjustments hold every algorithm's file, each in a `do ... end` block of
//! its own that files its functions in `ALGOS` under the algorithm's code.

use std::sync::LazyLock;

use super::{Algorithm, Rules};
use crate::scripts::{self, Script};

/// `BURSTS`, as an algorithm's file expects it before it.
fn bursts(rules: &Rules) -> String {
    format!("local BURSTS = {}\n", rules.bursts)
}

/// The check of one limit of the algorithm of `rules`: its script.
pub(super) fn one_limit(rules: &Rules) -> Script {
    let code = [
        scripts::CLOCK,
        scripts::NUMBERS,
        &bursts(rules),
        rules.lua,
        scripts::ONE_LIMIT,
    ]
    .concat();
    Script::new(rules.name, code)
}

/// Every algorithm's file, each in a block that files its functions in
/// `ALGOS` under its code (the `kind` of its keys, which the generic check's
/// `ARGV` names).
fn every_algorithm() -> String {
    Algorithm::ALL
        .into_iter()
        .map(|algorithm| {
            let rules = algorithm.rules();
            format!(
                "do\n{}{}ALGOS['{}'] = {{ bursts = BURSTS, read = read, decide = decide, \
                 write = write, adjust = adjust }}\nend\n",
                bursts(rules),
                rules.lua,
                algorithm.kind(),
            )
        })
        .collect()
}

/// A script of every algorithm: `driver` after the generic check's helpers
/// and every algorithm's file.
fn generic(name: &'static str, driver: &str) -> Script {
    let code = [
        scripts::CLOCK,
        scripts::NUMBERS,
        scripts::LIMIT_PRELUDE,
        &every_algorithm(),
        driver,
    ]
    .concat();
    Script::new(name, code)
}

/// The check of any number of limits, of any algorithms (see
/// `limit_prelude.lua`).
pub(crate) static MULTI_LIMIT: LazyLock<Script> =
    LazyLock::new(|| generic("multi_limit", scripts::LIMIT_MAIN));

/// A change to one limit of one subject other than a check (see
/// `limit_adjust.lua`).
pub(crate) static LIMIT_ADJUST: LazyLock<Script> =
    LazyLock::new(|| generic("limit_adjust", scripts::LIMIT_ADJUST));

/// The quota slices of a GCRA limit (see `slice.lua`): GCRA's file, then
/// the slices' driver.
pub(crate) static SLICE: LazyLock<Script> = LazyLock::new(|| {
    let gcra = Algorithm::Gcra.rules();
    let code = [
        scripts::CLOCK,
        scripts::NUMBERS,
        &bursts(gcra),
        gcra.lua,
        scripts::SLICE,
    ]
    .concat();
    Script::new("slice", code)
});

/// Every script assembled here: the one-limit checks, then the rest.
pub(crate) fn all() -> Vec<&'static Script> {
    let mut all: Vec<&'static Script> = Algorithm::ALL
        .into_iter()
        .map(|algorithm| &**algorithm.rules().script)
        .collect();
    all.extend([&*MULTI_LIMIT, &*LIMIT_ADJUST, &*SLICE]);
    all
}

/// Whether `script` is a one-limit check: its `ARGV` leaves out the
/// algorithm's code and defaults, and its reply may be compact.
pub(crate) fn is_one_limit(script: &Script) -> bool {
    Algorithm::ALL
        .into_iter()
        .any(|algorithm| algorithm.rules().script.name() == script.name())
}
