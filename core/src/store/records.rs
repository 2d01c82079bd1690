//! Records: chats, contacts and checkpoints, each an opaque value under an id.
//!
//! In the cluster layout a record lives in the slot of its bucket (`bucket(id)`, 32 per kind),
//! next to that bucket's index, a sorted set of the raw ids. A write changes the record and its
//! index member in one script. Chats and contacts score every member 0, so an index lists in
//! byte order (`BYLEX`). Checkpoints expire: their index is scored by the value's expiry in ms
//! of server time (`+inf` for none), and a listing first drops the members whose expiry has
//! passed, so an expired checkpoint leaves listings when its key expires.
//!
//! A listing is exact, in byte order of the ids, paged by an "after this id" cursor:
//!
//! 1. one batch of 32 requests, one per bucket index (the session sends them to their masters
//!    in parallel): `ZRANGE idx (after + BYLEX LIMIT 0 limit+1` for chats and contacts,
//!    `list_expiring_index` (prune, then every live member) for checkpoints;
//! 2. the ids are merged and sorted in Rust; the first `limit` make the page (one more tells
//!    whether another page follows);
//! 3. one batch of `MGET`s, one per bucket that holds ids of the page (a bucket is one slot), to
//!    read the records. A record deleted (or expired) in between is left out.
//!
//! Records are not read by the first batch because a script may only touch the keys it is
//! given, and the record keys are only known once the ids are.
//!
//! The legacy layout has no index: a listing `SCAN`s the records' pattern and reads them with one
//! `GET` each. That is exact on a single node, the only place the legacy layout runs, but costs
//! a scan of the whole keyspace per page.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{ConfigError, Error};
use crate::keys::{bucket, BUCKET_COUNT};
use crate::keys::{Keyspace, Layout, RecordKind};
use crate::plan::{misuse, single, Plan, Reply, Single, Step};
use crate::request::{Access, Arg, Request};
use crate::scan::{scan, Scan};
use crate::value::Value;

use super::{forward, ttl_arg, values};
use crate::page::Limit;
use crate::scripts::{DELETE_INDEXED, LIST_EXPIRING_INDEX, SET_EXPIRING_INDEXED, SET_INDEXED};

/// A record: its id and value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The id.
    pub id: String,
    /// The value, as stored.
    pub value: Bytes,
}

/// Where a listing of chats, contacts or checkpoints goes on: strictly after this id, in byte
/// order. A page's `next`; or made from an id with [`RecordCursor::after`] to start a listing
/// past it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordCursor(String);

impl RecordCursor {
    /// The cursor of the ids after `id`.
    pub fn after(id: impl Into<String>) -> Self {
        RecordCursor(id.into())
    }

    /// The id the listing goes on after: the last one of the previous page.
    pub fn id(&self) -> &str {
        &self.0
    }
}

/// One page of a listing of records, in byte order of the ids; `next` is where the next page
/// starts, `None` when this page is the last.
pub type RecordPage = crate::page::Page<Record, RecordCursor>;

fn plain_kind(kind: RecordKind) -> Result<(), Error> {
    match kind {
        RecordKind::Chat | RecordKind::Contact => Ok(()),
        RecordKind::Checkpoint => Err(ConfigError::WrongOperation {
            records: "checkpoints, which expire,",
            instead: "set_checkpoint",
        }
        .into()),
        RecordKind::Schedule => Err(schedules()),
    }
}

fn schedules() -> Error {
    ConfigError::WrongOperation {
        records: "schedules, which carry fencing tokens,",
        instead: "the schedule store",
    }
    .into()
}

/// Stores (creates or replaces) a chat or contact record.
pub fn upsert_record(
    ks: &Keyspace,
    kind: RecordKind,
    id: &str,
    value: Bytes,
) -> Result<Single<()>, Error> {
    plain_kind(kind)?;
    let record = ks.record(kind, id);
    let request = match ks.record_index_of(kind, id) {
        Some(index) => Request::script_in(
            ks,
            &SET_INDEXED,
            Access::Write,
            vec![record, index],
            vec![id.into_arg(), value],
        )?,
        None => Request::cmd(Access::Write, "SET")
            .key(record)
            .arg(value)
            .build()?,
    };
    Ok(single("upsert_record", request, |_| Ok(())))
}

/// Stores a checkpoint, expiring after `ttl` (`None`: never).
pub fn set_checkpoint(
    ks: &Keyspace,
    id: &str,
    value: Bytes,
    ttl: Option<Duration>,
) -> Result<Single<()>, Error> {
    let kind = RecordKind::Checkpoint;
    let record = ks.record(kind, id);
    let request = match ks.record_index_of(kind, id) {
        Some(index) => Request::script_in(
            ks,
            &SET_EXPIRING_INDEXED,
            Access::Write,
            vec![record, index],
            vec![id.into_arg(), value, ttl_arg(ttl)?],
        )?,
        None => super::set_with_ttl(&record, value, ttl)?,
    };
    Ok(single("set_checkpoint", request, |_| Ok(())))
}

/// Reads a record of any kind but schedules.
pub fn get_record(
    ks: &Keyspace,
    kind: RecordKind,
    id: &str,
) -> Result<Single<Option<Bytes>>, Error> {
    if kind == RecordKind::Schedule {
        return Err(schedules());
    }
    let request = Request::cmd(Access::Read, "GET")
        .key(ks.record(kind, id))
        .build()?;
    Ok(single("get_record", request, Value::into_opt_bytes))
}

/// Deletes a record of any kind but schedules, with its index member. Yields `true` when it
/// existed.
pub fn delete_record(ks: &Keyspace, kind: RecordKind, id: &str) -> Result<Single<bool>, Error> {
    if kind == RecordKind::Schedule {
        return Err(schedules());
    }
    Ok(single(
        "delete_record",
        delete_request(ks, kind, id)?,
        super::positive,
    ))
}

/// The request that deletes a record and its index member; answers 1 when it existed.
pub(crate) fn delete_request(ks: &Keyspace, kind: RecordKind, id: &str) -> Result<Request, Error> {
    let record = ks.record(kind, id);
    match ks.record_index_of(kind, id) {
        Some(index) => Request::script_in(
            ks,
            &DELETE_INDEXED,
            Access::Write,
            vec![record, index],
            vec![id.into_arg()],
        ),
        None => Request::cmd(Access::Write, "DEL").key(record).build(),
    }
}

/// Lists a page of chats, contacts or checkpoints: the first `limit` ids after `after`, in
/// byte order, with their records. See the module docs.
pub fn list_records(
    ks: &Keyspace,
    kind: RecordKind,
    after: Option<&RecordCursor>,
    limit: Limit,
) -> Result<ListRecords, Error> {
    if kind == RecordKind::Schedule {
        return Err(schedules());
    }
    Ok(ListRecords {
        ks: ks.clone(),
        kind,
        after: after.map(|c| c.0.clone()),
        limit: limit.items(),
        state: State::Start,
    })
}

/// The plan of [`list_records`].
///
/// ```text
///           cluster: 32 index reads ──┐
/// start ──┤                           ├──► merge, sort, page ──► MGET per bucket ──► Done(page)
///           legacy:  SCAN loop ───────┘          └──no ids──► Done(empty page)
/// ```
#[derive(Debug)]
pub struct ListRecords {
    ks: Keyspace,
    kind: RecordKind,
    after: Option<String>,
    limit: usize,
    state: State,
}

#[derive(Debug)]
enum State {
    Start,
    /// Waiting for the 32 bucket indexes (cluster layout).
    Indexes,
    /// Scanning the records' pattern (legacy layout).
    Scanning(Scan),
    /// Waiting for the records, one reply per group of ids.
    Fetching {
        groups: Vec<Vec<String>>,
        next: Option<String>,
    },
    Finished,
}

impl ListRecords {
    fn begin(&mut self) -> Result<Step<RecordPage>, Error> {
        if self.ks.layout() == Layout::Legacy {
            let pattern = self.ks.record_pattern(self.kind).unwrap_or_default();
            let mut scan = scan(pattern, usize::MAX);
            let step = scan.start();
            self.state = State::Scanning(scan);
            return self.scanned(step);
        }
        let expiring = self.kind == RecordKind::Checkpoint;
        let min = match &self.after {
            Some(after) => format!("({after}"),
            None => "-".to_owned(),
        };
        let batch = (0..BUCKET_COUNT)
            .filter_map(|b| self.ks.record_index(self.kind, b))
            .map(|index| {
                if expiring {
                    Request::script_in(
                        &self.ks,
                        &LIST_EXPIRING_INDEX,
                        Access::Write,
                        vec![index],
                        Vec::new(),
                    )
                } else {
                    Request::cmd(Access::Read, "ZRANGE")
                        .key(&index)
                        .arg(min.as_str())
                        .arg("+")
                        .arg("BYLEX")
                        .arg("LIMIT")
                        .arg(0u32)
                        .arg(self.limit + 1)
                        .build()
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.state = State::Indexes;
        Ok(Step::Send(batch.into()))
    }

    /// Carries on a step of the legacy scan; when it ends, pages its keys.
    fn scanned(&mut self, step: Step<Vec<Bytes>>) -> Result<Step<RecordPage>, Error> {
        match forward(step) {
            Ok(keys) => {
                let head = self.ks.record(self.kind, "");
                let ids = keys
                    .iter()
                    .filter_map(|key| key.strip_prefix(head.as_bytes()))
                    .filter_map(|id| std::str::from_utf8(id).ok())
                    .map(str::to_owned);
                self.page(ids)
            }
            Err(step) => Ok(step),
        }
    }

    /// Keeps the first `limit` ids after the cursor and asks for their records.
    fn page(&mut self, ids: impl Iterator<Item = String>) -> Result<Step<RecordPage>, Error> {
        let after = self.after.as_deref();
        let mut sorted: Vec<String> = ids
            .filter(|id| after.is_none_or(|a| id.as_str() > a))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .take(self.limit + 1)
            .collect();
        let more = sorted.len() > self.limit;
        sorted.truncate(self.limit);
        let next = if more { sorted.last().cloned() } else { None };
        if sorted.is_empty() {
            self.state = State::Finished;
            return Ok(Step::Done(Ok(RecordPage {
                items: Vec::new(),
                next: next.map(RecordCursor),
            })));
        }
        // One MGET per slot: a bucket in the cluster layout, a key in the legacy layout.
        let groups: Vec<Vec<String>> = match self.ks.layout() {
            Layout::Cluster => {
                let mut by_bucket: BTreeMap<u8, Vec<String>> = BTreeMap::new();
                for id in sorted {
                    by_bucket.entry(bucket(&id)).or_default().push(id);
                }
                by_bucket.into_values().collect()
            }
            Layout::Legacy => sorted.into_iter().map(|id| vec![id]).collect(),
        };
        let batch = groups
            .iter()
            .map(|ids| {
                ids.iter()
                    .fold(Request::cmd(Access::Read, "MGET"), |b, id| {
                        b.key(self.ks.record(self.kind, id))
                    })
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.state = State::Fetching { groups, next };
        Ok(Step::Send(batch.into()))
    }

    fn on_replies(&mut self, state: State, replies: Vec<Reply>) -> Result<Step<RecordPage>, Error> {
        match state {
            State::Indexes => {
                // Chats and contacts come after the cursor already (BYLEX); an expiry index
                // lists every live member, and `page` drops those up to the cursor.
                let mut ids = Vec::new();
                for reply in values(replies, usize::from(BUCKET_COUNT))? {
                    for member in reply.into_array()? {
                        ids.push(member.into_string()?);
                    }
                }
                self.page(ids.into_iter())
            }
            State::Scanning(mut scan) => {
                let step = scan.resume(replies);
                self.state = State::Scanning(scan);
                self.scanned(step)
            }
            State::Fetching { groups, next } => {
                let mut records = Vec::new();
                let replies = values(replies, groups.len())?;
                for (ids, reply) in groups.into_iter().zip(replies) {
                    for (id, value) in ids.into_iter().zip(reply.into_array()?) {
                        if let Some(value) = value.into_opt_bytes()? {
                            records.push(Record { id, value });
                        }
                    }
                }
                records.sort_by(|a, b| a.id.cmp(&b.id));
                Ok(Step::Done(Ok(RecordPage {
                    items: records,
                    next: next.map(RecordCursor),
                })))
            }
            State::Start | State::Finished => Err(misuse("ListRecords resumed out of order")),
        }
    }
}

impl Plan for ListRecords {
    type Output = RecordPage;

    fn operation(&self) -> &'static str {
        "list_records"
    }

    fn start(&mut self) -> Step<RecordPage> {
        match self.state {
            State::Start => self.begin().unwrap_or_else(|e| Step::Done(Err(e))),
            _ => Step::Done(Err(misuse("ListRecords::start called twice"))),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<RecordPage> {
        let state = std::mem::replace(&mut self.state, State::Finished);
        self.on_replies(state, replies)
            .unwrap_or_else(|e| Step::Done(Err(e)))
    }
}
