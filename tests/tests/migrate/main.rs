//! The migration's suites: the lifecycle (operators' sequences, random sequences against a
//! model), the copy in both directions, its reports, refusals and interruptions, and the
//! cleanup, against real `redis-server` processes; one module per behaviour.
//!
//! One test binary per family (str0m's `tests/bwe/main.rs` is the model): the suites link
//! once, and share the family's servers (`shared_cluster`, `shared_single`, `other_single`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod allow_live;
mod delete_source;
mod dry_run;
mod exact_counts_and_reruns;
mod include;
mod killed_and_rerun;
mod leases;
mod lifecycle_model;
mod lifecycle_sequences;
mod masters_without_endpoints;
mod mirror_removes_what_vanished;
mod mirror_rollback;
mod non_utf8_message_ids;
mod other_server_is_found;
mod partial_rollback;
mod refusals;
mod refused_payload_is_unreadable;
mod reshard_during_the_copy;
mod roundtrip;
mod shared_items;
mod store_view;
mod ttl_and_counters;
mod unreadable;
mod unrepresentable;
