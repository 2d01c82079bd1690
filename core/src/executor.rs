//! The seam between the typed API and a driver: an [`Executor`] runs plans.
//!
//! The typed API (store, coordination) is written once against this trait; each driver's
//! `Client` implements it by submitting the plan to its session and awaiting the completion.

use std::future::Future;

use crate::error::Error;
use crate::plan::{single, Plan};
use crate::request::Request;
use crate::value::Value;

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
}
