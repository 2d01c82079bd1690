//! The session, the sans-IO state machine under every driver, run against the simulated
//! cluster of `testing::sim`: routing, redirects, retries, timeouts, failover, close. One file
//! per behaviour family; `support` holds what several of them share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod abandoned;
mod address_map;
mod ask;
mod basics;
mod batch;
mod close;
mod connect;
mod dead_node;
mod decoding;
mod failover;
mod handshake;
mod idle_probe;
mod moved;
mod no_credentials_in_logs;
mod node_churn;
mod node_route_without_host;
mod noscript;
mod plan_panics;
mod properties;
mod refresh;
mod replica_answers;
mod reply_lost;
mod retry_table;
mod sentinel;
mod tally;
mod timeouts;
mod tryagain;
mod unix_socket;
mod wait;
