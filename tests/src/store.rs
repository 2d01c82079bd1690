//! Helpers shared by the store suites (`store_*.rs`): the three setups every suite runs on,
//! raw reads of the keyspace to check invariants behind the API, and an executor that stops a
//! plan after a number of steps (a crash between two steps, without killing anything).

use std::collections::BTreeSet;
use std::future::Future;

use crate::conformance::{Client, Runtime};
use crate::{shared_cluster, shared_single, unique_prefix};
use botmesh_redis_core::driver::{Plan, Reply, Step};
use botmesh_redis_core::{
    Access, ClientOptions, Error, Executor, Key, Keyspace, Layout, Request, Value,
};
use botmesh_redis_core::{Store, StoreOptions};

/// Where a suite runs: a single node in either layout, or the shared cluster (cluster layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setup {
    /// The shared single node, legacy layout.
    SingleLegacy,
    /// The shared single node, cluster layout.
    SingleCluster,
    /// The shared 3 x 1 cluster, cluster layout.
    Cluster,
}

impl Setup {
    /// The layout the setup runs in.
    pub fn layout(self) -> Layout {
        match self {
            Setup::SingleLegacy => Layout::Legacy,
            Setup::SingleCluster | Setup::Cluster => Layout::Cluster,
        }
    }

    /// A connected client for this setup, on the driver `R`.
    pub async fn client<R: Runtime>(self) -> Client<R> {
        let options = match self {
            Setup::SingleLegacy | Setup::SingleCluster => ClientOptions::url(shared_single().url()),
            Setup::Cluster => ClientOptions::cluster(shared_cluster().seeds()),
        };
        Client::<R>::connect(options).await.unwrap()
    }

    /// A started store on a fresh prefix, on the driver `R`.
    pub async fn store<R: Runtime>(self, name: &str) -> Store<Client<R>> {
        let client = self.client::<R>().await;
        let store = store_on(client, self.layout(), &unique_prefix(name));
        store.start().await.unwrap();
        store
    }
}

/// A store on `client` in `layout` (not started).
pub fn store_on<R: Runtime>(client: Client<R>, layout: Layout, prefix: &str) -> Store<Client<R>> {
    Store::new(client, StoreOptions::new(prefix).layout(layout)).unwrap()
}

/// The members of a sorted set, in order.
pub async fn zmembers<E: Executor>(client: &E, key: &Key) -> Vec<String> {
    let request = Request::cmd(Access::Read, "ZRANGE")
        .key(key)
        .arg(0u32)
        .arg(-1i64)
        .build()
        .unwrap();
    client
        .call(request)
        .await
        .unwrap()
        .into_array()
        .unwrap()
        .into_iter()
        .map(|v| v.into_string().unwrap())
        .collect()
}

/// Whether a key exists.
pub async fn exists<E: Executor>(client: &E, key: &Key) -> bool {
    let request = Request::cmd(Access::Read, "EXISTS")
        .key(key)
        .build()
        .unwrap();
    client.call(request).await.unwrap() == Value::Int(1)
}

/// Ids hostile to key names: separators, hash-tag braces, glob and percent characters,
/// spaces, emoji, and the empty string.
pub const NASTY: &[&str] = &[
    "a:b", "a", "b:c", "{x}", "}{", "{", "}", "*", "?[]\\", "%", "%25", "a b", "😀", "",
];

// --- an executor that crashes a plan between two steps ----------------------------------------

/// Runs plans through `inner` but lets each one send only `sends` batches: the next batch ends
/// the plan with an error instead, as if the process had died between two steps.
#[derive(Clone)]
pub struct StopAfter<E> {
    /// The executor that runs the batches.
    pub inner: E,
    /// Batches each plan may send.
    pub sends: usize,
}

impl<E: Executor> Executor for StopAfter<E> {
    fn run<P: Plan>(&self, plan: P) -> impl Future<Output = Result<P::Output, Error>> + Send {
        self.inner.run(Truncated {
            plan,
            sends_left: self.sends,
        })
    }

    fn deployment(&self) -> botmesh_redis_core::Deployment {
        self.inner.deployment()
    }

    fn detach<P: Plan>(&self, plan: P) {
        self.inner.detach(plan)
    }

    fn shutdown(&self, grace: std::time::Duration) -> impl Future<Output = ()> + Send {
        self.inner.shutdown(grace)
    }
}

struct Truncated<P> {
    plan: P,
    sends_left: usize,
}

impl<P: Plan> Truncated<P> {
    fn gate(&mut self, step: Step<P::Output>) -> Step<P::Output> {
        match step {
            Step::Send(_) if self.sends_left == 0 => Step::Done(Err(Error::NotSent {
                reason: "stopped by the test between two steps".into(),
            })),
            Step::Send(batch) => {
                self.sends_left -= 1;
                Step::Send(batch)
            }
            other => other,
        }
    }
}

impl<P: Plan> Plan for Truncated<P> {
    type Output = P::Output;

    fn operation(&self) -> &'static str {
        self.plan.operation()
    }

    fn start(&mut self) -> Step<P::Output> {
        let step = self.plan.start();
        self.gate(step)
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<P::Output> {
        let step = self.plan.resume(replies);
        self.gate(step)
    }
}

// --- an executor that says when a plan's first step has run ------------------------------------

/// Runs plans through `inner` and notifies `first_step` once the first batch of each plan has
/// been answered (for `delete_chat`: once the log has become the drain).
#[derive(Clone)]
pub struct SignalFirstStep<E> {
    /// The executor that runs the batches.
    pub inner: E,
    /// Notified once a plan's first batch was answered.
    pub first_step: std::sync::Arc<tokio::sync::Notify>,
}

impl<E: Executor> Executor for SignalFirstStep<E> {
    fn run<P: Plan>(&self, plan: P) -> impl Future<Output = Result<P::Output, Error>> + Send {
        self.inner.run(Signalled {
            plan,
            first_step: Some(self.first_step.clone()),
        })
    }

    fn deployment(&self) -> botmesh_redis_core::Deployment {
        self.inner.deployment()
    }

    fn detach<P: Plan>(&self, plan: P) {
        self.inner.detach(plan)
    }

    fn shutdown(&self, grace: std::time::Duration) -> impl Future<Output = ()> + Send {
        self.inner.shutdown(grace)
    }
}

struct Signalled<P> {
    plan: P,
    first_step: Option<std::sync::Arc<tokio::sync::Notify>>,
}

impl<P: Plan> Plan for Signalled<P> {
    type Output = P::Output;

    fn operation(&self) -> &'static str {
        self.plan.operation()
    }

    fn start(&mut self) -> Step<P::Output> {
        self.plan.start()
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<P::Output> {
        if let Some(notify) = self.first_step.take() {
            notify.notify_one();
        }
        self.plan.resume(replies)
    }
}

// --- raw views of the keyspace -----------------------------------------------------------------

/// Every key of `chat`'s message items, read on the node that holds them (`KEYS`, so a test
/// sees what is really there, not what the store reports).
pub fn item_keys(setup: Setup, ks: &Keyspace, chat: &str) -> BTreeSet<Vec<u8>> {
    let head = ks.message_item(chat, "");
    let pattern = format!(
        "{}*",
        botmesh_redis_core::keys::glob_escape(std::str::from_utf8(head.as_bytes()).unwrap())
    );
    let mut conn = match setup {
        Setup::Cluster => shared_cluster().conn_for_key(head.as_bytes()).unwrap(),
        _ => shared_single().conn().unwrap(),
    };
    conn.cmd(&["KEYS", pattern.as_str()])
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_bytes().unwrap().to_vec())
        .collect()
}
