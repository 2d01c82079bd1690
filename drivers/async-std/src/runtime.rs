//! The async-std runtime under [`Client`](crate::Client): spawning, a timer, TCP (and TLS over
//! it) and Unix sockets, the few calls `botmesh-redis-client` needs. A bot never names these; a test or a
//! benchmark that drives the runtime-generic client does.
use std::future::Future;
use std::io::{self, Write};
use std::net::TcpStream;
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use async_io::Async;
use bytes::BytesMut;
#[cfg(feature = "tls")]
use futures_lite::io::{ReadHalf as TlsRead, WriteHalf as TlsWrite};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
#[cfg(feature = "tls")]
use futures_rustls::client::TlsStream;
#[cfg(feature = "tls")]
use futures_rustls::TlsConnector as Handshake;

use botmesh_redis_client::{ReadHalf, WriteHalf};
pub use botmesh_redis_client::{Runtime, TlsConnector};
use botmesh_redis_core::driver::session::DialTarget;
use botmesh_redis_core::NodeAddr;

/// The async-std (async-io) runtime.
#[derive(Debug)]
pub struct AsyncStd;

/// The reading half of a connection, with a scratch buffer: async-io reads into initialised
/// memory only, so it reads there and appends what arrived, instead of zeroing spare capacity
/// before every read.
#[derive(Debug)]
pub struct Reader {
    stream: ReadStream,
    scratch: Box<[u8]>,
}

#[derive(Debug)]
enum ReadStream {
    Tcp(Arc<Async<TcpStream>>),
    #[cfg(unix)]
    Unix(Arc<Async<UnixStream>>),
    #[cfg(feature = "tls")]
    Tls(TlsRead<TlsStream<async_net::TcpStream>>),
}

/// The writing half of a connection.
#[derive(Debug)]
pub struct Writer(WriteStream);

#[derive(Debug)]
enum WriteStream {
    Tcp(Arc<Async<TcpStream>>),
    #[cfg(unix)]
    Unix(Arc<Async<UnixStream>>),
    #[cfg(feature = "tls")]
    Tls(TlsWrite<TlsStream<async_net::TcpStream>>),
}

impl Runtime for AsyncStd {
    /// Dropping an `async_task::Task` cancels it.
    type Task = async_global_executor::Task<()>;
    type Reader = Reader;
    type Writer = Writer;

    /// One global executor: nothing to carry.
    type Spawner = ();

    /// Two: on one node, 64 callers, four lanes measured 0.8x the `GET`s a second of two on
    /// this driver, at more CPU a call (`docs/performance.md`, "Four lanes to one node").
    fn one_node_lanes(_: &()) -> usize {
        2
    }

    fn spawner() {}

    fn spawn<F: Future<Output = ()> + Send + 'static>(_: &(), task: F) -> Self::Task {
        async_global_executor::spawn(task)
    }

    fn spawn_detached<F: Future<Output = ()> + Send + 'static>(_: &(), task: F) {
        async_global_executor::spawn(task).detach();
    }

    async fn sleep_until(at: Instant) {
        async_io::Timer::at(at).await;
    }

    async fn connect(
        target: &DialTarget,
        tls: Option<&TlsConnector>,
    ) -> io::Result<(Reader, Writer)> {
        let addr = match target {
            DialTarget::Tcp(addr) => addr,
            DialTarget::Unix(path) => return connect_unix(path).await,
        };
        // async-net resolves the host name; its stream is an `Async<TcpStream>` underneath,
        // which the writer needs for non-blocking writes from the session task.
        let stream = async_net::TcpStream::connect((addr.host.as_str(), addr.port)).await?;
        stream.set_nodelay(true)?;
        let scratch = vec![0; 64 * 1024].into_boxed_slice();
        let Some(tls) = tls else {
            let stream: Arc<Async<TcpStream>> = stream.into();
            let reader = Reader {
                stream: ReadStream::Tcp(stream.clone()),
                scratch,
            };
            return Ok((reader, Writer(WriteStream::Tcp(stream))));
        };
        handshake(addr, tls, stream, scratch).await
    }
}

/// Opens the Unix socket at `path`: one non-blocking stream that both halves share, as on TCP.
#[cfg(unix)]
async fn connect_unix(path: &Path) -> io::Result<(Reader, Writer)> {
    let stream = Arc::new(Async::<UnixStream>::connect(path).await?);
    let reader = Reader {
        stream: ReadStream::Unix(stream.clone()),
        scratch: vec![0; 64 * 1024].into_boxed_slice(),
    };
    Ok((reader, Writer(WriteStream::Unix(stream))))
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
    stream: async_net::TcpStream,
    scratch: Box<[u8]>,
) -> io::Result<(Reader, Writer)> {
    let name = tls.server_name(addr)?;
    let stream = Handshake::from(tls.config().clone())
        .connect(name, stream)
        .await?;
    let (read, write) = futures_lite::io::split(stream);
    let reader = Reader {
        stream: ReadStream::Tls(read),
        scratch,
    };
    Ok((reader, Writer(WriteStream::Tls(write))))
}

/// Without this crate's `tls` feature there is no handshake to run. The client refuses TLS
/// when it is built without it too; this answers the one case left, a client whose `tls` was
/// turned on by another crate of the application.
#[cfg(not(feature = "tls"))]
async fn handshake(
    _addr: &NodeAddr,
    _tls: &TlsConnector,
    _stream: async_net::TcpStream,
    _scratch: Box<[u8]>,
) -> io::Result<(Reader, Writer)> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "TLS: botmesh-redis-async-std was built without its `tls` feature; enable it",
    ))
}

impl ReadHalf for Reader {
    async fn read(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        let n = match &mut self.stream {
            ReadStream::Tcp(stream) => (&**stream).read(&mut self.scratch).await?,
            #[cfg(unix)]
            ReadStream::Unix(stream) => (&**stream).read(&mut self.scratch).await?,
            #[cfg(feature = "tls")]
            ReadStream::Tls(stream) => stream.read(&mut self.scratch).await?,
        };
        buf.extend_from_slice(&self.scratch[..n]);
        Ok(n)
    }
}

impl WriteHalf for Writer {
    fn try_write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match &mut self.0 {
            // `Async` made the socket non-blocking: a full socket answers `WouldBlock`.
            WriteStream::Tcp(stream) => stream.get_ref().write(bytes),
            #[cfg(unix)]
            WriteStream::Unix(stream) => stream.get_ref().write(bytes),
            // rustls may keep what the socket does not take in its buffer, to be sent only by
            // a later poll: every TLS write goes through the flusher's `write_all` instead.
            #[cfg(feature = "tls")]
            WriteStream::Tls(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.0 {
            WriteStream::Tcp(stream) => AsyncWriteExt::write_all(&mut &**stream, bytes).await,
            #[cfg(unix)]
            WriteStream::Unix(stream) => AsyncWriteExt::write_all(&mut &**stream, bytes).await,
            #[cfg(feature = "tls")]
            WriteStream::Tls(stream) => {
                AsyncWriteExt::write_all(stream, bytes).await?;
                stream.flush().await
            }
        }
    }

    async fn shutdown(&mut self) {
        match &mut self.0 {
            WriteStream::Tcp(stream) => {
                let _ = stream.get_ref().shutdown(std::net::Shutdown::Write);
            }
            #[cfg(unix)]
            WriteStream::Unix(stream) => {
                let _ = stream.get_ref().shutdown(std::net::Shutdown::Write);
            }
            // Sends close_notify, then shuts the socket's writing side.
            #[cfg(feature = "tls")]
            WriteStream::Tls(stream) => {
                let _ = stream.close().await;
            }
        }
    }
}
