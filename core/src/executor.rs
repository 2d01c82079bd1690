//! The seam between the typed API and a driver: an [`Executor`] runs plans.
//!
//! The typed API (store, coordination) is written once against this trait; each driver's
//! `Client` implements it by submitting the plan to its session and awaiting the completion.

use std::future::Future;

use crate::error::Error;
use crate::plan::{single, Plan};
use crate::request::Request;
use crate::value::Value;

/// What an executor talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Deployment {
    /// One Redis node (or a proxy that looks like one).
    Single,
    /// A Redis Cluster: keys are routed by slot, multi-key calls must stay in one slot.
    Cluster,
}

/// Runs plans to completion. Implemented by `botmesh_redis_tokio::Client` and
/// `botmesh_redis_async_std::Client`.
pub trait Executor: Clone + Send + Sync + 'static {
    /// Runs `plan` and yields its output.
    fn run<P: Plan>(&self, plan: P) -> impl Future<Output = Result<P::Output, Error>> + Send;

    /// Sends one request and yields its raw reply (an error reply becomes
    /// [`Error::Server`]).
    fn call(&self, request: Request) -> impl Future<Output = Result<Value, Error>> + Send {
        self.run(single(request, Ok))
    }

    /// What this executor talks to. A driver's `Client` answers what its options' endpoints
    /// say; a wrapper answers its inner executor's word. The store picks its default layout
    /// from it, and every component refuses the legacy layout on a cluster.
    fn deployment(&self) -> Deployment;
}

/// Refuses a legacy-layout keyspace on a cluster executor: its multi-key scripts would fail
/// with `CROSSSLOT` at the first call.
pub(crate) fn check_layout<E: Executor>(
    exec: &E,
    ks: &crate::keys::Keyspace,
    component: &'static str,
) -> Result<(), Error> {
    if ks.layout() == crate::keys::Layout::Legacy && exec.deployment() == Deployment::Cluster {
        return Err(crate::error::ConfigError::LegacyLayoutOnCluster { component }.into());
    }
    Ok(())
}
