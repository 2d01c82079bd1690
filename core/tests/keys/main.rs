//! The key contract without a server: the full key table of both layouts as snapshots, the
//! properties of `cluster:v1` names (encoding, tags, buckets, slots), the migration's name reader,
//! and the RESP writer checked against redis-protocol.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod encoding;
mod names;
mod properties;
mod table;
