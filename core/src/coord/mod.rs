//! Plans of the coordination primitives: locks with fences, per-chat turns, leaderships with
//! terms, replica heartbeats, schedules with fencing tokens, leases, and the durability table.
//!
//! What they promise, and what they do not, is in `docs/coordination.md`. In short: while
//! Redis loses no acknowledged write, fences and terms are unique and strictly increasing, and
//! only the current holder can release, extend or renew. No primitive promises that only one
//! process *believes* it holds something: a paused process wakes up and acts, so callers
//! protect their writes with the fence. All expiry uses server time (`PX`, `TIME` in scripts).
//!
//! Every multi-key script call shares one hash tag in the cluster layout; the legacy layout has
//! no hash tags and runs on one node, where the same scripts go out as
//! [`Request::single_node_script`](crate::request::Request::single_node_script).

use crate::error::Error;
use crate::value::Value;

fn held(v: Value) -> Result<bool, Error> {
    Ok(v.as_i64()? == 1)
}

fn grant(v: Value) -> Result<Option<u64>, Error> {
    match v {
        Value::Nil => Ok(None),
        other => u64::try_from(other.as_i64()?)
            .map(Some)
            .map_err(|_| Error::UnexpectedReply {
                detail: "a negative fence".into(),
            }),
    }
}

fn require(ok: bool, what: String) -> Result<(), Error> {
    if ok {
        Ok(())
    } else {
        Err(Error::NotHolder { what })
    }
}

mod api;
mod durable;
mod fence;
pub(crate) mod guard;
mod heartbeat;
pub(crate) mod keeper;
mod lease;
mod schedule;
mod turn;

pub use api::{Coordinator, Durability, Leases, Schedules};
pub use durable::*;
pub use fence::*;
pub use guard::{Leadership, Lease, Lock, Released, Turn};
pub use heartbeat::*;
pub use keeper::Keeper;
pub use lease::*;
pub use schedule::*;
pub use turn::*;
