//! Medians, quantiles and the JSON report under `target/bench/`.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde_json::json;

use crate::drive::Outcome;

pub(crate) fn median(values: &[f64]) -> f64 {
    quantile(values, 0.5)
}

/// Linearly interpolated quantile (`q` in 0..=1).
pub(crate) fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

pub(crate) fn side_json(rates: &[f64], h: &Histogram<u64>, o: Outcome) -> serde_json::Value {
    json!({
        "decisions_per_sec_rounds": rates,
        "decisions_per_sec_median": median(rates),
        "latency_us": {
            "p50": h.value_at_quantile(0.5),
            "p90": h.value_at_quantile(0.9),
            "p99": h.value_at_quantile(0.99),
            "p999": h.value_at_quantile(0.999),
            "max": h.max(),
        },
        "ok": o.ok,
        "errors": o.errors,
        "bypassed": o.bypassed,
        "denied": o.denied,
        "denied_cached": o.cached,
    })
}

pub(crate) fn write_report(kind: &str, what: &str, report: &serde_json::Value) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench");
    std::fs::create_dir_all(dir).unwrap();
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let path = format!("{dir}/{stamp}-{what}-{kind}.json");
    let mut report = report.clone();
    report["machine"] = json!(machine());
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    eprintln!("wrote {path}");
}

pub(crate) fn machine() -> BTreeMap<&'static str, String> {
    let mut m = BTreeMap::new();
    m.insert(
        "cpus",
        std::thread::available_parallelism()
            .map(|n| n.to_string())
            .unwrap_or_default(),
    );
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo")
        && let Some(line) = info.lines().find(|l| l.starts_with("model name"))
    {
        m.insert(
            "cpu",
            line.split(':').nth(1).unwrap_or("").trim().to_owned(),
        );
    }
    m
}
