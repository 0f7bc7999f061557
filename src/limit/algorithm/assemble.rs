//! The rate-limit scripts, assembled from each algorithm's Lua file
//! (`<name>/<name>.lua`) and the drivers in `src/scripts/`: its decision is
//! written once, and every script that decides for it runs that one text.
//!
//! An algorithm's file defines, as locals (see the interface on
//! [`Rules::lua`]): `decide`, then, after a line `-- [adjust]`,
//! `adjust`; `BURSTS` and `STRING_STATE` are set before it from its
//! [`Rules`]. The checks take the file up to `-- [adjust]`, without
//! `numbers.lua` (every function a script defines is made anew on every
//! call, and every Lua call costs, which Redis pays for: measured by
//! benches/script_cost.sh, about 800 instructions a function with
//! upvalues and 1,200 a call, of 88,000 for a check): the
//! one-limit check is that part then `one_limit.lua`, calling `decide`
//! directly; the generic check holds every algorithm's part, each in a
//! `do ... end` block of its own that files its functions in `ALGOS` under
//! the algorithm's code. The adjustments hold every whole file the same
//! way, the slices GCRA's.

use std::sync::LazyLock;

use super::{Algorithm, Rules, StateRead};
use crate::scripts::{self, Script};

/// The line that ends the part of an algorithm's file the checks take.
const ADJUST_PART: &str = "\n-- [adjust]";

/// What an algorithm's file expects set before it: `BURSTS` (a request may
/// cost up to the burst, not the limit) and `STRING_STATE` (its state is a
/// string, which a check reads with `GET`; else its functions read it).
fn settings(rules: &Rules) -> String {
    format!(
        "local BURSTS = {}\nlocal STRING_STATE = {}\n",
        rules.bursts,
        matches!(rules.state, StateRead::Integer(_)),
    )
}

/// The part of an algorithm's file a check takes: up to `-- [adjust]`.
fn check_part(rules: &Rules) -> &'static str {
    rules
        .lua
        .split_once(ADJUST_PART)
        .map_or(rules.lua, |(check, _)| check)
}

/// The check of one limit of the algorithm of `rules`: its script.
pub(super) fn one_limit(rules: &Rules) -> Script {
    let code = [
        scripts::CLOCK,
        &settings(rules),
        check_part(rules),
        scripts::ONE_LIMIT,
    ]
    .concat();
    Script::new(rules.name, code)
}

/// Every algorithm's file, each in a block that files its functions in
/// `ALGOS` under its code (the `kind` of its keys, which the generic
/// check's `ARGV` names): the part the checks take, or with `adjust` the
/// whole file.
fn every_algorithm(adjust: bool) -> String {
    Algorithm::ALL
        .into_iter()
        .map(|algorithm| {
            let rules = algorithm.rules();
            let (lua, more) = if adjust {
                (rules.lua, " adjust = adjust,")
            } else {
                (check_part(rules), "")
            };
            format!(
                "do\n{}{lua}ALGOS['{}'] = {{ bursts = BURSTS, string_state = STRING_STATE, \
                 decide = decide,{more} }}\nend\n",
                settings(rules),
                algorithm.kind(),
            )
        })
        .collect()
}

/// A script of every algorithm: `driver` after the generic check's helpers
/// and every algorithm's file (whole, with `adjust`).
fn generic(name: &'static str, driver: &str, adjust: bool) -> Script {
    let code = [
        scripts::CLOCK,
        if adjust { scripts::NUMBERS } else { "" },
        scripts::LIMIT_PRELUDE,
        &every_algorithm(adjust),
        driver,
    ]
    .concat();
    Script::new(name, code)
}

/// The check of any number of limits, of any algorithms (see
/// `limit_prelude.lua`).
pub(crate) static MULTI_LIMIT: LazyLock<Script> =
    LazyLock::new(|| generic("multi_limit", scripts::LIMIT_MAIN, false));

/// A change to one limit of one subject other than a check (see
/// `limit_adjust.lua`).
pub(crate) static LIMIT_ADJUST: LazyLock<Script> =
    LazyLock::new(|| generic("limit_adjust", scripts::LIMIT_ADJUST, true));

/// The quota slices of a GCRA limit (see `slice.lua`): GCRA's file, then
/// the slices' driver.
pub(crate) static SLICE: LazyLock<Script> = LazyLock::new(|| {
    let gcra = Algorithm::Gcra.rules();
    let code = [
        scripts::CLOCK,
        scripts::NUMBERS,
        &settings(gcra),
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
