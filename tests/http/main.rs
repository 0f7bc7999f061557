//! The HTTP and gRPC layers against the six-node cluster (features `tower`,
//! `axum`, `tonic`): the layer driven as a `tower::Service` (`layer`), its
//! rate-limit fields and problem details (`http_headers`), what its
//! `RateLimit-Policy` advertises against what it admits (`policy`), in gRPC
//! mode in front of a real tonic server (`grpc`), `examples/service.rs` run
//! as a process (`service`), and the axum and gRPC examples started with no
//! Redis to reach (`examples`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod examples;
#[cfg(feature = "tonic")]
mod grpc;
mod http_headers;
mod layer;
mod policy;
mod service;
