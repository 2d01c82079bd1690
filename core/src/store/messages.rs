//! Messages: each chat has a log (a sorted set: member = message id, score = time in ms) and one
//! item per message (its payload). An item and its log entry are written and deleted together,
//! by one script, and read together, so a reader never sees one without the other.
//!
//! Listing walks the log in `(time, id)` order, a page at a time. A page takes two calls: one
//! script finds the ids of the page in the log (`message_page`), the next reads those messages
//! (`message_items`), keeping only the ids still in the log, with their current time. The items
//! cannot be read by the first script: their key names depend on the ids it finds, and scripts
//! never build key names.

use std::ops::{Bound, RangeBounds};

use bytes::Bytes;

use crate::error::{ConfigError, Error};
use crate::keys::Keyspace;
use crate::plan::{misuse, single, Plan, Reply, Single, Step};
use crate::request::{Access, Arg, Request};
use crate::value::Value;

use super::one;
use crate::page::Limit;
use crate::scripts::{DELETE_MESSAGE, MESSAGE_ITEMS, MESSAGE_PAGE, SAVE_MESSAGE};

/// A stored message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The message id, unique within its chat.
    pub id: String,
    /// The message time in ms (the caller's clock, as saved); the log's order.
    pub time_ms: i64,
    /// The payload, as saved.
    pub payload: Bytes,
}

/// Where a listing of messages goes on: strictly after this message in `(time, id)` order.
///
/// The cursor names a position, not a message: it stays valid when that message is deleted or
/// saved again with another time, and messages saved later before the position are not
/// revisited.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageCursor {
    /// The time of the last message of the previous page, in ms.
    pub time_ms: i64,
    /// The id of the last message of the previous page.
    pub id: String,
}

/// One page of a chat's messages, in `(time, id)` order; `next` is the cursor of the next page
/// (the next call's `after`), `None` when the range holds nothing after this page.
pub type MessagePage = crate::page::Page<Message, MessageCursor>;

/// The largest message time kept exactly (2^53 ms): a score is a double.
const MOST_EXACT_TIME_MS: i64 = 1 << 53;

/// Saves a message: item and log entry in one script call, in the chat's slot. Saving an
/// existing id replaces its payload and time. Yields `true` when the message is new. A time
/// outside ±2^53 ms is refused ([`ConfigError::MessageTimeOutOfRange`]).
pub fn save_message(
    ks: &Keyspace,
    chat: &str,
    id: &str,
    time_ms: i64,
    payload: Bytes,
) -> Result<Single<bool>, Error> {
    if !(-MOST_EXACT_TIME_MS..=MOST_EXACT_TIME_MS).contains(&time_ms) {
        return Err(ConfigError::MessageTimeOutOfRange { time_ms }.into());
    }
    let request = Request::script_in(
        ks,
        &SAVE_MESSAGE,
        Access::Write,
        vec![ks.message_log(chat), ks.message_item(chat, id)],
        vec![id.into_arg(), time_ms.into_arg(), payload],
    )?;
    Ok(single("save_message", request, |v| Ok(v.as_i64()? == 1)))
}

/// Reads one message, or `None` when it is not in the chat's log (never saved, deleted, or being
/// deleted by [`delete_chat`](super::delete_chat::delete_chat())).
pub fn get_message(ks: &Keyspace, chat: &str, id: &str) -> Result<Single<Option<Message>>, Error> {
    let request = Request::script_in(
        ks,
        &MESSAGE_ITEMS,
        Access::Read,
        vec![ks.message_log(chat), ks.message_item(chat, id)],
        vec![id.into_arg()],
    )?;
    Ok(single("get_message", request, |v| {
        Ok(parse_items(v)?.into_iter().next())
    }))
}

/// Deletes one message, its item and its log entry together. Yields `true` when it was in the
/// log.
pub fn delete_message(ks: &Keyspace, chat: &str, id: &str) -> Result<Single<bool>, Error> {
    let request = Request::script_in(
        ks,
        &DELETE_MESSAGE,
        Access::Write,
        vec![
            ks.message_log(chat),
            ks.message_drain(chat),
            ks.message_item(chat, id),
        ],
        vec![id.into_arg()],
    )?;
    Ok(single("delete_message", request, super::positive))
}

/// Lists one page of a chat's messages: those whose time in ms is in `range` (any Rust range:
/// `..`, `from..`, `..=to`, `from..to`), strictly after `after` in `(time, id)` order, at most
/// `limit`. An empty range (`5..5`, `..i64::MIN`) lists nothing and sends nothing.
pub fn list_messages(
    ks: &Keyspace,
    chat: &str,
    range: impl RangeBounds<i64>,
    after: Option<&MessageCursor>,
    limit: Limit,
) -> ListMessages {
    ListMessages {
        ks: ks.clone(),
        chat: chat.to_owned(),
        range: inclusive(&range),
        after: after.cloned(),
        limit,
        state: ListState::Start,
    }
}

/// A range of times as the inclusive ends the script takes (`None`: unbounded), or `None` when
/// it holds no time at all.
#[allow(clippy::type_complexity)]
fn inclusive(range: &impl RangeBounds<i64>) -> Option<(Option<i64>, Option<i64>)> {
    let from = match range.start_bound() {
        Bound::Included(&t) => Some(t),
        Bound::Excluded(&t) => Some(t.checked_add(1)?),
        Bound::Unbounded => None,
    };
    let to = match range.end_bound() {
        Bound::Included(&t) => Some(t),
        Bound::Excluded(&t) => Some(t.checked_sub(1)?),
        Bound::Unbounded => None,
    };
    match (from, to) {
        (Some(from), Some(to)) if from > to => None,
        ends => Some(ends),
    }
}

/// The plan of [`list_messages`]: the page's ids from the log, then the messages.
///
/// ```text
/// start ──► message_page(log) ──ids──► message_items(log, items…) ──► Done(page)
///                    └──no ids──► Done(empty page)
/// ```
#[derive(Debug)]
pub struct ListMessages {
    ks: Keyspace,
    chat: String,
    /// The inclusive ends, `None` for an empty range.
    range: Option<(Option<i64>, Option<i64>)>,
    after: Option<MessageCursor>,
    limit: Limit,
    state: ListState,
}

#[derive(Debug)]
enum ListState {
    Start,
    /// Waiting for the ids of the page.
    Page,
    /// Waiting for the messages; `next` is the cursor after the page, if more follow.
    Items {
        next: Option<MessageCursor>,
    },
    Finished,
}

impl ListMessages {
    fn page_step(&mut self) -> Result<Step<MessagePage>, Error> {
        let Some((from_ms, to_ms)) = self.range else {
            self.state = ListState::Finished;
            return Ok(Step::Done(Ok(MessagePage {
                items: Vec::new(),
                next: None,
            })));
        };
        let bound = |b: Option<i64>, inf: &str| match b {
            Some(t) => t.into_arg(),
            None => inf.into_arg(),
        };
        let (cursor_time, cursor_id) = match &self.after {
            Some(c) => (c.time_ms.into_arg(), c.id.as_str().into_arg()),
            None => (Bytes::new(), Bytes::new()),
        };
        let request = Request::script_in(
            &self.ks,
            &MESSAGE_PAGE,
            Access::Read,
            vec![self.ks.message_log(&self.chat)],
            vec![
                bound(from_ms, "-inf"),
                bound(to_ms, "+inf"),
                cursor_time,
                cursor_id,
                self.limit.get().into_arg(),
            ],
        )?;
        self.state = ListState::Page;
        Ok(Step::Send(request.into()))
    }

    fn items_step(&mut self, page: Value) -> Result<Step<MessagePage>, Error> {
        let mut fields = page.into_array()?.into_iter();
        let more = fields
            .next()
            .ok_or_else(|| unexpected("an empty message_page reply"))?
            .as_i64()?
            == 1;
        let mut ids = Vec::new();
        let mut last = None;
        while let Some(id) = fields.next() {
            let id = id.into_string()?;
            let time_ms = fields
                .next()
                .ok_or_else(|| unexpected("an id without its time"))?
                .as_i64()?;
            ids.push(id.clone());
            last = Some(MessageCursor { time_ms, id });
        }
        let Some(last) = last else {
            self.state = ListState::Finished;
            return Ok(Step::Done(Ok(MessagePage {
                items: Vec::new(),
                next: None,
            })));
        };
        let mut keys = vec![self.ks.message_log(&self.chat)];
        keys.extend(ids.iter().map(|id| self.ks.message_item(&self.chat, id)));
        let request = Request::script_in(
            &self.ks,
            &MESSAGE_ITEMS,
            Access::Read,
            keys,
            ids.into_iter().map(Bytes::from).collect(),
        )?;
        self.state = ListState::Items {
            next: more.then_some(last),
        };
        Ok(Step::Send(request.into()))
    }
}

impl Plan for ListMessages {
    type Output = MessagePage;

    fn operation(&self) -> &'static str {
        "list_messages"
    }

    fn start(&mut self) -> Step<MessagePage> {
        match self.state {
            ListState::Start => self.page_step().unwrap_or_else(|e| Step::Done(Err(e))),
            _ => Step::Done(Err(misuse("ListMessages::start called twice"))),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<MessagePage> {
        let state = std::mem::replace(&mut self.state, ListState::Finished);
        let step = match state {
            ListState::Page => one(replies).and_then(|page| self.items_step(page)),
            ListState::Items { next } => one(replies).and_then(|items| {
                Ok(Step::Done(Ok(MessagePage {
                    items: parse_items(items)?,
                    next,
                })))
            }),
            ListState::Start | ListState::Finished => {
                Err(misuse("ListMessages resumed out of order"))
            }
        };
        step.unwrap_or_else(|e| Step::Done(Err(e)))
    }
}

fn unexpected(detail: &str) -> Error {
    Error::UnexpectedReply {
        detail: detail.to_owned(),
    }
}

/// Decodes the `{id, time, payload}` triples of `message_items`.
fn parse_items(v: Value) -> Result<Vec<Message>, Error> {
    v.into_array()?
        .into_iter()
        .map(|triple| {
            let mut fields = triple.into_array()?.into_iter();
            match (fields.next(), fields.next(), fields.next()) {
                (Some(id), Some(time), Some(payload)) => Ok(Message {
                    id: id.into_string()?,
                    time_ms: time.as_i64()?,
                    payload: payload.into_bytes()?,
                }),
                _ => Err(unexpected(
                    "a message_items entry is not {id, time, payload}",
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_become_inclusive_ends() {
        assert_eq!(inclusive(&..), Some((None, None)));
        assert_eq!(inclusive(&(5..)), Some((Some(5), None)));
        assert_eq!(inclusive(&(..=9)), Some((None, Some(9))));
        assert_eq!(inclusive(&(5..9)), Some((Some(5), Some(8))));
        assert_eq!(inclusive(&(5..=5)), Some((Some(5), Some(5))));
        let after_five = (Bound::Excluded(5), Bound::Unbounded);
        assert_eq!(inclusive(&after_five), Some((Some(6), None)));
        // Empty ranges, and ends that would overflow, hold no time.
        assert_eq!(inclusive(&(5..5)), None);
        assert_eq!(inclusive(&(..i64::MIN)), None);
        assert_eq!(
            inclusive(&(Bound::Excluded(i64::MAX), Bound::Unbounded)),
            None
        );
        assert_eq!(
            inclusive(&(i64::MIN..=i64::MAX)),
            Some((Some(i64::MIN), Some(i64::MAX)))
        );
    }
}
