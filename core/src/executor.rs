//! The seam between the typed API and a driver: an [`Executor`] runs plans.
//!
//! The typed API (store, coordination) is written once against this trait; each driver's
//! `Client` implements it by submitting the plan to its session and awaiting the completion.

use std::future::Future;
use std::time::Duration;

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
    ///
    /// Dropping the future stops waiting, not always the plan: a plan of which nothing was
    /// written yet (waiting for room, for a connection that is opening, for the first slot
    /// map) is never written, while one that wrote a request runs to its end, every step of
    /// it, and its output is dropped. So a write given up on never lands later behind the
    /// caller's next one; one given up after it went out may still have run, as with any
    /// outcome that is unknown.
    fn run<P: Plan>(&self, plan: P) -> impl Future<Output = Result<P::Output, Error>> + Send;

    /// Sends one request and yields its raw reply (an error reply becomes
    /// [`Error::Server`]).
    fn call(&self, request: Request) -> impl Future<Output = Result<Value, Error>> + Send {
        self.run(single("call", request, Ok))
    }

    /// Runs `plan` in the background and drops its output: what a guard's `Drop` uses to give a
    /// held lock, turn, leadership or lease back, and what runs a keeper, since neither can
    /// await. The plan runs as any other (retries, redirects, the request timeout); a graceful
    /// [`Executor::shutdown`] lets it finish.
    fn detach<P: Plan>(&self, plan: P);

    /// Closes gracefully: no new plan is accepted ([`Error::Closed`]), plans with requests out
    /// finish within `grace` (then end as [`Error::Closed`], or [`Error::ReplyLost`] for a write
    /// sent and unanswered), plans waiting between steps (a turn's poll interval, a keeper's
    /// period) end as [`Error::Closed`] at once, and every connection is closed. Other clones
    /// see [`Error::Closed`] afterwards.
    fn shutdown(&self, grace: Duration) -> impl Future<Output = ()> + Send;

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

/// Where a component's keys live: a prefix (the layout follows the executor's deployment, as
/// the store's does: `cluster:v1` on a cluster, else legacy),
/// [`StoreOptions`](crate::StoreOptions), or a [`Keyspace`](crate::Keyspace) chosen outright.
pub trait IntoKeyspace {
    /// The keyspace, on an executor of `deployment`.
    fn into_keyspace(self, deployment: Deployment) -> Result<crate::keys::Keyspace, Error>;
}

impl IntoKeyspace for crate::keys::Keyspace {
    fn into_keyspace(self, _: Deployment) -> Result<crate::keys::Keyspace, Error> {
        Ok(self)
    }
}

impl IntoKeyspace for &crate::keys::Keyspace {
    fn into_keyspace(self, _: Deployment) -> Result<crate::keys::Keyspace, Error> {
        Ok(self.clone())
    }
}

impl IntoKeyspace for &str {
    fn into_keyspace(self, deployment: Deployment) -> Result<crate::keys::Keyspace, Error> {
        Ok(crate::keys::Keyspace::new(
            default_layout(deployment),
            self,
        )?)
    }
}

impl IntoKeyspace for String {
    fn into_keyspace(self, deployment: Deployment) -> Result<crate::keys::Keyspace, Error> {
        Ok(crate::keys::Keyspace::new(
            default_layout(deployment),
            self,
        )?)
    }
}

/// The layout a component takes when none is chosen: the cluster layout on a cluster, the
/// legacy layout on a single node.
pub(crate) fn default_layout(deployment: Deployment) -> crate::keys::Layout {
    match deployment {
        Deployment::Cluster => crate::keys::Layout::Cluster,
        Deployment::Single => crate::keys::Layout::Legacy,
    }
}
