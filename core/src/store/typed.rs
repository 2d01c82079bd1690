//! [`Typed`]: the store's opaque records as values of the user's types, through a codec:
//! writes need its [`Encode`] half, reads its [`Decode`] half.

use std::time::Duration;

use bytes::Bytes;

use crate::codec::{Decode, Encode};
use crate::error::Error;
use crate::executor::Executor;

use super::Store;

/// A [`Store`] that writes and reads its opaque records as values of the user's types, through
/// codec `C`; made by [`Store::typed`].
///
/// It covers the records whose value is opaque bytes: chats, contacts, checkpoints, user data
/// and conversations. Each method has the name and the behaviour of the [`Store`] method it
/// wraps, with a `&T` instead of `Bytes` to write and an `Option<T>` to read. Listings, deletes
/// and everything else are the store's: reach it with [`Typed::store`].
///
/// Writes need `C: Encode<T>` and reads `C: Decode<T>`, nothing more: with
/// `codec::Json` (feature `json`), reading a `Deserialize`-only type works.
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
    pub(super) fn new(store: Store<E>, codec: C) -> Self {
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
        C: Encode<T>,
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
        C: Decode<T>,
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
        C: Encode<T>,
    {
        let bytes = self.encode(value, || format!("chat {id:?}"))?;
        self.store.upsert_chat(id, bytes).await
    }

    /// Reads a chat record ([`Store::get_chat`]).
    pub async fn get_chat<T>(&self, id: &str) -> Result<Option<T>, Error>
    where
        C: Decode<T>,
    {
        let bytes = self.store.get_chat(id).await?;
        self.decode(bytes, || format!("chat {id:?}"))
    }

    /// Stores a contact record ([`Store::upsert_contact`]).
    pub async fn upsert_contact<T>(&self, id: &str, value: &T) -> Result<(), Error>
    where
        C: Encode<T>,
    {
        let bytes = self.encode(value, || format!("contact {id:?}"))?;
        self.store.upsert_contact(id, bytes).await
    }

    /// Reads a contact record ([`Store::get_contact`]).
    pub async fn get_contact<T>(&self, id: &str) -> Result<Option<T>, Error>
    where
        C: Decode<T>,
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
        C: Encode<T>,
    {
        let bytes = self.encode(value, || format!("checkpoint {id:?}"))?;
        self.store.set_checkpoint(id, bytes, ttl).await
    }

    /// Reads a checkpoint ([`Store::get_checkpoint`]).
    pub async fn get_checkpoint<T>(&self, id: &str) -> Result<Option<T>, Error>
    where
        C: Decode<T>,
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
        C: Encode<T>,
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
        C: Decode<T>,
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
        C: Encode<T>,
    {
        let bytes = self.encode(value, || format!("the conversation of chat {chat:?}"))?;
        self.store.set_conversation(chat, bytes, ttl).await
    }

    /// Reads a chat's conversation state ([`Store::get_conversation`]).
    pub async fn get_conversation<T>(&self, chat: &str) -> Result<Option<T>, Error>
    where
        C: Decode<T>,
    {
        let bytes = self.store.get_conversation(chat).await?;
        self.decode(bytes, || format!("the conversation of chat {chat:?}"))
    }
}

fn user_entry(user: &str, ns: &str, key: &str) -> String {
    format!("user data {key:?} in namespace {ns:?} of user {user:?}")
}
