//! The store's suites: every operation in both layouts, on a single node and on a cluster,
//! against real `redis-server` processes; one module per behaviour.
//!
//! One test binary per family (str0m's `tests/bwe/main.rs` is the model): the suites link
//! once, and share the family's servers (`shared_cluster`, `shared_single`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod delete_chat;
mod expiry_in_listings;
mod foreign_scores;
mod listing_during_slot_migration;
mod operations;
mod start_guard;
