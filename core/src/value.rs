//! Replies: the core's own value type, decoded from RESP2 frames, and typed accessors that turn
//! a surprising reply into an error instead of a panic.

use bytes::Bytes;
use redis_protocol::resp2::types::BytesFrame;
use std::fmt;

use crate::error::{Error, ServerError};

/// A successful reply.
#[derive(Clone, PartialEq, Eq)]
pub enum Value {
    /// A nil bulk string or nil array.
    Nil,
    /// An integer reply.
    Int(i64),
    /// A bulk string.
    Bulk(Bytes),
    /// A simple-string (status) reply such as `OK`.
    Status(Bytes),
    /// An array reply.
    Array(Vec<Value>),
    /// An error reply inside a value: an item of an array reply (`EXEC`'s), or the answer of
    /// the `WAIT` written after a grant. A reply that is itself an error is a
    /// [`Frame`]'s `Err`, never this.
    Error(ServerError),
}

/// One decoded reply: a value or an error reply.
pub type Frame = Result<Value, ServerError>;

/// Converts a decoded RESP2 frame.
pub fn from_frame(frame: BytesFrame) -> Frame {
    match frame {
        BytesFrame::Error(text) => Err(ServerError::new(text.to_string())),
        other => Ok(value_of(other)),
    }
}

fn value_of(frame: BytesFrame) -> Value {
    match frame {
        BytesFrame::Null => Value::Nil,
        BytesFrame::Integer(i) => Value::Int(i),
        BytesFrame::BulkString(b) => Value::Bulk(b),
        BytesFrame::SimpleString(b) => Value::Status(b),
        // An error nested in an array (a MULTI/EXEC reply) keeps its type: no accessor
        // mistakes it for data.
        BytesFrame::Error(text) => Value::Error(ServerError::new(text.to_string())),
        BytesFrame::Array(items) => Value::Array(items.into_iter().map(value_of).collect()),
    }
}

impl Value {
    fn unexpected(&self, wanted: &str) -> Error {
        Error::UnexpectedReply {
            detail: format!("wanted {wanted}, got {self:?}"),
        }
    }

    /// An integer, also from a bulk string of digits (Lua numbers arrive as integers, `INCR`
    /// results and stored counters as either).
    pub fn as_i64(&self) -> Result<i64, Error> {
        match self {
            Value::Int(i) => Ok(*i),
            Value::Bulk(b) | Value::Status(b) => std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| self.unexpected("an integer")),
            _ => Err(self.unexpected("an integer")),
        }
    }

    /// A non-negative integer (a token, a counter), also from a bulk string of digits: the
    /// whole `u64` range, past `i64::MAX`.
    pub fn as_u64(&self) -> Result<u64, Error> {
        match self {
            Value::Int(i) => {
                u64::try_from(*i).map_err(|_| self.unexpected("a non-negative integer"))
            }
            Value::Bulk(b) | Value::Status(b) => std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| self.unexpected("a non-negative integer")),
            _ => Err(self.unexpected("a non-negative integer")),
        }
    }

    /// Bytes of a bulk or status reply, `None` for nil.
    pub fn into_opt_bytes(self) -> Result<Option<Bytes>, Error> {
        match self {
            Value::Nil => Ok(None),
            Value::Bulk(b) | Value::Status(b) => Ok(Some(b)),
            other => Err(other.unexpected("a string or nil")),
        }
    }

    /// Bytes of a bulk or status reply.
    pub fn into_bytes(self) -> Result<Bytes, Error> {
        match self {
            Value::Bulk(b) | Value::Status(b) => Ok(b),
            other => Err(other.unexpected("a string")),
        }
    }

    /// A UTF-8 string.
    pub fn into_string(self) -> Result<String, Error> {
        let bytes = self.into_bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Error::UnexpectedReply {
            detail: "wanted UTF-8 text".into(),
        })
    }

    /// The items of an array reply (nil counts as empty).
    pub fn into_array(self) -> Result<Vec<Value>, Error> {
        match self {
            Value::Array(items) => Ok(items),
            Value::Nil => Ok(Vec::new()),
            other => Err(other.unexpected("an array")),
        }
    }

    /// Checks for a status reply of exactly `OK`.
    pub fn expect_ok(&self) -> Result<(), Error> {
        match self {
            Value::Status(b) if b.as_ref() == b"OK" => Ok(()),
            _ => Err(self.unexpected("OK")),
        }
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Nil => f.write_str("nil"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Bulk(b) => write!(f, "\"{}\"", b.escape_ascii()),
            Value::Status(b) => write!(f, "+{}", b.escape_ascii()),
            Value::Array(items) => f.debug_list().entries(items).finish(),
            Value::Error(e) => write!(f, "-{}", e.text().escape_default()),
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Bulk(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_inside_an_array_stays_an_error() {
        let frame = BytesFrame::Array(vec![
            BytesFrame::Integer(1),
            BytesFrame::Error("NOREPLICAS Not enough good replicas".into()),
        ]);
        let Ok(Value::Array(items)) = from_frame(frame) else {
            panic!("an array reply is a value");
        };
        let nested = ServerError::new("NOREPLICAS Not enough good replicas");
        assert_eq!(items, [Value::Int(1), Value::Error(nested.clone())]);
        assert_eq!(
            items[1].clone().into_bytes().ok(),
            None,
            "never read as data"
        );
        assert_eq!(nested.code(), "NOREPLICAS");
        assert_eq!(
            format!("{:?}", items[1]),
            "-NOREPLICAS Not enough good replicas"
        );
    }
}
