//! Key building, slot calculation and parsing, per key, on one core.
//!
//! ```text
//! cargo bench --bench keys
//! ```
//!
//! Target: key building + slot calculation at 5,000,000 keys/s or more on
//! one core (200 ns per key).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use shardlimit::keys::{KeyBuilder, KeyId, ParsedKey, slot};

fn keys(c: &mut Criterion) {
    let builder = KeyBuilder::new("sl").unwrap();
    let gcra = KeyId::new("gcra", "api").unwrap();
    let lock = KeyId::new("lock", "job").unwrap();
    let fence = lock.with_part("fence").unwrap();
    let subjects: Vec<String> = (0..1024)
        .map(|i| format!("user:{}", 1_000_000 + i * 7919))
        .collect();

    let mut group = c.benchmark_group("keys");
    group.throughput(Throughput::Elements(1));

    let mut i = 0;
    group.bench_function("build key set + slot (1 key)", |b| {
        b.iter(|| {
            i = (i + 1) & 1023;
            black_box(builder.key_set(black_box(&subjects[i]), [&gcra]).unwrap())
        })
    });

    group.throughput(Throughput::Elements(2));
    group.bench_function("build key set + slot (2 keys: lock + fence)", |b| {
        b.iter(|| {
            i = (i + 1) & 1023;
            black_box(
                builder
                    .key_set(black_box(&subjects[i]), [&lock, &fence])
                    .unwrap(),
            )
        })
    });

    group.throughput(Throughput::Elements(1));
    let escaped: Vec<String> = (0..1024).map(|i| format!("tenant{{{i}}}%:user")).collect();
    group.bench_function("build key set + slot (subject needing escapes)", |b| {
        b.iter(|| {
            i = (i + 1) & 1023;
            black_box(builder.key_set(black_box(&escaped[i]), [&gcra]).unwrap())
        })
    });

    let built: Vec<Vec<u8>> = subjects
        .iter()
        .map(|s| builder.key(s, &gcra).unwrap())
        .collect();
    group.bench_function("slot of a built key", |b| {
        b.iter(|| {
            i = (i + 1) & 1023;
            black_box(slot(black_box(&built[i])))
        })
    });
    group.bench_function("parse a built key", |b| {
        b.iter(|| {
            i = (i + 1) & 1023;
            black_box(ParsedKey::parse(black_box(&built[i])).unwrap())
        })
    });
    group.finish();
}

criterion_group!(benches, keys);
criterion_main!(benches);
