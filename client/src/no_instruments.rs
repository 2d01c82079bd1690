//! Without the `metrics` feature: the same calls as `instruments.rs`, which do nothing and
//! compile away, so the session task has no metrics cost at all.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use botmesh_redis_core::driver::session::{Session, Summary, Waiters};
use botmesh_redis_core::NodeAddr;

/// Nothing to register with.
#[derive(Clone)]
pub(crate) struct Registry;

impl Registry {
    pub(crate) fn global() -> Self {
        Registry
    }
}

/// Nothing held per connection.
pub(crate) struct ConnGauge;

/// No handles.
pub(crate) struct Instruments;

impl Instruments {
    pub(crate) fn new(_: Registry, _: Arc<AtomicUsize>) -> Self {
        Instruments
    }

    #[inline(always)]
    pub(crate) fn completed(&mut self, _: &Summary) {}

    #[inline(always)]
    pub(crate) fn observe<W: Waiters>(&mut self, _: &Session<W>) {}

    #[inline(always)]
    pub(crate) fn connecting(&mut self, _: &NodeAddr, _: bool) -> ConnGauge {
        ConnGauge
    }
}
