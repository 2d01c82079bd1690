//! The client's suites: connecting (TLS, `AUTH`, refused and hanging handshakes, the wrong
//! deployment refused), one pipelined connection per node, one node's room for calls and a
//! cluster's, timers under load, calls given up before they are written, plans that panic, the
//! async-std driver without tokio, the examples, and the real-server harness itself; one module
//! per behaviour.
//!
//! One test binary per family (str0m's `tests/bwe/main.rs` is the model): the suites link
//! once, and share the family's servers (`shared_cluster`, `shared_single`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod admission;
mod async_std_without_tokio;
mod auth;
mod batching;
mod cluster_rooms;
mod connect_that_hangs;
mod connect_truth;
mod examples_run;
mod given_up;
mod handshake_refusals_are_retried;
mod harness_starts_real_servers;
mod idle_probe;
mod inline;
mod lanes;
mod many_requests_one_connection;
mod metrics_counted;
mod metrics_scraped;
mod operation_spans;
mod plan_panics;
mod sentinel_discovery;
mod sentinel_failover_followed;
mod smoke;
mod timers_fire_under_load;
mod tls;
mod unix_socket;
