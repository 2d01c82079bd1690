//! # botmesh-redis-tokio
//!
//! botmesh-redis on tokio: the store of a multi-replica bot on Redis and Redis Cluster. This
//! crate is only the tokio [`Runtime`]: spawning, a timer and
//! TCP. The client is `botmesh-redis-runtime`'s, the protocol logic `botmesh-redis-core`'s;
//! both are re-exported, so this is the one crate to depend on.
//!
//! ```no_run
//! use botmesh_redis_tokio::{Access, Client, ClientOptions, Executor, Key, Request};
//!
//! # async fn demo() -> Result<(), botmesh_redis_tokio::Error> {
//! let client = Client::connect(ClientOptions::cluster(["127.0.0.1:7000"])).await?;
//! let key = Key::new("greeting");
//! client.call(Request::cmd(Access::Write, "SET").key(&key).arg("hello").build()?).await?;
//! client.close().await;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

use std::future::Future;
use std::io;
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

pub use botmesh_redis_core::*;
pub use botmesh_redis_runtime::{ClientStats, Runtime};
use botmesh_redis_runtime::{ReadHalf, WriteHalf};

/// A client on tokio. Must be started within a tokio runtime (multi-thread or current-thread).
pub type Client = botmesh_redis_runtime::Client<Tokio>;

/// The tokio runtime.
#[derive(Debug)]
pub struct Tokio;

/// A tokio task that is aborted when dropped.
#[derive(Debug)]
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The reading half of a connection.
#[derive(Debug)]
pub struct Reader(OwnedReadHalf);

/// The writing half of a connection.
#[derive(Debug)]
pub struct Writer(OwnedWriteHalf);

impl Runtime for Tokio {
    type Task = AbortOnDrop;
    type Reader = Reader;
    type Writer = Writer;

    fn spawn<F: Future<Output = ()> + Send + 'static>(task: F) -> AbortOnDrop {
        AbortOnDrop(tokio::spawn(task))
    }

    fn spawn_detached<F: Future<Output = ()> + Send + 'static>(task: F) {
        drop(tokio::spawn(task));
    }

    async fn sleep_until(at: Instant) {
        tokio::time::sleep_until(at.into()).await;
    }

    async fn connect(addr: &NodeAddr) -> io::Result<(Reader, Writer)> {
        let stream = TcpStream::connect((addr.host.as_str(), addr.port)).await?;
        stream.set_nodelay(true)?;
        let (read, write) = stream.into_split();
        Ok((Reader(read), Writer(write)))
    }
}

impl ReadHalf for Reader {
    async fn read(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        self.0.read_buf(buf).await
    }
}

impl WriteHalf for Writer {
    fn try_write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.try_write(bytes)
    }

    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes).await
    }

    async fn shutdown(&mut self) {
        let _ = self.0.shutdown().await;
    }
}

/// The README's example, compiled as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
