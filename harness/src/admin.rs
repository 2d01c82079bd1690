//! A small blocking RESP2 connection for the harness's own commands, encoded and decoded with
//! `redis-protocol` (the client under test is never used to set up or check what it is tested
//! on).

use std::fmt;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::decode::decode_bytes_mut;
use redis_protocol::resp2::encode::extend_encode;
use redis_protocol::resp2::types::BytesFrame;

/// A decoded RESP2 reply.
#[derive(Clone, PartialEq, Eq)]
pub enum Value {
    /// The null bulk string or null array.
    Nil,
    /// A simple string such as `OK` or `PONG`.
    Simple(String),
    /// An error reply, without the leading `-` (for example `MOVED 3999 127.0.0.1:20001`).
    Error(String),
    /// An integer reply.
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// An array.
    Array(Vec<Value>),
}

impl Value {
    /// The text of a simple string, or of a bulk string that is valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Simple(s) => Some(s),
            Value::Bulk(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The bytes of a bulk or simple string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Simple(s) => Some(s.as_bytes()),
            Value::Bulk(b) => Some(b),
            _ => None,
        }
    }

    /// An integer reply, or a string reply that parses as one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            other => other.as_str().and_then(|s| s.parse().ok()),
        }
    }

    /// The items of an array reply.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The text of an error reply.
    pub fn as_error(&self) -> Option<&str> {
        match self {
            Value::Error(e) => Some(e),
            _ => None,
        }
    }

    /// Whether this is the simple string `OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, Value::Simple(s) if s == "OK")
    }

    /// Whether this is [`Value::Nil`].
    pub fn is_nil(&self) -> bool {
        matches!(self, Value::Nil)
    }

    fn from_frame(frame: BytesFrame) -> Value {
        match frame {
            BytesFrame::SimpleString(s) => Value::Simple(String::from_utf8_lossy(&s).into_owned()),
            BytesFrame::Error(e) => Value::Error(e.to_string()),
            BytesFrame::Integer(i) => Value::Int(i),
            BytesFrame::BulkString(b) => Value::Bulk(b.to_vec()),
            BytesFrame::Array(items) => {
                Value::Array(items.into_iter().map(Value::from_frame).collect())
            }
            BytesFrame::Null => Value::Nil,
        }
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Nil => f.write_str("nil"),
            Value::Simple(s) => write!(f, "+{s}"),
            Value::Error(e) => write!(f, "-{e}"),
            Value::Int(i) => write!(f, ":{i}"),
            Value::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Value::Array(items) => f.debug_list().entries(items).finish(),
        }
    }
}

/// A small blocking connection for administration and assertions in tests.
///
/// Requests go out one at a time (or as a [`pipeline`](AdminConn::pipeline)) and the connection
/// has read and write timeouts, so a dead or paused node gives an error, not a hang. After an I/O
/// or protocol error the connection is unusable: open a new one.
pub struct AdminConn {
    addr: SocketAddr,
    stream: TcpStream,
    buf: BytesMut,
    broken: Option<String>,
}

impl fmt::Debug for AdminConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminConn")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl AdminConn {
    /// Connect and read timeout used by [`AdminConn::connect`].
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// Connects to `addr` without authenticating, with [`AdminConn::DEFAULT_TIMEOUT`].
    pub fn connect(addr: SocketAddr) -> Result<AdminConn, String> {
        AdminConn::connect_timeout(addr, AdminConn::DEFAULT_TIMEOUT)
    }

    /// Connects to `addr` without authenticating; `timeout` bounds the connect and every read
    /// and write.
    pub fn connect_timeout(addr: SocketAddr, timeout: Duration) -> Result<AdminConn, String> {
        let stream = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let mut conn = AdminConn {
            addr,
            stream,
            buf: BytesMut::with_capacity(16 * 1024),
            broken: None,
        };
        conn.set_timeout(timeout)?;
        Ok(conn)
    }

    /// The address this connection talks to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the read and write timeout.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), String> {
        self.stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| self.stream.set_write_timeout(Some(timeout)))
            .map_err(|e| format!("set timeout on {}: {e}", self.addr))
    }

    /// Sends `AUTH [user] password`; fails with the server's error text (e.g. `WRONGPASS ...`).
    pub fn auth(&mut self, user: Option<&str>, password: &str) -> Result<(), String> {
        let reply = match user {
            Some(user) => self.cmd(&["AUTH", user, password])?,
            None => self.cmd(&["AUTH", password])?,
        };
        if reply.is_ok() {
            Ok(())
        } else {
            Err(format!("AUTH on {}: unexpected reply {reply:?}", self.addr))
        }
    }

    /// Sends one command and returns its reply. An error reply is `Ok(Value::Error(..))`;
    /// `Err` means an I/O or protocol failure (the connection is then unusable).
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value, String> {
        self.send(&[command_frame(args)])?;
        self.receive()
    }

    /// Sends one command; an error reply becomes `Err` holding its text as the server sent it
    /// (e.g. `MOVED 3999 127.0.0.1:20001`), as does an I/O failure. Use [`AdminConn::call`] to
    /// tell the two apart.
    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value, String> {
        match self.call(args)? {
            Value::Error(e) => Err(e),
            value => Ok(value),
        }
    }

    /// Writes every command at once, then reads one reply per command (error replies are
    /// `Value::Error` items).
    pub fn pipeline<C, A>(&mut self, commands: &[C]) -> Result<Vec<Value>, String>
    where
        C: AsRef<[A]>,
        A: AsRef<[u8]>,
    {
        let frames: Vec<BytesFrame> = commands.iter().map(|c| command_frame(c.as_ref())).collect();
        self.send(&frames)?;
        (0..frames.len()).map(|_| self.receive()).collect()
    }

    /// Whether an I/O or protocol failure made the connection unusable (an error reply does
    /// not).
    pub(crate) fn is_broken(&self) -> bool {
        self.broken.is_some()
    }

    fn fail(&mut self, what: String) -> String {
        let message = format!("admin connection to {}: {what}", self.addr);
        self.broken = Some(message.clone());
        message
    }

    fn send(&mut self, frames: &[BytesFrame]) -> Result<(), String> {
        if let Some(broken) = &self.broken {
            return Err(format!("connection already failed: {broken}"));
        }
        let mut out = BytesMut::new();
        for frame in frames {
            if let Err(e) = extend_encode(&mut out, frame, false) {
                return Err(self.fail(format!("encode: {e:?}")));
            }
        }
        if let Err(e) = self.stream.write_all(&out) {
            return Err(self.fail(format!("write: {e}")));
        }
        Ok(())
    }

    fn receive(&mut self) -> Result<Value, String> {
        if let Some(broken) = &self.broken {
            return Err(format!("connection already failed: {broken}"));
        }
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match decode_bytes_mut(&mut self.buf) {
                Ok(Some((frame, _, _))) => return Ok(Value::from_frame(frame)),
                Ok(None) => {}
                Err(e) => return Err(self.fail(format!("malformed reply: {e:?}"))),
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(self.fail("connection closed by the server".to_owned())),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(format!("read: {e}"))),
            }
        }
    }
}

fn command_frame<A: AsRef<[u8]>>(args: &[A]) -> BytesFrame {
    BytesFrame::Array(
        args.iter()
            .map(|a| BytesFrame::BulkString(Bytes::copy_from_slice(a.as_ref())))
            .collect(),
    )
}
