//! The durability table: an inbound journal and an outbox.

use std::time::Duration;

use bytes::Bytes;

use crate::error::Error;
use crate::keys::Keyspace;
use crate::page::Limit;
use crate::plan::{single, Single};
use crate::request::{Access, Arg, Request};
use crate::scripts::DURABLE;
use crate::ttl::ttl_ms;

use super::held;

/// The durability table's parts, in the script's KEYS order.
pub const DURABLE_PARTS: [&str; 10] = [
    "journal", "items", "ready", "seq", "claims", "owners", "done", "begun", "acked", "window",
];

fn durable_request(ks: &Keyspace, table: &str, args: Vec<Bytes>) -> Result<Request, Error> {
    let keys = DURABLE_PARTS
        .iter()
        .map(|part| ks.durable(table, part))
        .collect::<Result<Vec<_>, _>>()?;
    // One hash tag, {durable:<table>}, in both layouts: always one slot.
    Request::script(&DURABLE, Access::Write, keys, args)
}

/// What [`Durability::begin`](crate::Durability::begin) (the plan [`journal_begin`]) found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Begun {
    /// The id is new within the window, and now marked as this instance's: process it.
    First,
    /// This instance began the id before, within the window: a `begin` called again after its
    /// reply was lost ([`Error::ReplyLost`]), or the same delivery coming back to this instance.
    /// It is still this instance's to process; whether it already did is the caller's to know.
    ByThisInstance,
    /// Another instance began the id within the window: a duplicate delivery; skip it.
    Duplicate,
}

impl Begun {
    /// Whether this instance processes the id: [`Begun::First`] or [`Begun::ByThisInstance`].
    pub fn is_mine(self) -> bool {
        matches!(self, Begun::First | Begun::ByThisInstance)
    }
}

/// Marks inbound message `id` as being processed by `instance`: [`Begun::First`] the first time
/// within `window`, [`Begun::Duplicate`] when another instance began it. Safe to call again
/// after a lost reply: the same instance gets [`Begun::ByThisInstance`], never `Duplicate`.
pub fn journal_begin(
    ks: &Keyspace,
    table: &str,
    id: &str,
    instance: &str,
    window: Duration,
) -> Result<Single<Begun>, Error> {
    let args = vec![
        "begin".into_arg(),
        id.into_arg(),
        ttl_ms(window, "window")?.into_arg(),
        instance.into_arg(),
    ];
    Ok(single(
        "journal_begin",
        durable_request(ks, table, args)?,
        |v| match v.as_i64()? {
            1 => Ok(Begun::First),
            2 => Ok(Begun::ByThisInstance),
            0 => Ok(Begun::Duplicate),
            other => Err(Error::UnexpectedReply {
                detail: format!("a journal begin answered {other}, not 0, 1 or 2"),
            }),
        },
    ))
}

/// Forgets inbound message `id` after `instance`'s processing of it failed, so a redelivery
/// is processed; yields `false` (and forgets nothing) when the id is not in the journal or
/// another instance began it.
pub fn journal_forget(
    ks: &Keyspace,
    table: &str,
    id: &str,
    instance: &str,
) -> Result<Single<bool>, Error> {
    let args = vec!["forget".into_arg(), id.into_arg(), instance.into_arg()];
    Ok(single(
        "journal_forget",
        durable_request(ks, table, args)?,
        held,
    ))
}

/// Queues an outbound send under an idempotency `key`: yields `false` when that key is already
/// queued, claimed, or was acked within `window`.
pub fn outbox_enqueue(
    ks: &Keyspace,
    table: &str,
    key: &str,
    payload: Bytes,
    window: Duration,
) -> Result<Single<bool>, Error> {
    let args = vec![
        "enqueue".into_arg(),
        key.into_arg(),
        ttl_ms(window, "window")?.into_arg(),
        payload,
    ];
    Ok(single(
        "outbox_enqueue",
        durable_request(ks, table, args)?,
        held,
    ))
}

/// One claimed outbound send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The idempotency key.
    pub key: String,
    /// The payload.
    pub payload: Bytes,
}

/// Claims up to `limit` sends for `instance` (at most [`MAX_PAGE`](crate::MAX_PAGE) per call,
/// as every listing); each stays claimed for `visibility`, then returns to the queue unless
/// acked (so work of an instance that stopped is recovered).
pub fn outbox_claim(
    ks: &Keyspace,
    table: &str,
    instance: &str,
    limit: Limit,
    visibility: Duration,
) -> Result<Single<Vec<Claimed>>, Error> {
    let args = vec![
        "claim".into_arg(),
        instance.into_arg(),
        ttl_ms(visibility, "visibility")?.into_arg(),
        limit.get().into_arg(),
    ];
    Ok(single(
        "outbox_claim",
        durable_request(ks, table, args)?,
        |v| {
            let items = v.into_array()?;
            if items.len() % 2 != 0 {
                return Err(Error::UnexpectedReply {
                    detail: "an outbox claim answered an odd number of items".into(),
                });
            }
            let mut claimed = Vec::with_capacity(items.len() / 2);
            let mut items = items.into_iter();
            while let (Some(key), Some(payload)) = (items.next(), items.next()) {
                claimed.push(Claimed {
                    key: key.into_string()?,
                    payload: payload.into_bytes()?,
                });
            }
            Ok(claimed)
        },
    ))
}

/// What [`Durability::ack`](crate::Durability::ack) (the plan [`outbox_ack`]) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Acked {
    /// The send was acked now.
    Now,
    /// This instance had already acked it: an `ack` called again after its reply was lost
    /// ([`Error::ReplyLost`]). The first ack went through; nothing changed. Known for as long
    /// as the key stays in the dedup window of the enqueue calls.
    Already,
}

/// Acks a sent item: [`Acked::Now`], or [`Acked::Already`] when `instance` acked it before (a
/// retry after a lost reply); [`Error::NotHolder`] when `instance` does not hold its claim (its
/// visibility timeout passed, the claim went back to the queue, and the send may be made again
/// by another instance, or another instance acked it).
pub fn outbox_ack(
    ks: &Keyspace,
    table: &str,
    key: &str,
    instance: &str,
) -> Result<Single<Acked>, Error> {
    let args = vec!["ack".into_arg(), key.into_arg(), instance.into_arg()];
    let what = format!("outbox claim {key:?}");
    Ok(single(
        "outbox_ack",
        durable_request(ks, table, args)?,
        move |v| match v.as_i64()? {
            1 => Ok(Acked::Now),
            2 => Ok(Acked::Already),
            0 => Err(Error::NotHolder { what }),
            other => Err(Error::UnexpectedReply {
                detail: format!("an outbox ack answered {other}, not 0, 1 or 2"),
            }),
        },
    ))
}

/// Puts every claim of a stopped `instance` back in the queue now; yields how many.
pub fn outbox_recover(ks: &Keyspace, table: &str, instance: &str) -> Result<Single<i64>, Error> {
    let args = vec!["recover".into_arg(), instance.into_arg()];
    Ok(single(
        "outbox_recover",
        durable_request(ks, table, args)?,
        |v| v.as_i64(),
    ))
}
