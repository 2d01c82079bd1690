//! One conformance suite, run against both drivers.
//!
//! Each integration test is written once, as a generic `async fn name<R: Runtime>()` over
//! [`Client<R>`](botmesh_redis_client::Client), and [`both_drivers!`](crate::both_drivers)
//! turns it into a module `name` with two tests:
//!
//! - `name::tokio`, on [`Tokio`] (`botmesh-redis-tokio`);
//! - `name::async_std`, on [`AsyncStd`] (`botmesh-redis-async-std`).
//!
//! Both run on a multi-thread tokio runtime with two workers: the test's own scaffolding
//! (spawning callers, sleeping, timeouts) uses tokio whatever the driver. The async-std
//! driver's own tasks (session, readers, writers, timers, sockets) still run on
//! `async-global-executor` and the `async-io` reactor, so each driver is exercised for real.
//! (`tests/async_std_without_tokio.rs` shows that the async-std driver needs no tokio at all.)
//! [`on_one_thread!`](crate::on_one_thread) runs chosen tests once more on the tokio driver over
//! a current-thread runtime, whose callers take a path of their own.
//!
//! ```no_run
//! use botmesh_redis_core::{Access, ClientOptions, Executor, Request, Value};
//! use botmesh_redis_tests::conformance::{Client, Runtime};
//! use botmesh_redis_tests::{both_drivers, shared_single};
//!
//! async fn ping_answers_pong<R: Runtime>() {
//!     let url = shared_single().url();
//!     let client = Client::<R>::connect(ClientOptions::url(url)).await.unwrap();
//!     let ping = Request::cmd(Access::Read, "PING").build().unwrap();
//!     assert_eq!(client.call(ping).await, Ok(Value::Status("PONG".into())));
//!     client.close().await;
//! }
//!
//! // `cargo test` lists `ping_answers_pong::tokio` and `ping_answers_pong::async_std`.
//! both_drivers!(ping_answers_pong);
//! # fn main() {}
//! ```
//!
//! The suites of one family share a test binary, and so the family's shared servers. Tests
//! that read server-wide counters (`INFO commandstats`, `CLIENT LIST`) or need the machine to
//! themselves (timers under load) would see the other tests' traffic: they hold [`exclusive`]
//! for their whole body and are declared `both_drivers!(exclusive: name)`; every other test
//! holds a [`shared_turn`] (the macro takes it for its tests; a plain `#[test]` of a family
//! with exclusive tests takes [`shared_turn_blocking`] itself), so an exclusive test runs alone in its binary.

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use botmesh_redis_async_std::runtime::AsyncStd;
pub use botmesh_redis_client::{Client, Runtime};
pub use botmesh_redis_tokio::runtime::Tokio;

use botmesh_redis_core::{Access, Executor, Key, Request, Value};

/// Writes a fresh key under a prefix made from `name` and reads the value back: the round trip
/// with which a test shows that a client works (its handshake, authentication, TLS, routing).
pub async fn set_get<R: Runtime>(client: &Client<R>, name: &str) {
    let key = Key::new(format!("{}:k", crate::unique_prefix(name)));
    let value = format!("value of {name}");
    let set = Request::cmd(Access::Write, "SET")
        .key(&key)
        .arg(value.as_str())
        .build()
        .unwrap();
    client.call(set).await.unwrap();
    let get = Request::cmd(Access::Read, "GET").key(&key).build().unwrap();
    assert_eq!(client.call(get).await, Ok(Value::from(value.as_str())));
}

/// `GET key`, which must answer.
pub async fn get<R: Runtime>(client: &Client<R>, key: &Key) -> Value {
    let request = Request::cmd(Access::Read, "GET").key(key).build().unwrap();
    client.call(request).await.unwrap()
}

/// Expands each generic `async fn name<R: Runtime>()` into a module `name` holding two tests,
/// `name::tokio` and `name::async_std`, each on a two-worker multi-thread tokio runtime.
/// Attributes written before a name (such as `#[ignore = "why"]`) go on both tests:
/// `both_drivers!(first, #[ignore = "a known bug"] second);`. See [`conformance`](crate::conformance).
#[macro_export]
macro_rules! both_drivers {
    // One generic body run on several setups: `both_drivers!(body { name => setup, ... })`
    // defines `async fn name<R>() { body::<R>(setup).await }` for each and runs them all.
    ($body:ident { $($(#[$attr:meta])* $name:ident => $setup:expr),+ $(,)? }) => {
        $(
            async fn $name<R: $crate::conformance::Runtime>() {
                $body::<R>($setup).await;
            }
        )+
        $crate::both_drivers!($($(#[$attr])* $name),+);
    };
    // Tests that take `exclusive()` themselves: no shared turn around them.
    (exclusive: $($(#[$attr:meta])* $name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                $(#[$attr])*
                async fn tokio() {
                    super::$name::<$crate::conformance::Tokio>().await;
                }

                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                $(#[$attr])*
                async fn async_std() {
                    super::$name::<$crate::conformance::AsyncStd>().await;
                }
            }
        )+
    };
    ($($(#[$attr:meta])* $name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                $(#[$attr])*
                async fn tokio() {
                    let _turn = $crate::conformance::shared_turn().await;
                    super::$name::<$crate::conformance::Tokio>().await;
                }

                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                $(#[$attr])*
                async fn async_std() {
                    let _turn = $crate::conformance::shared_turn().await;
                    super::$name::<$crate::conformance::AsyncStd>().await;
                }
            }
        )+
    };
}

/// Runs generic tests of [`both_drivers!`](crate::both_drivers) once more, on the tokio driver
/// over a current-thread runtime: there the callers a batch of results woke submit their
/// calls themselves and the last of them writes ([`Runtime::one_thread`]), a path the
/// multi-thread runs never take. `on_one_thread!(a, b)` adds `on_one_thread::a::tokio` and
/// `on_one_thread::b::tokio` (one invocation per file); with `exclusive:` the tests take their
/// own turn, as [`both_drivers!`](crate::both_drivers)'s exclusive arm does.
#[macro_export]
macro_rules! on_one_thread {
    (exclusive: $($name:ident),+ $(,)?) => {
        $crate::on_one_thread!(@tests (), $($name),+);
    };
    ($($name:ident),+ $(,)?) => {
        $crate::on_one_thread!(@tests $crate::conformance::shared_turn().await, $($name),+);
    };
    // Each test holds `$turn` (the shared turn, or nothing) for its body.
    (@tests $turn:expr, $($name:ident),+) => {
        mod on_one_thread {
            $(
                mod $name {
                    #[::tokio::test(flavor = "current_thread")]
                    async fn tokio() {
                        let _turn = $turn;
                        super::super::$name::<$crate::conformance::Tokio>().await;
                    }
                }
            )+
        }
    };
}

/// The driver's name, for messages: `"tokio"`, `"async-std"`, or the type's name.
pub fn driver_name<R: Runtime>() -> &'static str {
    use std::any::TypeId;
    if TypeId::of::<R>() == TypeId::of::<Tokio>() {
        "tokio"
    } else if TypeId::of::<R>() == TypeId::of::<AsyncStd>() {
        "async-std"
    } else {
        std::any::type_name::<R>()
    }
}

/// The turns of this test process: many shared ones at once, or one exclusive. Fair: a test
/// waiting for an exclusive turn keeps new shared turns out until it had its turn.
static TURNS: RwLock<()> = RwLock::const_new(());

/// The test process to itself: held for a whole test body, it waits for every test holding
/// a [`shared_turn`] to end and keeps new ones out (a test reading server-wide counters must
/// not see another test's traffic).
pub async fn exclusive() -> RwLockWriteGuard<'static, ()> {
    TURNS.write().await
}

/// A turn beside the other tests, not beside an [`exclusive`] one. Not to be held by a test
/// that then asks for [`exclusive`].
pub async fn shared_turn() -> RwLockReadGuard<'static, ()> {
    TURNS.read().await
}

/// [`shared_turn`] for a plain `#[test]`, outside any async runtime.
pub fn shared_turn_blocking() -> RwLockReadGuard<'static, ()> {
    TURNS.blocking_read()
}
