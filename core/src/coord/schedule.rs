//! Schedules guarded by fencing tokens, with deleted markers and bucket listings.

use bytes::Bytes;

use crate::error::Error;
use crate::keys::{Keyspace, RecordKind};
use crate::page::Limit;
use crate::plan::{misuse, single, Plan, Reply, Single, Step};
use crate::request::{Access, Arg, Request};
use crate::scripts::SCHEDULE;
use crate::value::Value;

/// A stored schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Its fencing token.
    pub token: u64,
    /// Its data, as written.
    pub data: Bytes,
    /// Who wrote it: the `holder` given to [`schedule_put`] with this token (the lease holder
    /// or leader the token was granted to). `None` for a record written before holders were
    /// stored; the next write by a holder with the same or a newer token stores one.
    pub holder: Option<String>,
}

fn schedule_request(
    ks: &Keyspace,
    op: &str,
    id: &str,
    token: u64,
    holder: &str,
    data: Bytes,
) -> Result<Request, Error> {
    let mut keys = vec![ks.record(RecordKind::Schedule, id)];
    keys.extend(ks.record_index_of(RecordKind::Schedule, id));
    Request::script_in(
        ks,
        &SCHEDULE,
        Access::Write,
        keys,
        vec![
            op.into_arg(),
            id.into_arg(),
            token.into_arg(),
            holder.into_arg(),
            data,
        ],
    )
}

fn schedule_written(id: String, token: u64) -> impl FnOnce(Value) -> Result<(), Error> {
    move |v| {
        let mut items = v.into_array()?.into_iter();
        let status = items.next().map(Value::into_string).transpose()?;
        let stored = items.next().map(|v| v.as_u64()).transpose()?;
        match (status.as_deref(), stored) {
            (Some("ok"), _) => Ok(()),
            (Some("stale"), Some(stored)) => Err(Error::Stale {
                what: format!("schedule {id:?}"),
                token,
                stored,
            }),
            (Some("taken"), Some(_)) => Err(Error::NotHolder {
                what: format!("schedule {id:?} fencing token {token}"),
            }),
            _ => Err(Error::UnexpectedReply {
                detail: "a schedule write answered neither ok, stale nor taken".into(),
            }),
        }
    }
}

/// Writes a schedule with fencing token `token` held by `holder` (the grant's owner: the
/// lease holder or leader that received the token). [`Error::Stale`] when the stored token is
/// higher (a stale writer cannot overwrite a newer schedule or resurrect a deleted one);
/// [`Error::NotHolder`] when the same token is stored by another holder (one grant has one
/// owner, so an equal token from someone else is refused, as for every fenced write). The
/// same holder with the same token may write again. Tokens are compared exactly over the whole
/// `u64` range (the type of every fence, term and lease token).
pub fn schedule_put(
    ks: &Keyspace,
    id: &str,
    token: u64,
    holder: &str,
    data: Bytes,
) -> Result<Single<()>, Error> {
    let request = schedule_request(ks, "put", id, token, holder, data)?;
    Ok(single(
        "schedule_put",
        request,
        schedule_written(id.to_owned(), token),
    ))
}

/// Deletes a schedule, leaving a marker that keeps the token and its holder; [`Error::Stale`]
/// and [`Error::NotHolder`] as for [`schedule_put`].
pub fn schedule_delete(
    ks: &Keyspace,
    id: &str,
    token: u64,
    holder: &str,
) -> Result<Single<()>, Error> {
    let request = schedule_request(ks, "delete", id, token, holder, Bytes::new())?;
    Ok(single(
        "schedule_delete",
        request,
        schedule_written(id.to_owned(), token),
    ))
}

/// Reads a schedule, with its token, data and holder; a deleted marker reads as `None`.
pub fn schedule_get(ks: &Keyspace, id: &str) -> Result<Single<Option<Schedule>>, Error> {
    Ok(single(
        "schedule_get",
        schedule_get_request(ks, id)?,
        decode_schedule,
    ))
}

fn schedule_get_request(ks: &Keyspace, id: &str) -> Result<Request, Error> {
    Request::cmd(Access::Read, "HMGET")
        .key(ks.record(RecordKind::Schedule, id))
        .arg("token")
        .arg("data")
        .arg("deleted")
        .arg("holder")
        .build()
}

fn decode_schedule(v: Value) -> Result<Option<Schedule>, Error> {
    let mut items = v.into_array()?.into_iter();
    let (Some(token), Some(data), Some(deleted), Some(holder)) =
        (items.next(), items.next(), items.next(), items.next())
    else {
        return Err(Error::UnexpectedReply {
            detail: "HMGET of a schedule answered fewer than 4 fields".into(),
        });
    };
    if token == Value::Nil || deleted.into_opt_bytes()?.as_deref() == Some(b"1") {
        return Ok(None);
    }
    Ok(Some(Schedule {
        token: token.as_u64()?,
        data: data.into_opt_bytes()?.unwrap_or_default(),
        holder: holder
            .into_opt_bytes()?
            .map(|h| String::from_utf8_lossy(&h).into_owned()),
    }))
}

/// Where a listing of schedules goes on: strictly after this id. A page's `next`; or made from
/// an id with [`ScheduleCursor::after`] to start a listing past it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScheduleCursor(String);

impl ScheduleCursor {
    /// The cursor of the ids after `id`.
    pub fn after(id: impl Into<String>) -> Self {
        ScheduleCursor(id.into())
    }

    /// The id the listing goes on after: the last one of the previous page.
    pub fn id(&self) -> &str {
        &self.0
    }
}

/// A page of live schedules with their ids, sorted by id; `next` is where the next page
/// starts, `None` after the last page.
pub type SchedulePage = crate::page::Page<(String, Schedule), ScheduleCursor>;

/// Lists the live schedules (deleted markers hidden) with ids after `after`, sorted by id: a
/// page of at most `limit` and the cursor of the next one. Cluster
/// layout: the 32 bucket indexes, read in one batch, then the records; exact even while slots
/// move. Legacy layout: `SCAN` for the records, the whole pattern, then the page is picked.
pub fn schedule_list(
    ks: &Keyspace,
    after: Option<&ScheduleCursor>,
    limit: Limit,
) -> Result<ListSchedules, Error> {
    let limit = limit.items();
    // Each bucket's first `limit + 1` ids after the cursor (its index scores every id 0, so
    // it lists in byte order): the page's ids are among them, and one more says whether
    // another page follows. Each page read every id of every bucket before, so listing every
    // schedule cost its count squared over the page size.
    let min = match after {
        Some(after) => format!("({}", after.0),
        None => "-".to_owned(),
    };
    let indexes = ks
        .record_indexes(RecordKind::Schedule)
        .iter()
        .map(|index| {
            Request::cmd(Access::Read, "ZRANGE")
                .key(index)
                .arg(min.as_str())
                .arg("+")
                .arg("BYLEX")
                .arg("LIMIT")
                .arg(0u32)
                .arg(limit + 1)
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let scan = match ks.record_pattern(RecordKind::Schedule) {
        // The whole scan, not `limit` keys: SCAN returns keys in no order, and markers count
        // among them; the first `limit` live ids are picked after sorting.
        Some(pattern) if indexes.is_empty() => Some(crate::scan::scan(pattern, usize::MAX)),
        _ => None,
    };
    Ok(ListSchedules {
        ks: ks.clone(),
        after: after.map(|c| c.0.clone()),
        limit,
        indexes,
        scan,
        ids: Vec::new(),
        next: 0,
        found: Vec::new(),
        beyond: false,
    })
}

/// The plan of [`schedule_list`].
#[derive(Debug)]
pub struct ListSchedules {
    ks: Keyspace,
    after: Option<String>,
    limit: usize,
    /// The bucket index reads (cluster layout); sent by `start`.
    indexes: Vec<Request>,
    /// The record scan (legacy layout), until it is done.
    scan: Option<crate::scan::Scan>,
    /// The ids to read, sorted; `next` is the first not yet read.
    ids: Vec<String>,
    next: usize,
    found: Vec<(String, Schedule)>,
    /// The indexes hold ids past those read (cluster layout): the next page starts after the
    /// last id read, found or not.
    beyond: bool,
}

/// Records read per step of a listing.
const SCHEDULE_READ_CHUNK: usize = 1000;

impl ListSchedules {
    fn got_ids(&mut self, mut ids: Vec<String>) -> Step<SchedulePage> {
        if let Some(after) = &self.after {
            ids.retain(|id| id > after);
        }
        ids.sort();
        ids.dedup();
        self.ids = ids;
        self.read_next()
    }

    /// The indexes' ids (cluster layout), each bucket's first `limit + 1` after the cursor:
    /// the first `limit` of them merged are the page's candidates, and any past them means
    /// another page.
    fn got_indexed_ids(&mut self, ids: Vec<String>) -> Step<SchedulePage> {
        let mut ids = ids;
        ids.sort();
        ids.dedup();
        self.beyond = ids.len() > self.limit;
        ids.truncate(self.limit);
        self.got_ids(ids)
    }

    fn read_next(&mut self) -> Step<SchedulePage> {
        if self.next >= self.ids.len() || self.found.len() >= self.limit {
            let mut schedules = std::mem::take(&mut self.found);
            if self.beyond {
                // A candidate found deleted since is skipped, not read again.
                let next = self.ids.last().map(|id| ScheduleCursor(id.clone()));
                return Step::Done(Ok(SchedulePage {
                    items: schedules,
                    next,
                }));
            }
            // Ids left unread, or read past the page, mean another page may follow.
            let more = schedules.len() > self.limit || self.next < self.ids.len();
            schedules.truncate(self.limit);
            let next = more
                .then(|| schedules.last().map(|(id, _)| ScheduleCursor(id.clone())))
                .flatten();
            return Step::Done(Ok(SchedulePage {
                items: schedules,
                next,
            }));
        }
        let end = (self.next + SCHEDULE_READ_CHUNK).min(self.ids.len());
        let batch = self.ids[self.next..end]
            .iter()
            .map(|id| schedule_get_request(&self.ks, id))
            .collect::<Result<Vec<_>, _>>();
        match batch {
            Ok(batch) => Step::Send(batch.into()),
            Err(e) => Step::Done(Err(e)),
        }
    }

    fn got_records(&mut self, replies: Vec<Reply>) -> Step<SchedulePage> {
        let end = (self.next + SCHEDULE_READ_CHUNK).min(self.ids.len());
        if replies.len() != end - self.next {
            return Step::Done(Err(misuse("a schedule batch answered with another count")));
        }
        for (id, reply) in self.ids[self.next..end].iter().zip(replies) {
            // A record deleted (or turned into a marker) since the ids were read is left out.
            match reply.and_then(decode_schedule) {
                Ok(Some(schedule)) => self.found.push((id.clone(), schedule)),
                Ok(None) => {}
                Err(e) => return Step::Done(Err(e)),
            }
        }
        self.next = end;
        self.read_next()
    }
}

impl ListSchedules {
    /// Passes on a step of the legacy scan; once it is done, reads the schedules it found.
    fn after_scan(&mut self, step: Step<Vec<Bytes>>) -> Step<SchedulePage> {
        match crate::plan::forward(step) {
            Ok(keys) => {
                self.scan = None;
                let ids = self.ids_of(keys);
                self.got_ids(ids)
            }
            Err(step) => step,
        }
    }
}

impl Plan for ListSchedules {
    type Output = SchedulePage;

    fn operation(&self) -> &'static str {
        "list_schedules"
    }

    fn start(&mut self) -> Step<Self::Output> {
        if let Some(scan) = self.scan.as_mut() {
            let step = scan.start();
            return self.after_scan(step);
        }
        Step::Send(self.indexes.clone().into())
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Self::Output> {
        if let Some(scan) = self.scan.as_mut() {
            let step = scan.resume(replies);
            return self.after_scan(step);
        }
        if !self.indexes.is_empty() {
            self.indexes.clear();
            let mut ids = Vec::new();
            for reply in replies {
                match reply.and_then(Value::into_array) {
                    Ok(members) => {
                        for member in members {
                            match member.into_string() {
                                Ok(id) => ids.push(id),
                                Err(e) => return Step::Done(Err(e)),
                            }
                        }
                    }
                    Err(e) => return Step::Done(Err(e)),
                }
            }
            return self.got_indexed_ids(ids);
        }
        self.got_records(replies)
    }
}

impl ListSchedules {
    /// The ids of scanned legacy record keys (`p:schedule:<id>`).
    fn ids_of(&self, keys: Vec<Bytes>) -> Vec<String> {
        let prefix_len = self.ks.record(RecordKind::Schedule, "").as_bytes().len();
        keys.into_iter()
            .filter_map(|k| {
                k.get(prefix_len..)
                    .map(|id| String::from_utf8_lossy(id).into_owned())
            })
            .collect()
    }
}
