//! The coordination suites: locks and their fences, turns, leaderships, schedules, leases and the
//! durable inbox/outbox, against real `redis-server` processes; one module per behaviour.
//!
//! One test binary per family (str0m's `tests/bwe/main.rs` is the model): the suites link
//! once, and share the family's servers (`shared_cluster`, `shared_single`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod durable_retry_after_reply_lost;
mod durable_windows;
mod fenced_records;
mod guards_and_keepers;
mod lock_fences;
mod outbox_exactly_once_ack;
mod schedule_equal_token;
mod tokens_past_2_53;
mod turn_exclusion;
mod turn_lifetime;
