//! Typed records: a [`Codec`] turns a user's value into the bytes the store keeps, and back.
//!
//! The store keeps chats, contacts, checkpoints, user data and conversations as opaque bytes.
//! [`Store::typed`] pairs a store with a codec, and the resulting [`Typed`] writes and reads
//! those records as the user's own type. The codec is the user's choice: `Json` (feature
//! `json`) for any `serde` type, or an implementation of [`Codec`] for another format.
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
//! A value the codec cannot encode fails with [`Error::Codec`] before anything is sent; a
//! stored value it cannot decode fails with [`Error::Codec`] naming the record (the stored bytes
//! are left alone: read them raw with the [`Store`] method of the same name).

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::store::Store;

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

/// Turns values of `T` into the bytes a record holds, and back.
///
/// Implement it for a format of your own; the store names the record in the [`Error::Codec`]
/// it reports, so a codec only says what is wrong with the bytes or the value.
///
/// ```
/// use botmesh_redis_core::codec::{Codec, CodecError};
/// use bytes::Bytes;
///
/// /// A counter stored as decimal text.
/// struct Decimal;
///
/// impl Codec<u64> for Decimal {
///     fn encode(&self, value: &u64) -> Result<Bytes, CodecError> {
///         Ok(Bytes::from(value.to_string()))
///     }
///     fn decode(&self, bytes: &[u8]) -> Result<u64, CodecError> {
///         let text = std::str::from_utf8(bytes).map_err(CodecError::new)?;
///         text.parse().map_err(CodecError::new)
///     }
/// }
///
/// assert_eq!(Decimal.decode(&Decimal.encode(&42).unwrap()), Ok(42));
/// assert!(Decimal.decode(b"forty-two").is_err());
/// ```
pub trait Codec<T> {
    /// The bytes to store for `value`.
    fn encode(&self, value: &T) -> Result<Bytes, CodecError>;
    /// The value stored as `bytes`.
    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError>;
}

/// JSON through `serde_json`, for any `Serialize + Deserialize` type (feature `json`).
///
/// Records are compact JSON text, so they stay readable with `redis-cli`, and the other
/// replicas (or another language) can read them.
#[cfg(feature = "json")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Json;

#[cfg(feature = "json")]
impl<T> Codec<T> for Json
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    fn encode(&self, value: &T) -> Result<Bytes, CodecError> {
        serde_json::to_vec(value)
            .map(Bytes::from)
            .map_err(CodecError::new)
    }

    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError> {
        serde_json::from_slice(bytes).map_err(CodecError::new)
    }
}

/// A [`Store`] that writes and reads its opaque records as values of the user's types, through
/// codec `C`; made by [`Store::typed`].
///
/// It covers the records whose value is opaque bytes: chats, contacts, checkpoints, user data
/// and conversations. Each method has the name and the behaviour of the [`Store`] method it
/// wraps, with a `&T` instead of `Bytes` to write and an `Option<T>` to read. Listings, deletes
/// and everything else are the store's: reach it with [`Typed::store`].
///
/// Errors: [`Error::Codec`] when the value cannot be encoded (nothing is sent) or the stored
/// bytes cannot be decoded, naming the record (`decoding contact "ana"`); otherwise the
/// store's own errors.
#[derive(Clone, Debug)]
pub struct Typed<E, C> {
    store: Store<E>,
    codec: C,
}

impl<E: Executor, C> Typed<E, C> {
    pub(crate) fn new(store: Store<E>, codec: C) -> Self {
        Typed { store, codec }
    }

    /// The untyped store.
    pub fn store(&self) -> &Store<E> {
        &self.store
    }

    /// The codec.
    pub fn codec(&self) -> &C {
        &self.codec
    }

    fn encode<T>(&self, value: &T, what: impl FnOnce() -> String) -> Result<Bytes, Error>
    where
        C: Codec<T>,
    {
        self.codec.encode(value).map_err(|e| Error::Codec {
            what: format!("encoding {}", what()),
            detail: e.to_string(),
        })
    }

    fn decode<T>(
        &self,
        bytes: Option<Bytes>,
        what: impl FnOnce() -> String,
    ) -> Result<Option<T>, Error>
    where
        C: Codec<T>,
    {
        bytes
            .map(|b| {
                self.codec.decode(&b).map_err(|e| Error::Codec {
                    what: format!("decoding {}", what()),
                    detail: e.to_string(),
                })
            })
            .transpose()
    }

    // --- chats, contacts, checkpoints ------------------------------------------------------

    /// Stores a chat record ([`Store::upsert_chat`]).
    pub async fn upsert_chat<T>(&self, id: &str, value: &T) -> Result<(), Error>
    where
        C: Codec<T>,
    {
        let bytes = self.encode(value, || format!("chat {id:?}"))?;
        self.store.upsert_chat(id, bytes).await
    }

    /// Reads a chat record ([`Store::get_chat`]).
    pub async fn get_chat<T>(&self, id: &str) -> Result<Option<T>, Error>
    where
        C: Codec<T>,
    {
        let bytes = self.store.get_chat(id).await?;
        self.decode(bytes, || format!("chat {id:?}"))
    }

    /// Stores a contact record ([`Store::upsert_contact`]).
    pub async fn upsert_contact<T>(&self, id: &str, value: &T) -> Result<(), Error>
    where
        C: Codec<T>,
    {
        let bytes = self.encode(value, || format!("contact {id:?}"))?;
        self.store.upsert_contact(id, bytes).await
    }

    /// Reads a contact record ([`Store::get_contact`]).
    pub async fn get_contact<T>(&self, id: &str) -> Result<Option<T>, Error>
    where
        C: Codec<T>,
    {
        let bytes = self.store.get_contact(id).await?;
        self.decode(bytes, || format!("contact {id:?}"))
    }

    /// Stores a checkpoint that expires after `ttl` ([`Store::set_checkpoint`]).
    pub async fn set_checkpoint<T>(
        &self,
        id: &str,
        value: &T,
        ttl: Option<Duration>,
    ) -> Result<(), Error>
    where
        C: Codec<T>,
    {
        let bytes = self.encode(value, || format!("checkpoint {id:?}"))?;
        self.store.set_checkpoint(id, bytes, ttl).await
    }

    /// Reads a checkpoint ([`Store::get_checkpoint`]).
    pub async fn get_checkpoint<T>(&self, id: &str) -> Result<Option<T>, Error>
    where
        C: Codec<T>,
    {
        let bytes = self.store.get_checkpoint(id).await?;
        self.decode(bytes, || format!("checkpoint {id:?}"))
    }

    // --- user data -------------------------------------------------------------------------

    /// Stores a user-data entry that expires after `ttl` ([`Store::set_user_data`]).
    pub async fn set_user_data<T>(
        &self,
        user: &str,
        ns: &str,
        key: &str,
        value: &T,
        ttl: Option<Duration>,
    ) -> Result<(), Error>
    where
        C: Codec<T>,
    {
        let bytes = self.encode(value, || user_entry(user, ns, key))?;
        self.store.set_user_data(user, ns, key, bytes, ttl).await
    }

    /// Reads a user-data entry ([`Store::get_user_data`]).
    pub async fn get_user_data<T>(
        &self,
        user: &str,
        ns: &str,
        key: &str,
    ) -> Result<Option<T>, Error>
    where
        C: Codec<T>,
    {
        let bytes = self.store.get_user_data(user, ns, key).await?;
        self.decode(bytes, || user_entry(user, ns, key))
    }

    // --- conversations ---------------------------------------------------------------------

    /// Stores a chat's conversation state, expiring after `ttl` ([`Store::set_conversation`]).
    pub async fn set_conversation<T>(
        &self,
        chat: &str,
        value: &T,
        ttl: Option<Duration>,
    ) -> Result<(), Error>
    where
        C: Codec<T>,
    {
        let bytes = self.encode(value, || format!("the conversation of chat {chat:?}"))?;
        self.store.set_conversation(chat, bytes, ttl).await
    }

    /// Reads a chat's conversation state ([`Store::get_conversation`]).
    pub async fn get_conversation<T>(&self, chat: &str) -> Result<Option<T>, Error>
    where
        C: Codec<T>,
    {
        let bytes = self.store.get_conversation(chat).await?;
        self.decode(bytes, || format!("the conversation of chat {chat:?}"))
    }
}

fn user_entry(user: &str, ns: &str, key: &str) -> String {
    format!("user data {key:?} in namespace {ns:?} of user {user:?}")
}
