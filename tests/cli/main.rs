//! The `shardlimit` binary against the six-node cluster (feature `cli`):
//! its commands and their output (`cli`), and that no path it prints a
//! node through shows a password (`secrets`, with the `tower` layer's).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
#[path = "../fake_node/mod.rs"]
mod fake_node;

mod cli;
#[cfg(feature = "tower")]
mod secrets;
