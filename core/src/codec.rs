//! Typed records: an [`Encode`] turns a user's value into the bytes the store keeps, a
//! [`Decode`] turns them back ([`Codec`] is both).
//!
//! The store keeps chats, contacts, checkpoints, user data and conversations as opaque bytes.
//! [`Store::typed`](crate::Store::typed) pairs a store with a codec, and the resulting
//! [`Typed`](crate::Typed) writes and reads
//! those records as the user's own type. The codec is the user's choice: `Json` (feature
//! `json`) for any `serde` type, or implementations of [`Encode`] and [`Decode`] for another format.
//!
//! ```no_run
//! # #[cfg(feature = "json")]
//! # mod example {
//! use botmesh_redis_core::codec::Json;
//! use botmesh_redis_core::Store;
//! use botmesh_redis_core::{Error, Executor};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Chat {
//!     title: String,
//!     muted: bool,
//! }
//!
//! async fn demo<E: Executor>(store: &Store<E>) -> Result<(), Error> {
//!     let chats = store.typed(Json);
//!     chats.upsert_chat("chat-1", &Chat { title: "Ana".into(), muted: false }).await?;
//!     let chat: Option<Chat> = chats.get_chat("chat-1").await?;
//!     assert!(chat.is_some_and(|c| !c.muted));
//!     Ok(())
//! }
//! # }
//! ```
//!
//! A value the codec cannot encode fails with [`Error::Codec`](crate::Error::Codec) before anything is sent; a
//! stored value it cannot decode fails with [`Error::Codec`](crate::Error::Codec) naming the record (the stored bytes
//! are left alone: read them raw with the [`Store`](crate::Store) method of the same name).

use std::fmt;

use bytes::Bytes;

/// Why a codec could not encode or decode a value: the format's own message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CodecError {
    message: String,
}

impl CodecError {
    /// An error with the format's message (its `Display`).
    pub fn new(message: impl fmt::Display) -> Self {
        CodecError {
            message: message.to_string(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Turns values of `T` into the bytes a record holds: what a write of a typed record needs.
///
/// Reads need only [`Decode`], writes only [`Encode`], so a type that can only be read (a
/// `Deserialize`-only view of a record another service writes) or only be written works with
/// the half it has. [`Codec`] names both halves together.
///
/// Implement both for a format of your own; the store names the record in the
/// [`Error::Codec`](crate::Error::Codec) it reports, so a codec only says what is wrong with
/// the bytes or the value.
///
/// ```
/// use botmesh_redis_core::codec::{Codec, CodecError, Decode, Encode};
/// use bytes::Bytes;
///
/// /// A counter stored as decimal text.
/// struct Decimal;
///
/// impl Encode<u64> for Decimal {
///     fn encode(&self, value: &u64) -> Result<Bytes, CodecError> {
///         Ok(Bytes::from(value.to_string()))
///     }
/// }
///
/// impl Decode<u64> for Decimal {
///     fn decode(&self, bytes: &[u8]) -> Result<u64, CodecError> {
///         let text = std::str::from_utf8(bytes).map_err(CodecError::new)?;
///         text.parse().map_err(CodecError::new)
///     }
/// }
///
/// fn round_trip<C: Codec<u64>>(codec: &C) {
///     assert_eq!(codec.decode(&codec.encode(&42).unwrap()), Ok(42));
///     assert!(codec.decode(b"forty-two").is_err());
/// }
/// round_trip(&Decimal);
/// ```
pub trait Encode<T: ?Sized> {
    /// The bytes to store for `value`.
    fn encode(&self, value: &T) -> Result<Bytes, CodecError>;
}

/// Turns the bytes a record holds back into a `T`: what a read of a typed record needs (see
/// [`Encode`]).
pub trait Decode<T> {
    /// The value stored as `bytes`.
    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError>;
}

/// Both halves of a format for `T`: [`Encode`] and [`Decode`]. Implemented for every type
/// that has both; implement those two, not this.
pub trait Codec<T>: Encode<T> + Decode<T> {}

impl<C, T> Codec<T> for C where C: Encode<T> + Decode<T> {}

/// JSON through `serde_json` (feature `json`): writes need `T: Serialize`, reads
/// `T: Deserialize`, and nothing more.
///
/// Records are compact JSON text, so they stay readable with `redis-cli`, and the other
/// replicas (or another language) can read them.
#[cfg(feature = "json")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Json;

#[cfg(feature = "json")]
impl<T> Encode<T> for Json
where
    T: serde::Serialize + ?Sized,
{
    fn encode(&self, value: &T) -> Result<Bytes, CodecError> {
        serde_json::to_vec(value)
            .map(Bytes::from)
            .map_err(CodecError::new)
    }
}

#[cfg(feature = "json")]
impl<T> Decode<T> for Json
where
    T: serde::de::DeserializeOwned,
{
    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError> {
        serde_json::from_slice(bytes).map_err(CodecError::new)
    }
}
