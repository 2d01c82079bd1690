//! Deleting a chat: its messages, in atomic chunks, then its record.
//!
//! The invariants (`docs/store.md` describes `delete_chat` for users):
//!
//! - messages go in chunks of at most [`MAX_PAGE`] (1000), each chunk one
//!   script call, so each chunk is atomic;
//! - an item is deleted only together with its log entry, so a crash at any point leaves no item
//!   without its entry and no entry without its item;
//! - a message saved after the delete began survives, item and entry;
//! - the chat record goes last;
//! - calling it again after a crash finishes the job.
//!
//! How: the first script moves the chat's log to its drain (`RENAME`, same slot), so every save
//! from then on lands in a fresh log. Each chunk script then removes up to 1000 ids from the
//! drain and deletes their items in the same call. The script also returns the ids of the next
//! chunk, because it cannot delete items it has not been given as keys: the plan builds the item
//! keys of those ids in Rust and passes them to the next call. When the drain is empty, one last
//! call deletes the chat record (and its bucket index entry in the cluster layout).
//!
//! A drain that already exists when a delete begins is the remains of an interrupted delete: it
//! is drained again, and the log (the messages saved since) is merged into it first, since they
//! were saved before this delete began. An id saved again after the delete began is in the fresh
//! log: its chunk removes it from the drain but keeps its item.
//!
//! ```text
//!  start ──► delete_chat_begin(log → drain) ──ids──► delete_chat_chunk(drain, log, items…) ─┐
//!                       │                                  ▲                             │
//!                       │                                  └──────────next ids───────────┘
//!                       └──no ids──► delete the record ◄──────────no more ids─────────────
//!                                         │
//!                                         ▼
//!                                   Done(DeletedChat)
//! ```

use bytes::Bytes;

use crate::error::Error;
use crate::keys::{Keyspace, RecordKind};
use crate::plan::{misuse, Plan, Reply, Step};
use crate::request::{Access, Arg, Request};
use crate::value::Value;

use super::{one, MAX_PAGE};
use crate::scripts::{DELETE_CHAT_BEGIN, DELETE_CHAT_CHUNK};

/// What [`Store::delete_chat`](crate::Store::delete_chat) (the plan [`delete_chat`]) did.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DeletedChat {
    /// Messages removed from the drain by this call (their items went with them, except those
    /// saved again after the delete began).
    pub messages: u64,
    /// Chunk calls made.
    pub chunks: u64,
    /// Whether the chat record existed.
    pub record: bool,
}

/// Deletes a chat's messages in chunks of 1000, then its record. See the module docs.
pub fn delete_chat(ks: &Keyspace, chat: &str) -> DeleteChat {
    DeleteChat {
        ks: ks.clone(),
        chat: chat.to_owned(),
        chunk: MAX_PAGE,
        state: State::Start,
        done: DeletedChat::default(),
    }
}

/// The plan of [`delete_chat`]; a state machine of one call per step.
#[derive(Debug)]
pub struct DeleteChat {
    ks: Keyspace,
    chat: String,
    chunk: usize,
    state: State,
    done: DeletedChat,
}

#[derive(Debug)]
enum State {
    Start,
    /// Waiting for `delete_chat_begin`.
    Beginning,
    /// Waiting for a chunk call made with these ids.
    Chunk {
        ids: Vec<Bytes>,
    },
    /// Waiting for the record deletion.
    Record,
    Finished,
}

impl DeleteChat {
    /// Uses chunks of `chunk` ids instead of 1000 (clamped to `1..=1000`): for tests that want
    /// several chunks of a few messages.
    pub fn with_chunk_size(mut self, chunk: usize) -> Self {
        self.chunk = chunk.clamp(1, MAX_PAGE);
        self
    }

    fn begin(&mut self) -> Result<Step<DeletedChat>, Error> {
        let request = Request::script_in(
            &self.ks,
            &DELETE_CHAT_BEGIN,
            Access::Write,
            vec![
                self.ks.message_log(&self.chat),
                self.ks.message_drain(&self.chat),
            ],
            vec![self.chunk.into_arg()],
        )?;
        self.state = State::Beginning;
        Ok(Step::Send(request.into()))
    }

    /// Deletes the chunk `ids`, or the record when there are none left. The ids are the log's
    /// bytes as they are: a log another program wrote (and a migration copied) may hold ids
    /// that are not UTF-8, whose items must go as well.
    fn next(&mut self, ids: Vec<Bytes>) -> Result<Step<DeletedChat>, Error> {
        if ids.is_empty() {
            let request = super::records::delete_request(&self.ks, RecordKind::Chat, &self.chat)?;
            self.state = State::Record;
            return Ok(Step::Send(request.into()));
        }
        let mut keys = vec![
            self.ks.message_drain(&self.chat),
            self.ks.message_log(&self.chat),
        ];
        keys.extend(
            ids.iter()
                .map(|id| self.ks.message_item_raw(&self.chat, id)),
        );
        let mut args = vec![self.chunk.into_arg()];
        args.extend(ids.iter().cloned());
        let request = Request::script_in(&self.ks, &DELETE_CHAT_CHUNK, Access::Write, keys, args)?;
        self.state = State::Chunk { ids };
        Ok(Step::Send(request.into()))
    }

    fn on_reply(&mut self, state: State, reply: Value) -> Result<Step<DeletedChat>, Error> {
        match state {
            State::Beginning => self.next(ids(reply)?),
            State::Chunk { ids: sent } => {
                let mut fields = reply.into_array()?.into_iter();
                let (Some(removed), Some(next)) = (fields.next(), fields.next()) else {
                    return Err(Error::UnexpectedReply {
                        detail: "delete_chat_chunk did not answer {removed, next}".into(),
                    });
                };
                let removed = removed.as_i64()?;
                let next = ids(next)?;
                if removed == 0 && next == sent {
                    // The ids we were told to delete are still there: the drain is not a
                    // sorted set we can empty. Stop rather than loop.
                    return Err(Error::UnexpectedReply {
                        detail: "delete_chat_chunk removed nothing and returned the same ids"
                            .into(),
                    });
                }
                self.done.messages += u64::try_from(removed).unwrap_or(0);
                self.done.chunks += 1;
                self.next(next)
            }
            State::Record => {
                self.done.record = reply.as_i64()? > 0;
                self.state = State::Finished;
                Ok(Step::Done(Ok(std::mem::take(&mut self.done))))
            }
            State::Start | State::Finished => Err(misuse("DeleteChat resumed out of order")),
        }
    }
}

fn ids(v: Value) -> Result<Vec<Bytes>, Error> {
    v.into_array()?.into_iter().map(Value::into_bytes).collect()
}

impl Plan for DeleteChat {
    type Output = DeletedChat;

    fn operation(&self) -> &'static str {
        "delete_chat"
    }

    fn start(&mut self) -> Step<DeletedChat> {
        match self.state {
            State::Start => self.begin().unwrap_or_else(|e| Step::Done(Err(e))),
            _ => Step::Done(Err(misuse("DeleteChat::start called twice"))),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<DeletedChat> {
        let state = std::mem::replace(&mut self.state, State::Finished);
        one(replies)
            .and_then(|reply| self.on_reply(state, reply))
            .unwrap_or_else(|e| Step::Done(Err(e)))
    }
}
