//! Plans as the core builds them, without a server: every store and coordination plan in both
//! layouts, its requests and scripted replies as snapshots, and typed records over an in-memory
//! executor. One file per family of operations.
//!
//! Regenerate the snapshots with `INSTA_UPDATE=always cargo test -p botmesh-redis-core
//! --all-features --test plans`, then review the `.snap` files by eye. The snapshot families
//! need the `testing` feature, for `plan::scripted`; typed records need `json` (the workspace's
//! test command enables every feature).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "testing")]
mod support;

mod batch;

#[cfg(feature = "testing")]
#[macro_use]
mod coord;

#[cfg(feature = "testing")]
mod locks;
#[cfg(feature = "testing")]
mod schedules;
#[cfg(feature = "testing")]
mod store;
#[cfg(feature = "testing")]
mod turns;
#[cfg(feature = "json")]
mod typed;
#[cfg(feature = "testing")]
mod zero_ttls;
