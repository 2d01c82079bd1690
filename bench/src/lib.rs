//! What the benchmark binaries share: the figures file that `bench --csv PATH` writes and
//! `charts` reads ([`figures`]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod figures;

/// Concurrent callers of every workload unless `--callers` says otherwise; the charts' bars
/// are at this count.
pub const CALLERS: usize = 64;

/// W1's message payload in bytes unless `--payload` says otherwise; the charts' W1 figures
/// are at this size.
pub const PAYLOAD_LEN: usize = 200;
