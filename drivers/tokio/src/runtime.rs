//! The tokio runtime under [`Client`](crate::Client): spawning, a timer, TCP (and TLS over
//! it) and Unix sockets, the few calls `botmesh-redis-client` needs. A bot never names these; a test or a
//! benchmark that drives the runtime-generic client does.
use std::future::Future;
use std::io;
use std::path::Path;
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
#[cfg(feature = "tls")]
use tokio_rustls::client::TlsStream;
#[cfg(feature = "tls")]
use tokio_rustls::TlsConnector as Handshake;

use botmesh_redis_client::{ReadHalf, WriteHalf};
pub use botmesh_redis_client::{Runtime, TlsConnector};
use botmesh_redis_core::driver::session::DialTarget;
use botmesh_redis_core::NodeAddr;

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
pub struct Reader(ReaderInner);

#[derive(Debug)]
enum ReaderInner {
    Tcp(OwnedReadHalf),
    #[cfg(unix)]
    Unix(tokio::net::unix::OwnedReadHalf),
    #[cfg(feature = "tls")]
    Tls(tokio::io::ReadHalf<TlsStream<TcpStream>>),
}

/// The writing half of a connection.
#[derive(Debug)]
pub struct Writer(WriterInner);

#[derive(Debug)]
enum WriterInner {
    Tcp(OwnedWriteHalf),
    #[cfg(unix)]
    Unix(tokio::net::unix::OwnedWriteHalf),
    #[cfg(feature = "tls")]
    Tls(tokio::io::WriteHalf<TlsStream<TcpStream>>),
}

impl Runtime for Tokio {
    type Task = AbortOnDrop;
    type Reader = Reader;
    type Writer = Writer;

    /// The runtime the client starts on.
    type Spawner = tokio::runtime::Handle;

    /// Four on the multi-thread runtime, three on the current-thread one. On one node, 64
    /// callers, four lanes measured 1.3x the `GET`s a second of two on the multi-thread
    /// runtime, at the same or less CPU a call, and three 0.85x four there (medians of three
    /// pairs); on one thread three measured 1.07x the `GET`s a second of four at 0.9x the CPU
    /// a call, two about 0.65x (`docs/performance.md`, "Four lanes to one node", "Three lanes
    /// on one thread").
    fn one_node_lanes(spawner: &tokio::runtime::Handle) -> usize {
        if Self::one_thread(spawner) {
            3
        } else {
            4
        }
    }

    /// Panics outside a tokio runtime, as `tokio::spawn` does: a client starts within one.
    fn spawner() -> tokio::runtime::Handle {
        tokio::runtime::Handle::current()
    }

    fn spawn<F: Future<Output = ()> + Send + 'static>(
        spawner: &tokio::runtime::Handle,
        task: F,
    ) -> AbortOnDrop {
        AbortOnDrop(spawner.spawn(task))
    }

    fn spawn_detached<F: Future<Output = ()> + Send + 'static>(
        spawner: &tokio::runtime::Handle,
        task: F,
    ) {
        drop(spawner.spawn(task));
    }

    fn one_thread(spawner: &tokio::runtime::Handle) -> bool {
        spawner.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
    }

    async fn sleep_until(at: Instant) {
        tokio::time::sleep_until(at.into()).await;
    }

    async fn connect(
        target: &DialTarget,
        tls: Option<&TlsConnector>,
    ) -> io::Result<(Reader, Writer)> {
        let addr = match target {
            DialTarget::Tcp(addr) => addr,
            DialTarget::Unix(path) => return connect_unix(path).await,
        };
        let stream = TcpStream::connect((addr.host.as_str(), addr.port)).await?;
        stream.set_nodelay(true)?;
        let Some(tls) = tls else {
            let (read, write) = stream.into_split();
            return Ok((
                Reader(ReaderInner::Tcp(read)),
                Writer(WriterInner::Tcp(write)),
            ));
        };
        handshake(addr, tls, stream).await
    }
}

/// Opens the Unix socket at `path`, and splits it.
#[cfg(unix)]
async fn connect_unix(path: &Path) -> io::Result<(Reader, Writer)> {
    let (read, write) = tokio::net::UnixStream::connect(path).await?.into_split();
    Ok((
        Reader(ReaderInner::Unix(read)),
        Writer(WriterInner::Unix(write)),
    ))
}

#[cfg(not(unix))]
async fn connect_unix(path: &Path) -> io::Result<(Reader, Writer)> {
    Err(botmesh_redis_client::unix_sockets_unsupported(path))
}

/// Runs the TLS handshake over `stream`, and splits it.
#[cfg(feature = "tls")]
async fn handshake(
    addr: &NodeAddr,
    tls: &TlsConnector,
    stream: TcpStream,
) -> io::Result<(Reader, Writer)> {
    let name = tls.server_name(addr)?;
    let stream = Handshake::from(tls.config().clone())
        .connect(name, stream)
        .await?;
    let (read, write) = tokio::io::split(stream);
    Ok((
        Reader(ReaderInner::Tls(read)),
        Writer(WriterInner::Tls(write)),
    ))
}

/// Without this crate's `tls` feature there is no handshake to run. The client refuses TLS
/// when it is built without it too; this answers the one case left, a client whose `tls` was
/// turned on by another crate of the application.
#[cfg(not(feature = "tls"))]
async fn handshake(
    _addr: &NodeAddr,
    _tls: &TlsConnector,
    _stream: TcpStream,
) -> io::Result<(Reader, Writer)> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "TLS: botmesh-redis-tokio was built without its `tls` feature; enable it",
    ))
}

impl ReadHalf for Reader {
    async fn read(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match &mut self.0 {
            ReaderInner::Tcp(read) => read.read_buf(buf).await,
            #[cfg(unix)]
            ReaderInner::Unix(read) => read.read_buf(buf).await,
            #[cfg(feature = "tls")]
            ReaderInner::Tls(read) => read.read_buf(buf).await,
        }
    }
}

impl WriteHalf for Writer {
    fn try_write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match &mut self.0 {
            WriterInner::Tcp(write) => write.try_write(bytes),
            #[cfg(unix)]
            WriterInner::Unix(write) => write.try_write(bytes),
            // rustls may keep what the socket does not take in its buffer, to be sent only by
            // a later poll: every TLS write goes through the flusher's `write_all` instead.
            #[cfg(feature = "tls")]
            WriterInner::Tls(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.0 {
            WriterInner::Tcp(write) => write.write_all(bytes).await,
            #[cfg(unix)]
            WriterInner::Unix(write) => write.write_all(bytes).await,
            #[cfg(feature = "tls")]
            WriterInner::Tls(write) => {
                write.write_all(bytes).await?;
                write.flush().await
            }
        }
    }

    async fn shutdown(&mut self) {
        // On TLS this sends close_notify first.
        let _ = match &mut self.0 {
            WriterInner::Tcp(write) => write.shutdown().await,
            #[cfg(unix)]
            WriterInner::Unix(write) => write.shutdown().await,
            #[cfg(feature = "tls")]
            WriterInner::Tls(write) => write.shutdown().await,
        };
    }
}
