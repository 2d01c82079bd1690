//! The store's data operations: messages, chats and contacts,
//! checkpoints, user data, conversations, cursors, and the `start()` guard.
//!
//! Each operation is a [`Plan`](crate::plan::Plan) built by a function of a submodule, in either
//! layout; [`Store`] is the typed async API over any [`Executor`](crate::Executor) that runs
//! them. `docs/store.md` is the user guide.
//!
//! | module | operations |
//! | - | - |
//! | [`messages`] | save, get, list (by time range, paged), delete one message |
//! | [`delete_chat`](mod@delete_chat) | delete a chat: its messages in atomic chunks, then its record |
//! | [`records`] | chats and contacts (upsert, get, list, delete), checkpoints (set with TTL, get, list, clear) |
//! | [`user`] | user data (`ctx.user`): set with TTL, get, delete, list, clear |
//! | [`conv`] | conversation state: get, set with TTL, delete |
//! | [`cursor`] | cursors: get, set, set if greater |
//! | [`guard`] | the `start()` guard of each layout |
//!
//! ## One script call per atomic step
//!
//! Every multi-key write is one Lua script (`lua/*.lua`) whose keys are all declared. In the
//! cluster layout they share one hash tag, so one slot; the legacy layout has no hash tags and
//! runs on a single node, where the same scripts are sent with
//! [`Request::single_node_script`]. Scripts never build key names: where a script needs keys
//! that depend on data (the items of a page of messages, the members of a chunk), the plan reads
//! the ids first, builds the keys in Rust with [`Keyspace`](crate::keys::Keyspace) and passes them as `KEYS`.

use std::time::Duration;

use bytes::Bytes;

use crate::error::Error;
use crate::request::{Access, Arg, Request};
use crate::value::Value;

mod api;
pub(crate) mod conv;
pub(crate) mod cursor;
pub(crate) mod delete_chat;
pub(crate) mod guard;
pub(crate) mod messages;
pub(crate) mod records;
mod typed;
pub(crate) mod user;

pub use api::{Store, StoreOptions};
pub use delete_chat::DeletedChat;
pub use guard::Started;
pub use messages::{Message, MessageCursor, MessagePage};
pub use records::{Record, RecordCursor, RecordPage};
pub use typed::Typed;
pub use user::{UserDataCursor, UserDataPage, UserEntry};

pub(crate) use crate::page::MAX_PAGE;
pub(crate) use crate::plan::forward;
use crate::ttl::ttl_ms;

/// Splits the replies of a batch into values, failing on the first error.
pub(crate) fn values(replies: Vec<crate::plan::Reply>, wanted: usize) -> Result<Vec<Value>, Error> {
    if replies.len() != wanted {
        return Err(crate::plan::misuse(&format!(
            "{} replies for a batch of {wanted}",
            replies.len()
        )));
    }
    replies.into_iter().collect()
}

/// The one reply of a one-request step.
pub(crate) fn one(replies: Vec<crate::plan::Reply>) -> Result<Value, Error> {
    values(replies, 1)?
        .pop()
        .ok_or_else(|| crate::plan::misuse("no reply"))
}

/// Decodes `OK`.
pub(crate) fn ok(v: Value) -> Result<(), Error> {
    v.expect_ok()
}

/// Decodes an integer reply of 0 or more as "did something".
pub(crate) fn positive(v: Value) -> Result<bool, Error> {
    Ok(v.as_i64()? > 0)
}

/// `SET key value [PX ttl]`, the same in both layouts.
pub(crate) fn set_with_ttl(
    key: &crate::keys::Key,
    value: Bytes,
    ttl: Option<Duration>,
) -> Result<Request, Error> {
    let mut builder = Request::cmd(Access::Write, "SET").key(key).arg(value);
    if let Some(ttl) = ttl {
        builder = builder.arg("PX").arg(ttl_ms(ttl, "ttl")?);
    }
    builder.build()
}

/// The optional TTL argument of an expiring script: milliseconds, or empty for none.
pub(crate) fn ttl_arg(ttl: Option<Duration>) -> Result<Bytes, Error> {
    Ok(match ttl {
        Some(ttl) => ttl_ms(ttl, "ttl")?.into_arg(),
        None => Bytes::new(),
    })
}
