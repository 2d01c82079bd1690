//! Plans of the store's data operations (messages, records, user data, conversations,
//! cursors).

use bytes::Bytes;

use crate::error::Error;
use crate::layout::Keyspace;
use crate::plan::{single, Single};
use crate::request::{Access, Arg, Request};
use crate::script::Script;

crate::lua_script!(
    /// Stores a message item and its log entry atomically.
    pub SAVE_MESSAGE = "save_message"
);

/// The scripts of this module.
pub(crate) static SCRIPTS: &[&Script] = &[&SAVE_MESSAGE];

/// Saves a message: item and log entry in one script call, in the chat's slot.
/// Yields `true` when the message is new.
pub fn save_message(
    ks: &Keyspace,
    chat: &str,
    id: &str,
    time_ms: i64,
    payload: Bytes,
) -> Result<Single<bool>, Error> {
    let request = Request::script(
        &SAVE_MESSAGE,
        Access::Write,
        vec![ks.message_log(chat), ks.message_item(chat, id)],
        vec![id.into_arg(), time_ms.into_arg(), payload],
    )?;
    Ok(single(request, |v| Ok(v.as_i64()? == 1)))
}
