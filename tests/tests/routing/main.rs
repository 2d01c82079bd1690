//! The routing suites: redirects, script routing, `NOSCRIPT`, slot moves and failovers, on real
//! Redis Clusters; one module per behaviour.
//!
//! One test binary per family (str0m's `tests/bwe/main.rs` is the model): the suites link
//! once, and share the family's servers (`shared_cluster`, `shared_single`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ask_during_migration;
mod failover_under_load;
mod moved_after_slot_move;
mod noscript_fallback;
mod reply_lost_after_write;
mod scan_unknown_endpoints;
mod script_routed_to_owner;
mod scripts_in_a_migrating_slot;
mod single_node_name_moved;
mod slot_function_agrees_with_server;
