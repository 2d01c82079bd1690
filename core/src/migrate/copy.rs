//! The copy pass both directions share: one `SCAN` page of the source at a time, read in
//! batches, written in groups that share a slot at the target. A mirror's copy replaces what
//! differs and removes the target's counterpart of a source key that went away since the scan
//! (a key that expired, a message whose item is gone): the prune pass before it could not know.

use std::collections::{BTreeSet, VecDeque};

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::Key;
use crate::keys::{Keyspace, Layout, RecordKind};
use crate::request::{Access, Request};

use super::engine::{
    canonical_int, members, read, read_strings, send, send_ok, ttl_arg, write, Entry, Mode, Read,
    WRITE_CHUNK,
};
use super::names::{self, item_readings, Name};
use super::prune::Doomed;
use super::{
    MigrationReport, Namespace, CHAT_WAVE, MIGRATE_COUNTERS, MIGRATE_LEASE, MIGRATE_MESSAGES,
    MIGRATE_RESTORE, MIGRATE_SCHEDULES, MIGRATE_STRINGS,
};

/// Messages read from a log per page.
const LOG_PAGE: i64 = 1000;

/// The same name under another prefix: the names both layouts share.
pub(super) fn renamed(key: &[u8], from: &str, to: &str) -> Key {
    let mut out = Vec::with_capacity(key.len() + to.len());
    out.extend_from_slice(to.as_bytes());
    out.extend_from_slice(&key[from.len()..]);
    Key::new(out)
}

/// One key of a page to copy, once read.
enum Job {
    Record {
        kind: RecordKind,
        id: String,
    },
    User {
        user: String,
        ns: String,
        key: String,
    },
    Counter(Namespace, Key),
    /// A cursor a mirror sets exactly (copy-only raises it, as a counter).
    Cursor(Key),
    Restore(Namespace, Key),
    Lease(Key),
}

impl Job {
    /// The target datum a mirror removes when the source key is gone.
    fn doomed(&self) -> Option<Doomed> {
        match self {
            Job::Record { kind, id } => Some(Doomed::Record {
                kind: *kind,
                id: id.clone(),
            }),
            Job::User { user, ns, key } => Some(Doomed::UserEntry {
                user: user.clone(),
                ns: ns.clone(),
                key: key.clone(),
            }),
            Job::Cursor(tgt) => Some(Doomed::Shared(Namespace::Cursors, tgt.clone())),
            Job::Restore(ns, tgt) => Some(Doomed::Shared(*ns, tgt.clone())),
            Job::Lease(tgt) => Some(Doomed::Shared(Namespace::Leases, tgt.clone())),
            // Fences and terms are only ever raised: a counter gone at the source keeps its
            // value at the target.
            Job::Counter(..) => None,
        }
    }
}

/// What a copy pass does, whichever its direction.
pub(super) struct Settings {
    /// Make the target match the source: existing target keys that differ are replaced, and
    /// the target's counterpart of a source key that went away is removed.
    pub mirror: bool,
    /// Copy-only: existing target keys are replaced all the same.
    pub overwrite: bool,
    /// Nothing is written.
    pub dry_run: bool,
    /// The target is another server or prefix: the names both layouts share are copied.
    pub separate: bool,
    /// Only these namespaces (`None`: all).
    pub include: Option<Vec<Namespace>>,
}

impl Settings {
    pub(super) fn includes(&self, ns: Namespace) -> bool {
        let ns = match ns {
            Namespace::Drains | Namespace::Items => Namespace::Messages,
            other => other,
        };
        self.include.as_ref().is_none_or(|list| list.contains(&ns))
    }

    fn replaces(&self) -> bool {
        self.mirror || self.overwrite
    }
}

/// The two sides of a pass: servers, keyspaces (their layouts give the direction).
pub(super) struct Pair<'a, S, T> {
    pub source: &'a S,
    pub target: &'a T,
    /// The source keyspace.
    pub src: Keyspace,
    /// The target keyspace.
    pub tgt: Keyspace,
    pub src_cluster: bool,
    pub tgt_cluster: bool,
    /// Nothing is written.
    pub dry_run: bool,
}

impl<S, T> Pair<'_, S, T> {
    pub(super) fn src_log(&self, chat: &str, drain: bool) -> Key {
        if drain {
            self.src.message_drain(chat)
        } else {
            self.src.message_log(chat)
        }
    }

    pub(super) fn tgt_log(&self, chat: &str, drain: bool) -> Key {
        if drain {
            self.tgt.message_drain(chat)
        } else {
            self.tgt.message_log(chat)
        }
    }
}

/// The copy pass: the two sides, what it does, and the report it fills.
pub(super) struct Copier<'a, S, T> {
    pub pair: Pair<'a, S, T>,
    pub settings: Settings,
    /// The target's layout under the source prefix, to recognise what an in-place run wrote.
    pub own_other: Option<Keyspace>,
    pub report: MigrationReport,
}

impl<S: Executor, T: Executor> Copier<'_, S, T> {
    fn flags(&self) -> (Bytes, Bytes) {
        let flag = |b: bool| Bytes::from_static(if b { b"1" } else { b"0" });
        (flag(self.settings.replaces()), flag(self.settings.dry_run))
    }

    fn name(&self, key: &[u8]) -> Name {
        let src = &self.pair.src;
        match src.layout() {
            Layout::Legacy => names::legacy(src, key),
            Layout::Cluster => names::cluster(src, key),
        }
    }

    fn is_other_layout(&self, key: &[u8]) -> bool {
        let Some(other) = &self.own_other else {
            return false;
        };
        let name = match other.layout() {
            Layout::Legacy => names::legacy(other, key),
            Layout::Cluster => names::cluster(other, key),
        };
        name != Name::Unknown && !name.is_shared()
    }

    /// Copies one `SCAN` page of source keys.
    pub(super) async fn page(&mut self, keys: Vec<Bytes>) -> Result<(), Error> {
        let mut reads: Vec<(Key, Mode)> = Vec::new();
        let mut jobs: Vec<Job> = Vec::new();
        let mut logs: Vec<(String, bool)> = Vec::new();
        let mut items: Vec<(Bytes, Name)> = Vec::new();
        let (src, tgt) = (&self.pair.src, &self.pair.tgt);
        for key in keys {
            let name = self.name(&key);
            if matches!(name, Name::Lifecycle { .. }) {
                // The steps' own bookkeeping (written by this very run): not counted.
                continue;
            }
            self.report.scanned += 1;
            if self.is_other_layout(&key) {
                self.report.target_layout += 1;
                continue;
            }
            let ns = Namespace::of(&name);
            let separate = self.settings.separate;
            match &name {
                Name::Unknown => {
                    self.report.unknown += 1;
                    self.report.example("unknown", &key);
                    continue;
                }
                Name::Marker
                | Name::Lifecycle { .. }
                | Name::Heartbeat
                | Name::LockHolder { .. }
                | Name::LeaderHolder { .. }
                | Name::Turn { .. }
                | Name::RecordIndex { .. }
                | Name::UserIndex { .. } => {
                    *self.report.not_copied.entry(ns).or_default() += 1;
                    continue;
                }
                Name::Conversation | Name::Cursor | Name::Lease | Name::Durable { .. }
                    if !separate =>
                {
                    *self.report.not_copied.entry(ns).or_default() += 1;
                    continue;
                }
                Name::UserEntry {
                    user, ns: space, ..
                } if tgt.layout() == Layout::Legacy
                    && (user.contains(':') || space.contains(':')) =>
                {
                    // The legacy layout cannot hold it: its name would read back differently.
                    self.report.unrepresentable += 1;
                    self.report.example("unrepresentable", &key);
                    continue;
                }
                _ if !self.settings.includes(ns) => continue,
                _ => {}
            }
            let key = Key::new(key);
            let shared_target = || renamed(key.as_bytes(), src.prefix(), tgt.prefix());
            match name {
                Name::Log { chat } => logs.push((chat, false)),
                Name::Drain { chat } => logs.push((chat, true)),
                item @ (Name::LegacyItem { .. } | Name::Item { .. }) => {
                    items.push((key.to_bytes(), item))
                }
                Name::Record { kind, id } => {
                    let mode = if kind == RecordKind::Schedule {
                        Mode::Hash
                    } else {
                        Mode::String
                    };
                    reads.push((key, mode));
                    jobs.push(Job::Record { kind, id });
                }
                Name::UserEntry { user, ns, key: k } => {
                    reads.push((key, Mode::String));
                    jobs.push(Job::User { user, ns, key: k });
                }
                Name::Fence { key: k } => {
                    reads.push((key, Mode::String));
                    jobs.push(Job::Counter(Namespace::Fences, tgt.lock_fence(&k)));
                }
                Name::Term { name } => {
                    reads.push((key, Mode::String));
                    jobs.push(Job::Counter(Namespace::Terms, tgt.leader_term(&name)));
                }
                Name::Cursor => {
                    let to = shared_target();
                    reads.push((key, Mode::String));
                    jobs.push(if self.settings.mirror {
                        Job::Cursor(to)
                    } else {
                        Job::Counter(Namespace::Cursors, to)
                    });
                }
                Name::Conversation | Name::Durable { .. } => {
                    let to = shared_target();
                    reads.push((key, Mode::Dump));
                    jobs.push(Job::Restore(ns, to));
                }
                Name::Lease => {
                    let to = shared_target();
                    reads.push((key, Mode::Hash));
                    jobs.push(Job::Lease(to));
                }
                _ => {}
            }
        }
        // Records, the owners of items, and message logs are independent: they run together.
        let (mut records, mut owners, mut messages) =
            (self.report.part(), self.report.part(), self.report.part());
        let (copied, checked, moved) = futures_util::future::join3(
            self.copy(&mut records, reads, jobs),
            self.check_items(&mut owners, items),
            self.messages(&mut messages, logs),
        )
        .await;
        for part in [records, owners, messages] {
            self.report.absorb(part);
        }
        copied?;
        checked?;
        moved
    }

    /// Writes the records, user data, counters and shared names of one page.
    async fn copy(
        &self,
        report: &mut MigrationReport,
        reads: Vec<(Key, Mode)>,
        jobs: Vec<Job>,
    ) -> Result<(), Error> {
        let pair = &self.pair;
        let values = read(pair.source, pair.src_cluster, &reads).await?;
        let (overwrite, dry) = self.flags();
        let mut indexed = Vec::new();
        let mut expiring = Vec::new();
        let mut plain = Vec::new();
        let mut schedules = Vec::new();
        let mut counters = Vec::new();
        let mut restores = Vec::new();
        let mut leases = Vec::new();
        let mut gone = Vec::new();
        for (((src_key, _), value), job) in reads.into_iter().zip(values).zip(jobs) {
            if value.kind.is_none() {
                // Deleted (or expired) since the scan: a mirror removes what the target holds
                // of it, which the prune pass saw alive at the source.
                if self.settings.mirror {
                    gone.extend(job.doomed());
                }
                continue;
            }
            if value.value.is_none() {
                unreadable(report, &src_key);
                continue;
            }
            match job {
                Job::Record {
                    kind: RecordKind::Schedule,
                    id,
                } => {
                    let Some(entry) = schedule_entry(&pair.tgt, &id, &value) else {
                        unreadable(report, &src_key);
                        continue;
                    };
                    schedules.push(entry.tagged((Namespace::Schedules, src_key)));
                }
                Job::Record { kind, id } => {
                    let tgt = pair.tgt.record(kind, &id);
                    let head = pair.tgt.record_index_of(kind, &id).into_iter().collect();
                    let entry = Entry {
                        slot: tgt.slot(),
                        head,
                        args: vec![
                            Bytes::from(id),
                            value.bytes().unwrap_or_default(),
                            ttl_arg(value.ttl()),
                        ],
                        keys: vec![tgt],
                        tag: (Namespace::of_record(kind), src_key),
                    };
                    if kind == RecordKind::Checkpoint {
                        expiring.push(entry);
                    } else {
                        indexed.push(entry);
                    }
                }
                Job::User { user, ns, key } => {
                    let tgt = pair.tgt.user_entry(&user, &ns, &key);
                    let member = format!("{}:{}", crate::keys::enc(&ns), crate::keys::enc(&key));
                    expiring.push(Entry {
                        slot: tgt.slot(),
                        head: pair.tgt.user_index(&user).into_iter().collect(),
                        args: vec![
                            Bytes::from(member),
                            value.bytes().unwrap_or_default(),
                            ttl_arg(value.ttl()),
                        ],
                        keys: vec![tgt],
                        tag: (Namespace::UserData, src_key),
                    });
                }
                Job::Counter(ns, tgt) => {
                    let Some(n) = value.bytes().and_then(|b| canonical_int(&b)) else {
                        unreadable(report, &src_key);
                        continue;
                    };
                    counters.push(Entry {
                        slot: tgt.slot(),
                        head: Vec::new(),
                        args: vec![n],
                        keys: vec![tgt],
                        tag: (ns, src_key),
                    });
                }
                Job::Cursor(tgt) => plain.push(Entry {
                    slot: tgt.slot(),
                    head: Vec::new(),
                    args: vec![
                        Bytes::new(),
                        value.bytes().unwrap_or_default(),
                        ttl_arg(value.ttl()),
                    ],
                    keys: vec![tgt],
                    tag: (Namespace::Cursors, src_key),
                }),
                Job::Restore(ns, tgt) => {
                    restores.push(Entry {
                        slot: tgt.slot(),
                        head: Vec::new(),
                        args: vec![
                            value.bytes().unwrap_or_default(),
                            Bytes::from(value.ttl().unwrap_or(0).to_string()),
                        ],
                        keys: vec![tgt],
                        tag: (ns, src_key),
                    });
                }
                Job::Lease(tgt) => {
                    let Some(entry) = lease_entry(&value, tgt) else {
                        unreadable(report, &src_key);
                        continue;
                    };
                    leases.push(entry.tagged((Namespace::Leases, src_key)));
                }
            }
        }
        let c = pair.tgt_cluster;
        let t = pair.target;
        let mut done = Vec::new();
        // The legacy layout has no indexes: its records are plain strings.
        let (indexed_mode, expiring_mode, schedule_index): (&'static [u8], &'static [u8], _) =
            match pair.tgt.layout() {
                Layout::Cluster => (b"indexed", b"expiring", Bytes::from_static(b"1")),
                Layout::Legacy => (b"plain", b"plain", Bytes::from_static(b"0")),
            };
        let head = |mode: &'static [u8]| [Bytes::from_static(mode), overwrite.clone(), dry.clone()];
        let strings = [
            (indexed, head(indexed_mode)),
            (expiring, head(expiring_mode)),
            (plain, head(b"plain")),
        ];
        for (entries, head) in strings {
            done.extend(write(t, c, &MIGRATE_STRINGS, entries, &head, WRITE_CHUNK).await?);
        }
        let schedule_head = [schedule_index, overwrite.clone(), dry.clone()];
        done.extend(
            write(
                t,
                c,
                &MIGRATE_SCHEDULES,
                schedules,
                &schedule_head,
                WRITE_CHUNK,
            )
            .await?,
        );
        let counter_head = std::slice::from_ref(&dry);
        done.extend(write(t, c, &MIGRATE_COUNTERS, counters, counter_head, WRITE_CHUNK).await?);
        let flags = [overwrite, dry];
        done.extend(write(t, c, &MIGRATE_RESTORE, restores, &flags, WRITE_CHUNK).await?);
        done.extend(write(t, c, &MIGRATE_LEASE, leases, &flags, 1).await?);
        for ((ns, src_key), code) in done {
            match code {
                // The target key is in the way (another type, not an integer), or the target
                // refused a DUMP payload (-2: a newer server's): left as it is.
                Ok(code) if code < 0 => unreadable(report, &src_key),
                Ok(code) => report.counts(ns).add(code),
                // An error reply to a write (OOM, NOREPLICAS, READONLY after the retries...)
                // may have left part of its call written: the run stops, and a rerun finishes.
                Err(e) => return Err(e),
            }
        }
        pair.remove(gone, self.settings.dry_run, report).await
    }

    /// Finds the owners of the items of a page: orphans (no log or drain names them), and for
    /// legacy items with several readings, foreign and shared items.
    async fn check_items(
        &self,
        report: &mut MigrationReport,
        items: Vec<(Bytes, Name)>,
    ) -> Result<(), Error> {
        let pair = &self.pair;
        let (orphans, owners) =
            owners_of_items(pair.source, pair.src_cluster, &pair.src, &items).await?;
        for ((key, _), (orphan, owners)) in items.iter().zip(orphans.into_iter().zip(owners)) {
            let Some(orphan) = orphan else {
                continue; // gone since the scan
            };
            if orphan {
                report.orphans += 1;
                report.example("orphans", key);
                continue;
            }
            let count = owners.iter().filter(|o| **o).count();
            if !owners[0] {
                report.foreign_items += 1;
            }
            if count > 1 {
                report.shared_items += 1;
            }
        }
        Ok(())
    }

    /// Copies the messages of `logs` (and drains), in waves of [`CHAT_WAVE`] logs, each log in
    /// pages of [`LOG_PAGE`]: while one wave is written to the target, the next is read from the
    /// source.
    async fn messages(
        &self,
        report: &mut MigrationReport,
        logs: Vec<(String, bool)>,
    ) -> Result<(), Error> {
        let mut queue: VecDeque<LogPage> = logs
            .into_iter()
            .map(|(chat, drain)| LogPage {
                chat,
                drain,
                start: 0,
            })
            .collect();
        let mut ready: Option<Vec<FetchedLog>> = None;
        loop {
            let current = match ready.take() {
                Some(current) => current,
                None if queue.is_empty() => return Ok(()),
                None => self.fetch(report, take_wave(&mut queue)).await?,
            };
            let next = take_wave(&mut queue);
            if next.is_empty() {
                let more = self.store(report, current).await?;
                queue.extend(more);
                continue;
            }
            let (mut stored_report, mut fetched_report) = (report.part(), report.part());
            let (stored, fetched) = futures_util::future::join(
                self.store(&mut stored_report, current),
                self.fetch(&mut fetched_report, next),
            )
            .await;
            report.absorb(stored_report);
            report.absorb(fetched_report);
            queue.extend(stored?);
            ready = Some(fetched?);
        }
    }

    /// Reads a wave of log pages and their items from the source.
    async fn fetch(
        &self,
        report: &mut MigrationReport,
        wave: Vec<LogPage>,
    ) -> Result<Vec<FetchedLog>, Error> {
        let pair = &self.pair;
        let mut batch = Vec::with_capacity(wave.len());
        for log in &wave {
            batch.push(
                Request::cmd(Access::Read, "ZRANGE")
                    .key(&pair.src_log(&log.chat, log.drain))
                    .arg(log.start)
                    .arg(log.start + LOG_PAGE - 1)
                    .arg("WITHSCORES")
                    .build()?,
            );
        }
        let replies = send(pair.source, batch).await?;
        let mut fetched = Vec::with_capacity(wave.len());
        for (log, reply) in wave.into_iter().zip(replies) {
            let Ok(flat) = reply.and_then(|v| v.into_array()) else {
                unreadable(report, &pair.src_log(&log.chat, log.drain));
                continue;
            };
            let mut members = Vec::with_capacity(flat.len() / 2);
            for pair in flat.chunks(2) {
                if let [id, score] = pair {
                    members.push((id.clone().into_bytes()?, score.clone().into_bytes()?));
                }
            }
            fetched.push(FetchedLog {
                page: log,
                members,
                values: Vec::new(),
                clashes: BTreeSet::new(),
                shared: BTreeSet::new(),
                member_only: BTreeSet::new(),
            });
        }
        let mut items = Vec::new();
        for log in &fetched {
            for (id, _) in &log.members {
                // The member's own bytes name its item: an id that is not UTF-8 still finds it.
                items.push(pair.src.message_item_raw(&log.page.chat, id));
            }
        }
        let mut values = read_strings(pair.source, pair.src_cluster, &items)
            .await?
            .into_iter();
        for log in &mut fetched {
            log.values = values.by_ref().take(log.members.len()).collect();
            if log.values.len() != log.members.len() {
                return Err(Error::UnexpectedReply {
                    detail: "MGET answered fewer values than members".into(),
                });
            }
        }
        self.mark_shared_items(&mut fetched).await?;
        Ok(fetched)
    }

    /// Writes a fetched wave to the target; yields the next page of every log whose page was
    /// full. A mirror removes the target's copy of a member whose item is gone at the source.
    async fn store(
        &self,
        report: &mut MigrationReport,
        wave: Vec<FetchedLog>,
    ) -> Result<Vec<LogPage>, Error> {
        let pair = &self.pair;
        let (overwrite, dry) = self.flags();
        let mut entries = Vec::new();
        let mut dangling: Vec<Vec<Bytes>> = vec![Vec::new(); wave.len()];
        for (i, log) in wave.iter().enumerate() {
            let (chat, drain) = (&log.page.chat, log.page.drain);
            let ns = if drain {
                Namespace::Drains
            } else {
                Namespace::Messages
            };
            let target_log = pair.tgt_log(chat, drain);
            for (position, ((id, score), value)) in log.members.iter().zip(&log.values).enumerate()
            {
                let src_item = || pair.src.message_item_raw(chat, id);
                if value.kind.is_none() {
                    report.dangling += 1;
                    dangling[i].push(id.clone());
                    continue;
                }
                if log.clashes.contains(&position) {
                    report.unrepresentable += 1;
                    report.example("unrepresentable", src_item().as_bytes());
                    continue;
                }
                let Some(bytes) = value.bytes() else {
                    unreadable(report, &src_item());
                    continue;
                };
                if log.shared.contains(&position) {
                    report.shared_items += 1;
                }
                let member_only =
                    log.member_only.contains(&position) || log.shared.contains(&position);
                let item = pair.tgt.message_item_raw(chat, id);
                entries.push(Entry {
                    slot: item.slot(),
                    head: vec![target_log.clone()],
                    args: vec![
                        id.clone(),
                        score.clone(),
                        if member_only { Bytes::new() } else { bytes },
                        Bytes::from_static(if member_only { b"0" } else { b"1" }),
                    ],
                    keys: vec![item],
                    tag: (i, ns, id.clone()),
                });
            }
        }
        let head = [overwrite, dry];
        let done = write(
            pair.target,
            pair.tgt_cluster,
            &MIGRATE_MESSAGES,
            entries,
            &head,
            WRITE_CHUNK,
        )
        .await?;
        for ((i, ns, id), code) in done {
            match code {
                Ok(code) if code < 0 => {
                    // The target's log is in the way (another type): left as it is.
                    let item = pair.src.message_item_raw(&wave[i].page.chat, &id);
                    unreadable(report, &item);
                }
                Ok(code) => report.counts(ns).add(code),
                Err(e) => return Err(e),
            }
        }
        if self.settings.mirror {
            // Members without an item carry no message: the target drops its copy of them.
            for (log, ids) in wave.iter().zip(&dangling) {
                let gone = self.target_holds(&log.page, ids).await?;
                pair.drop_messages(&log.page.chat, log.page.drain, &gone, report)
                    .await?;
            }
        }
        let mut more = Vec::new();
        for log in &wave {
            if log.members.len() as i64 == LOG_PAGE {
                more.push(LogPage {
                    chat: log.page.chat.clone(),
                    drain: log.page.drain,
                    start: log.page.start + LOG_PAGE,
                });
            }
        }
        Ok(more)
    }

    /// Which of `ids` the target's log (or drain) of `page` holds.
    async fn target_holds(&self, page: &LogPage, ids: &[Bytes]) -> Result<Vec<Bytes>, Error> {
        let pair = &self.pair;
        let log = pair.tgt_log(&page.chat, page.drain);
        let asked: Vec<(Key, Bytes)> = ids.iter().map(|id| (log.clone(), id.clone())).collect();
        let held = members(pair.target, pair.tgt_cluster, &asked).await?;
        Ok(ids
            .iter()
            .zip(held)
            .filter(|(_, h)| *h)
            .map(|(id, _)| id.clone())
            .collect())
    }

    /// Marks the messages that share one target item with another message of the source, so
    /// that each item is written once, by a rule that does not depend on which message comes
    /// first (a dry run, which cannot see its own writes, then counts what the real run does):
    ///
    /// - an id in both a chat's log and its drain: the drain's entry adds only its member (the
    ///   log's message writes the item);
    /// - legacy target only: two messages whose legacy item names are one key (`a` + `b:c` and
    ///   `a:b` + `c`). With equal values the reading with the shortest chat writes the item and
    ///   the others are `shared`; with different values the legacy layout cannot hold them, and
    ///   each is a clash.
    async fn mark_shared_items(&self, wave: &mut [FetchedLog]) -> Result<(), Error> {
        let pair = &self.pair;
        let mut pairs = Vec::new();
        let mut asked = Vec::new();
        for (i, log) in wave.iter().enumerate() {
            if !log.page.drain {
                continue;
            }
            for (position, (id, _)) in log.members.iter().enumerate() {
                pairs.push((pair.src.message_log(&log.page.chat), id.clone()));
                asked.push((i, position));
            }
        }
        for ((i, position), in_log) in asked
            .into_iter()
            .zip(members(pair.source, pair.src_cluster, &pairs).await?)
        {
            if in_log {
                wave[i].member_only.insert(position);
            }
        }
        if pair.tgt.layout() != Layout::Legacy {
            return Ok(());
        }
        let mut pairs = Vec::new();
        let mut gets = Vec::new();
        let mut asked = Vec::new();
        for (i, log) in wave.iter().enumerate() {
            let chat = &log.page.chat;
            for (position, (id, _)) in log.members.iter().enumerate() {
                let rest = [chat.as_bytes(), b":", id].concat();
                for (other_chat, other_id) in item_readings(&rest) {
                    if other_chat == chat {
                        continue;
                    }
                    let member = Bytes::copy_from_slice(other_id);
                    pairs.push((pair.src.message_log(other_chat), member.clone()));
                    pairs.push((pair.src.message_drain(other_chat), member));
                    gets.push(
                        Request::cmd(Access::Read, "GET")
                            .key(&pair.src.message_item_raw(other_chat, other_id))
                            .build()?,
                    );
                    asked.push((i, position, other_chat.len() < chat.len()));
                }
            }
        }
        let named = members(pair.source, pair.src_cluster, &pairs).await?;
        let others = send_ok(pair.source, gets).await?;
        for ((named, other), (i, position, shorter)) in named.chunks(2).zip(others).zip(asked) {
            let other = other.into_opt_bytes()?;
            // Another message without an item (dangling) writes nothing: no clash.
            if !named.iter().any(|n| *n) || other.is_none() {
                continue;
            }
            if wave[i].values[position].bytes() != other {
                wave[i].clashes.insert(position);
            } else if shorter {
                wave[i].shared.insert(position);
            }
        }
        Ok(())
    }
}

/// Who owns each item of `items` (legacy items by every reading of their names, cluster items
/// by their chat): per item `Some(true)` for an orphan (no log or drain names it and it still
/// exists), `Some(false)` when a list names it, `None` when it is gone; and per item, which of
/// its readings (in [`item_readings`] order, the first being the shortest chat) a list names.
pub(super) async fn owners_of_items<E: Executor>(
    source: &E,
    cluster: bool,
    ks: &Keyspace,
    items: &[(Bytes, Name)],
) -> Result<(Vec<Option<bool>>, Vec<Vec<bool>>), Error> {
    // Logs first; a drain is asked only for the readings no log names (most items have one
    // reading, named by its log).
    let mut pairs = Vec::new();
    let mut spans = Vec::with_capacity(items.len());
    let mut readings = Vec::new();
    for (_, name) in items {
        let start = pairs.len();
        let of_item: Vec<(&str, &[u8])> = match name {
            Name::LegacyItem { rest } => item_readings(rest).collect(),
            Name::Item { chat, id } => vec![(chat.as_str(), id.as_ref())],
            _ => Vec::new(),
        };
        for (chat, id) in of_item {
            let id = Bytes::copy_from_slice(id);
            pairs.push((ks.message_log(chat), id.clone()));
            readings.push((chat, id));
        }
        spans.push(start..pairs.len());
    }
    let mut named = members(source, cluster, &pairs).await?;
    let unnamed: Vec<usize> = (0..named.len()).filter(|&i| !named[i]).collect();
    let drains: Vec<(Key, Bytes)> = unnamed
        .iter()
        .map(|&i| (ks.message_drain(readings[i].0), readings[i].1.clone()))
        .collect();
    for (&i, in_drain) in unnamed.iter().zip(members(source, cluster, &drains).await?) {
        named[i] = in_drain;
    }
    // An item no list names may have just been dropped with its member (a cleanup on a page
    // read while the previous one was deleted): only one that still exists is an orphan. A
    // drop removes member and item together, so asking after the members is safe.
    let unowned: Vec<usize> = spans
        .iter()
        .enumerate()
        .filter(|(_, span)| !named[(*span).clone()].iter().any(|n| *n))
        .map(|(i, _)| i)
        .collect();
    let mut exists = Vec::with_capacity(unowned.len());
    for &i in &unowned {
        exists.push(
            Request::cmd(Access::Read, "EXISTS")
                .key(&Key::new(items[i].0.clone()))
                .build()?,
        );
    }
    let mut orphan: Vec<Option<bool>> = vec![Some(false); items.len()];
    for (&i, answer) in unowned.iter().zip(send_ok(source, exists).await?) {
        orphan[i] = (answer.as_i64()? > 0).then_some(true);
    }
    let owners = spans.into_iter().map(|span| named[span].to_vec()).collect();
    Ok((orphan, owners))
}

/// The next page of one log (or drain) to copy.
struct LogPage {
    chat: String,
    drain: bool,
    start: i64,
}

/// A log page read from the source: its members, their items, and the members a legacy target
/// cannot hold.
struct FetchedLog {
    page: LogPage,
    members: Vec<(Bytes, Bytes)>,
    values: Vec<Read>,
    /// Positions whose item another message of the source holds with another value.
    clashes: BTreeSet<usize>,
    /// Positions whose item the message of a shorter chat id writes (same value).
    shared: BTreeSet<usize>,
    /// Drain positions whose id the chat's log also names: only the member is written.
    member_only: BTreeSet<usize>,
}

/// Up to [`CHAT_WAVE`] log pages from the front of the queue.
fn take_wave(queue: &mut VecDeque<LogPage>) -> Vec<LogPage> {
    let n = queue.len().min(CHAT_WAVE);
    queue.drain(..n).collect()
}

/// The lists (logs and drains, with the member to look for) other than `chat`'s own log (or
/// drain) that may name the same legacy item as message `id` of `chat`: its own drain (or log)
/// and, with `readings` (legacy item names, where `<chat>:<id>` can be another chat's
/// message too), both lists of every other reading. A message dropped from one list keeps its
/// item while any of them names it. Cluster-layout items belong to one chat: pass `false`.
pub(super) fn other_owners(
    ks: &Keyspace,
    chat: &str,
    id: &[u8],
    drain: bool,
    readings: bool,
) -> Vec<(Key, Bytes)> {
    let own = Bytes::copy_from_slice(id);
    let mut out = vec![if drain {
        (ks.message_log(chat), own)
    } else {
        (ks.message_drain(chat), own)
    }];
    if readings {
        let rest = [chat.as_bytes(), b":", id].concat();
        for (c, i) in item_readings(&rest) {
            if c == chat && i == id {
                continue;
            }
            let member = Bytes::copy_from_slice(i);
            out.push((ks.message_log(c), member.clone()));
            out.push((ks.message_drain(c), member));
        }
    }
    out
}

/// Counts a key that could not be read as its namespace's type.
fn unreadable(report: &mut MigrationReport, key: &Key) {
    report.unreadable += 1;
    report.example("unreadable", key.as_bytes());
}

/// An entry without its tag yet.
pub(super) struct Untagged {
    slot: u16,
    head: Vec<Key>,
    keys: Vec<Key>,
    args: Vec<Bytes>,
}

impl Untagged {
    pub(super) fn tagged<T>(self, tag: T) -> Entry<T> {
        Entry {
            slot: self.slot,
            head: self.head,
            keys: self.keys,
            args: self.args,
            tag,
        }
    }
}

/// The write of a schedule record (hash: token, holder, data, deleted) under `ks`; `None` when
/// the record has no canonical token.
pub(super) fn schedule_entry(ks: &Keyspace, id: &str, value: &Read) -> Option<Untagged> {
    let hash = value.hash()?;
    let token = hash.get(b"token".as_slice())?;
    let token = canonical_int(token).filter(|t| t == token)?;
    let deleted = hash
        .get(b"deleted".as_slice())
        .is_some_and(|d| d.as_ref() == b"1");
    let tgt = ks.record(RecordKind::Schedule, id);
    Some(Untagged {
        slot: tgt.slot(),
        head: ks
            .record_index_of(RecordKind::Schedule, id)
            .into_iter()
            .collect(),
        args: vec![
            Bytes::copy_from_slice(id.as_bytes()),
            token,
            hash.get(b"holder".as_slice()).cloned().unwrap_or_default(),
            Bytes::from_static(if deleted { b"1" } else { b"0" }),
            hash.get(b"data".as_slice()).cloned().unwrap_or_default(),
        ],
        keys: vec![tgt],
    })
}

/// The write of a lease: its token, and its holder with the time it had left when it was read.
pub(super) fn lease_entry(value: &Read, tgt: Key) -> Option<Untagged> {
    let hash = value.hash()?;
    let token = match hash.get(b"token".as_slice()) {
        Some(t) => canonical_int(t)?,
        None => Bytes::new(),
    };
    let holder = hash.get(b"holder".as_slice()).cloned().unwrap_or_default();
    let until: Option<i64> = hash
        .get(b"until".as_slice())
        .and_then(|u| std::str::from_utf8(u).ok()?.parse().ok());
    let left = match until {
        Some(until) if !holder.is_empty() && until > value.now_ms => {
            Bytes::from((until - value.now_ms).to_string())
        }
        _ => Bytes::new(),
    };
    Some(Untagged {
        slot: tgt.slot(),
        head: Vec::new(),
        args: vec![token, holder, left],
        keys: vec![tgt],
    })
}
