//! The workspace's shape, checked like behaviour: no module of the library,
//! the Limits page, the CLI or the bench harness imports a module that
//! imports it back (directly or round a loop), no source file under `src/`,
//! `crates/`, `benches/` or `examples/` outgrows a room (~500 lines of
//! code, comments and unit tests left out), the
//! library's root re-exports a bounded number of names, and the tests are
//! a handful of binaries.
//!
//! Modules are the files under a crate's source directory; an edge is a path
//! through `crate::`, `super::` or `self::` to another module. A module and
//! its own submodules are one room (a parent re-exports its children, a
//! child uses its parent's private types), so edges between them do not
//! count.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The most lines of code (see [`code_lines`]) a source file may have.
const MAX_LINES: usize = 500;

type Module = Vec<String>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every module file of the library, by module path (`[]` is the root).
fn modules() -> BTreeMap<Module, String> {
    crate_modules("src", "lib")
}

/// The crates whose module graphs are checked: the library, the Limits
/// page, the CLI and the bench harness (directory, root file).
const CRATES: [(&str, &str); 4] = [
    ("src", "lib"),
    ("crates/shardlimit-web/src", "lib"),
    ("crates/shardlimit-cli/src", "main"),
    ("benches/load", "main"),
];

/// Every module file of the crate rooted at `dir/<root>.rs`, by module path
/// (`[]` is the root); the library's binaries are crates of their own.
fn crate_modules(dir: &str, root: &str) -> BTreeMap<Module, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .filter(|p| dir != "src" || !p.starts_with(src.join("bin")))
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap().with_extension("");
            let mut module: Module = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module == [root] || module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            let text = fs::read_to_string(&path).unwrap();
            (module, text)
        })
        .collect()
}

fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths `text` names from `crate::`, `super::` or `self::`, with
/// `use a::{b, c::d}` groups expanded, as written (unresolved).
fn paths(text: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts_path = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| bytes[i..].iter().take(p.len()).copied().eq(p.chars()));
        let boundary = i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == ':');
        if starts_path && boundary {
            i = read_path(&bytes, i, Vec::new(), &mut found);
        } else {
            i += 1;
        }
    }
    found
}

/// Reads `a::b::{c, d::e}` from `at`, pushing each full path onto `found`;
/// returns where it stopped.
fn read_path(
    s: &[char],
    mut at: usize,
    mut prefix: Vec<String>,
    found: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        let start = at;
        while at < s.len() && is_ident(s[at]) {
            at += 1;
        }
        if at > start {
            prefix.push(s[start..at].iter().collect());
        }
        if s[at..].starts_with(&[':', ':']) {
            at += 2;
            if s.get(at) == Some(&'{') {
                at += 1;
                loop {
                    while s.get(at).is_some_and(|c| c.is_whitespace()) {
                        at += 1;
                    }
                    match s.get(at) {
                        Some('}') | None => return at + 1,
                        Some(',') => at += 1,
                        _ => at = read_path(s, at, prefix.clone(), found),
                    }
                }
            }
            continue;
        }
        found.push(prefix);
        return at;
    }
}

/// The module `path`, written in `from`, lands in: its longest prefix
/// that is a module.
fn resolve(from: &Module, path: &[String], modules: &BTreeMap<Module, String>) -> Option<Module> {
    let mut full: Module = Vec::new();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => rest = &path[1..],
        Some("self") => {
            full = from.clone();
            rest = &path[1..];
        }
        Some("super") => {
            full = from.clone();
            while rest.first().is_some_and(|p| p == "super") {
                full.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    full.extend(rest.iter().filter(|p| *p != "self").cloned());
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|m| modules.contains_key(m))
}

fn edges(modules: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, text) in modules {
        for path in paths(&without_comments(text)) {
            let Some(to) = resolve(module, &path, modules) else {
                continue;
            };
            let related = to.starts_with(module) || module.starts_with(&to);
            if !related {
                edges.entry(module.clone()).or_default().insert(to);
            }
        }
    }
    edges
}

/// A loop through `start`, if there is one: the modules in order.
fn cycle_through(
    start: &Module,
    edges: &BTreeMap<Module, BTreeSet<Module>>,
) -> Option<Vec<Module>> {
    let mut stack = vec![(start.clone(), vec![start.clone()])];
    let mut seen = BTreeSet::new();
    while let Some((at, trail)) = stack.pop() {
        for next in edges.get(&at).into_iter().flatten() {
            if next == start {
                return Some(trail);
            }
            if seen.insert(next.clone()) {
                let mut longer = trail.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

fn name(module: &Module) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

#[test]
fn the_module_graph_has_no_cycles() {
    let modules = modules();
    assert!(modules.len() > 40, "found only {} modules", modules.len());
    let edges = edges(&modules);
    // The checker itself sees real edges.
    assert!(edges[&vec!["lock".to_owned()]].contains(&vec!["primitive".to_owned()]));
    let loops: Vec<String> = modules
        .keys()
        .filter_map(|m| cycle_through(m, &edges))
        .map(|trail| trail.iter().map(name).collect::<Vec<_>>().join(" -> "))
        .collect();
    assert!(loops.is_empty(), "import loops:\n{}", loops.join("\n"));
}

#[test]
fn no_crate_of_the_repository_has_an_import_loop() {
    for (dir, root) in CRATES {
        let modules = crate_modules(dir, root);
        assert!(
            modules.len() > 3,
            "{dir}: found only {} modules",
            modules.len()
        );
        let edges = edges(&modules);
        let loops: Vec<String> = modules
            .keys()
            .filter_map(|m| cycle_through(m, &edges))
            .map(|trail| trail.iter().map(name).collect::<Vec<_>>().join(" -> "))
            .collect();
        assert!(
            loops.is_empty(),
            "{dir}: import loops:\n{}",
            loops.join("\n")
        );
    }
}

/// The most names the crate root re-exports: the concepts a newcomer meets
/// first (the cluster, the error, each primitive, a quota, a decision, the
/// failure policy). Everything else lives in the module of its concept
/// (`shardlimit::limit::RateLimiterBuilder`, `shardlimit::lock::LockGuard`,
/// `shardlimit::health::Health`); 30 names once.
const MAX_ROOT_REEXPORTS: usize = 14;

#[test]
fn the_crate_root_reexports_few_names() {
    let lib = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let text = without_comments(&lib);
    let mut names = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("\npub use ") {
        rest = &rest[at + "\npub use ".len()..];
        let end = rest.find(';').unwrap();
        let item = &rest[..end];
        let list = match (item.find('{'), item.rfind('}')) {
            (Some(open), Some(close)) => &item[open + 1..close],
            _ => item.rsplit("::").next().unwrap(),
        };
        names.extend(
            list.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(|n| n.rsplit(" as ").next().unwrap().to_owned()),
        );
    }
    assert!(names.len() > 5, "found only {names:?}");
    assert!(
        names.len() <= MAX_ROOT_REEXPORTS,
        "{} root re-exports (at most {MAX_ROOT_REEXPORTS}): {names:?}",
        names.len()
    );
}

#[test]
fn the_checker_finds_a_loop_and_expands_groups() {
    let found = paths("use crate::a::{b, c::{d, e}};\nlet x = super::f::g(crate::h::I);");
    let found: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        found,
        [
            "crate::a::b",
            "crate::a::c::d",
            "crate::a::c::e",
            "super::f::g",
            "crate::h::I"
        ]
    );
    let m = |s: &str| vec![s.to_owned()];
    let edges = BTreeMap::from([
        (m("a"), BTreeSet::from([m("b")])),
        (m("b"), BTreeSet::from([m("c")])),
        (m("c"), BTreeSet::from([m("a")])),
    ]);
    assert_eq!(
        cycle_through(&m("a"), &edges),
        Some(vec![m("a"), m("b"), m("c")])
    );
    assert_eq!(cycle_through(&m("d"), &edges), None);
}

/// The lines of code in `text`: not blank, not a comment, not in the unit
/// tests at its end (`#[cfg(test)] mod tests { ... }`). Docs and tests make
/// a file longer without making it harder to hold in one's head, and a
/// rule that counts them cuts files where no concept ends.
fn code_lines(text: &str) -> usize {
    let mut lines: Vec<&str> = text.lines().collect();
    if let Some(at) = lines
        .windows(2)
        .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim() == "mod tests {")
    {
        lines.truncate(at);
    }
    lines
        .iter()
        .map(|line| line.trim())
        .filter(|line| !line.is_empty() && !line.starts_with("//"))
        .count()
}

#[test]
fn code_lines_leave_out_comments_blanks_and_unit_tests() {
    let text = "//! Docs.\n\nfn a() {}\n    // why\nfn b() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\n";
    assert_eq!(code_lines(text), 2);
}

#[test]
fn no_source_file_outgrows_a_room() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "crates", "benches", "examples"] {
        rust_files(&src.join(dir), &mut files);
    }
    let mut big: Vec<String> = files
        .iter()
        .map(|p| (p, code_lines(&fs::read_to_string(p).unwrap())))
        .filter(|(_, lines)| *lines > MAX_LINES)
        .map(|(p, lines)| {
            format!(
                "{} ({lines} lines of code)",
                p.strip_prefix(src).unwrap().display()
            )
        })
        .collect();
    big.sort();
    assert!(
        big.is_empty(),
        "over {MAX_LINES} lines of code: {}",
        big.join(", ")
    );
}

/// The most integration-test binaries under `tests/`. Each one links the
/// whole crate and compiles its own copy of the shared helpers
/// (`tests/common`), so a binary per file (33 once) costs every build;
/// tests share a binary per concern (`tests/cluster/main.rs` holds one
/// module per primitive). A file gets a binary of its own only for state
/// that spans a process or a server: a global recorder, server-wide
/// settings, slots moved under the other tests' feet, injected faults.
const MAX_TEST_BINARIES: usize = 10;

#[test]
fn the_tests_are_a_handful_of_binaries() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut binaries: Vec<String> = fs::read_dir(&tests)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| {
            (p.is_file() && p.extension().is_some_and(|e| e == "rs")) || p.join("main.rs").is_file()
        })
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    binaries.sort();
    assert!(binaries.len() >= 5, "found only {binaries:?}");
    assert!(
        binaries.len() <= MAX_TEST_BINARIES,
        "{} test binaries (at most {MAX_TEST_BINARIES}): {binaries:?}",
        binaries.len()
    );
}

/// Marks of each algorithm's arithmetic (code, not comments): in Lua,
/// then in Rust. Each must appear in exactly one file, of the algorithm's
/// own folder (`src/limit/algorithm/<name>/`): its Lua file, from which
/// every script that decides for it is assembled, and its `mod.rs` (local
/// mode's limiter, the scanner's reading of a state). A mark found
/// anywhere else is a second copy of the decision, which drifts.
const ARITHMETIC: [(&str, &[&str], &[&str]); 4] = [
    (
        // The TAT moved on by the emission interval, the units it holds,
        // the tolerance.
        "gcra",
        &["new_tat", "period / limit", "limit / period"],
        &["tolerance", "div_ceil(limit)", "div_ceil(period"],
    ),
    (
        // An earlier window's count told by its expiry; the window's sum.
        // (Its give-back, give_back.lua, reads the expiry too, to compare
        // it with the window it was given: no decision.)
        "fixed_window",
        &["PEXPIRETIME', key) <", "after > limit"],
        &["fn windowed(", "(window + 1) * at.period"],
    ),
    (
        // The previous window weighed by what is left of it.
        "sliding_window",
        &["HMGET", "estimate", "(now - start) / period"],
        &[
            "div_ceil(u128::from(at.period))",
            "room * at.period / state.previous",
        ],
    ),
    (
        // The live entries, and the unique stamps of new ones.
        "sliding_log",
        &["ZCOUNT", "newest + 1"],
        &["state.log.front()", "must_leave"],
    ),
];

fn files_with(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_with(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// The files under `src/` and `crates/` with extension `ext` whose code
/// (comments left out, `comment` marking one) contains `mark`, relative to
/// the repository.
fn holding(mark: &str, ext: &str, comment: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "crates"] {
        files_with(&root.join(dir), ext, &mut files);
    }
    let mut found: Vec<String> = files
        .into_iter()
        .filter(|path| {
            fs::read_to_string(path)
                .unwrap()
                .lines()
                .map(|line| line.split(comment).next().unwrap_or(""))
                .any(|code| code.contains(mark))
        })
        .map(|path| path.strip_prefix(root).unwrap().display().to_string())
        .collect();
    found.sort();
    found
}

#[test]
fn each_algorithm_decides_in_one_lua_and_one_rust_file_of_its_folder() {
    for (name, lua, rust) in ARITHMETIC {
        let folder = format!("src/limit/algorithm/{name}");
        for mark in lua {
            assert_eq!(
                holding(mark, "lua", "--"),
                [format!("{folder}/{name}.lua")],
                "{name}'s Lua mark {mark:?}"
            );
        }
        for mark in rust {
            assert_eq!(
                holding(mark, "rs", "//"),
                [format!("{folder}/mod.rs")],
                "{name}'s Rust mark {mark:?}"
            );
        }
    }
}

/// Every script the crate sends, as it sends it.
fn crate_scripts() -> Vec<(&'static str, &'static str)> {
    shardlimit::__private::scripts()
}

#[test]
fn the_server_clock_is_read_only_by_the_prelude() {
    let clock = include_str!("../src/scripts/clock.lua");
    for (name, code) in crate_scripts() {
        let reads = code.matches("redis.call('TIME')").count();
        let expected = usize::from(code.starts_with(clock));
        assert_eq!(
            reads, expected,
            "{name}: TIME read outside the clock prelude"
        );
    }
}

/// Each Lua file a script is made of opens with a header; a file that is a
/// script's own (not a shared part) documents its `KEYS`, `ARGV` and reply,
/// and each `KEYS[i]` it uses.
#[test]
fn every_script_documents_keys_argv_and_reply() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    files_with(&root.join("src"), "lua", &mut files);
    assert!(files.len() > 20, "{files:?}");
    // Parts that only define helpers for the scripts after them.
    let parts = ["clock.lua", "numbers.lua"];
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let code = fs::read_to_string(&path).unwrap();
        let header: String = code
            .lines()
            .take_while(|l| l.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(!header.is_empty(), "{file}: no header");
        if parts.contains(&file.as_str()) {
            continue;
        }
        // The generic check's driver: its prelude documents the script.
        if file == "limit_main.lua" {
            assert!(header.contains("see limit_prelude.lua for KEYS, ARGV and Reply"));
            continue;
        }
        for section in ["KEYS", "ARGV", "Reply"] {
            assert!(
                header.contains(section),
                "{file}: header must document {section}"
            );
        }
        assert!(
            !code.contains("KEYS[") || header.contains("KEYS["),
            "{file}: document each KEYS[i] it uses"
        );
    }
}

/// Imports the layers may not make, `(from, to)` by module path prefix:
/// the transport (`cluster`) knows no feature built on it — not the
/// limiters (nor their deny caches' invalidation hub, `limit::invalidation`),
/// the primitives and their outcome counts, the throttled reporters, the
/// admin tools, the health report or the HTTP and gRPC layers; they keep
/// their state in its extension slot and hear from it through traits it
/// defines — and an algorithm knows nothing of the admin tools that read
/// its state.
const FORBIDDEN: [(&[&str], &[&str]); 16] = [
    (&["cluster"], &["throttled"]),
    (&["cluster"], &["limit"]),
    (&["cluster"], &["admin"]),
    (&["cluster"], &["outcomes"]),
    (&["cluster"], &["usage"]),
    (&["cluster"], &["primitive"]),
    (&["cluster"], &["policy"]),
    (&["cluster"], &["lock"]),
    (&["cluster"], &["lease"]),
    (&["cluster"], &["counter"]),
    (&["cluster"], &["count"]),
    (&["cluster"], &["health"]),
    (&["cluster"], &["tower"]),
    (&["cluster"], &["tonic"]),
    (&["limit", "algorithm"], &["admin"]),
    (&["limit", "invalidation"], &["admin"]),
];

#[test]
fn the_transport_knows_no_feature_and_an_algorithm_no_admin_tool() {
    let modules = modules();
    let edges = edges(&modules);
    let under = |module: &Module, prefix: &[&str]| {
        module.len() >= prefix.len() && module.iter().zip(prefix).all(|(a, b)| a == b)
    };
    let mut found = Vec::new();
    for (from, tos) in &edges {
        for to in tos {
            for (a, b) in FORBIDDEN {
                if under(from, a) && under(to, b) {
                    found.push(format!("{} -> {}", name(from), name(to)));
                }
            }
        }
    }
    assert!(found.is_empty(), "forbidden imports: {}", found.join(", "));
    // The rule sees imports: the algorithms' modules do import crate paths,
    // and the layers the transport carries import it.
    let algorithm = vec![
        "limit".to_owned(),
        "algorithm".to_owned(),
        "gcra".to_owned(),
    ];
    assert!(
        edges.get(&algorithm).is_some_and(|tos| !tos.is_empty()),
        "{edges:?}"
    );
    let cluster = vec!["cluster".to_owned()];
    for above in [&["limit", "invalidation"][..], &["outcomes"]] {
        let above: Module = above.iter().map(|p| (*p).to_owned()).collect();
        assert!(
            edges.get(&above).is_some_and(|tos| tos.contains(&cluster)),
            "{} should import cluster: {edges:?}",
            name(&above)
        );
    }
}
