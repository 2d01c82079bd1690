//! Conversation state: one value per chat, `p:conv:<chat>` in both layouts (a single key, so
//! the cluster needs no hash tag).

use std::time::Duration;

use bytes::Bytes;

use crate::error::Error;
use crate::keys::Keyspace;
use crate::plan::{single, Single};
use crate::request::{Access, Request};
use crate::value::Value;

/// Reads a chat's conversation state.
pub fn get_conversation(ks: &Keyspace, chat: &str) -> Result<Single<Option<Bytes>>, Error> {
    let request = Request::cmd(Access::Read, "GET")
        .key(ks.conversation(chat))
        .build()?;
    Ok(single("get_conversation", request, Value::into_opt_bytes))
}

/// Stores a chat's conversation state, expiring after `ttl` (`None`: never; a write without a
/// TTL also clears an earlier one).
pub fn set_conversation(
    ks: &Keyspace,
    chat: &str,
    value: Bytes,
    ttl: Option<Duration>,
) -> Result<Single<()>, Error> {
    let request = super::set_with_ttl(&ks.conversation(chat), value, ttl)?;
    Ok(single("set_conversation", request, super::ok))
}

/// Deletes a chat's conversation state; yields `true` when it existed.
pub fn delete_conversation(ks: &Keyspace, chat: &str) -> Result<Single<bool>, Error> {
    let request = Request::cmd(Access::Write, "DEL")
        .key(ks.conversation(chat))
        .build()?;
    Ok(single("delete_conversation", request, super::positive))
}
