//! Cursors: named 64-bit integers, `p:cursor:<name>` in both layouts, for positions a bot
//! resumes from (an update offset, a sync token). [`set_cursor_if_greater`] only moves a cursor
//! forward, comparing exact integers in a script.

use crate::error::Error;
use crate::keys::Keyspace;
use crate::plan::{single, Single};
use crate::request::{Access, Arg, Request};
use crate::scripts::CURSOR_SET_IF_GREATER;
use crate::value::Value;

/// Reads a cursor; an error when it holds something that is not an integer.
pub fn get_cursor(ks: &Keyspace, name: &str) -> Result<Single<Option<i64>>, Error> {
    let request = Request::cmd(Access::Read, "GET")
        .key(ks.cursor(name))
        .build()?;
    Ok(single("get_cursor", request, |v| match v {
        Value::Nil => Ok(None),
        other => other.as_i64().map(Some),
    }))
}

/// Stores a cursor, whatever it held.
pub fn set_cursor(ks: &Keyspace, name: &str, value: i64) -> Result<Single<()>, Error> {
    let request = Request::cmd(Access::Write, "SET")
        .key(ks.cursor(name))
        .arg(value)
        .build()?;
    Ok(single("set_cursor", request, super::ok))
}

/// Stores a cursor only when it is unset or holds a smaller integer. Yields `true` when it was
/// stored; an error (and no write) when it holds something that is not an integer.
pub fn set_cursor_if_greater(ks: &Keyspace, name: &str, value: i64) -> Result<Single<bool>, Error> {
    let request = Request::script_in(
        ks,
        &CURSOR_SET_IF_GREATER,
        Access::Write,
        vec![ks.cursor(name)],
        vec![value.into_arg()],
    )?;
    Ok(single("set_cursor_if_greater", request, super::positive))
}
