//! The mirror's prune pass, and the removal of target data the source no longer holds that the
//! copy pass meets (a key that expired between the two passes, a message whose item is gone).
//! A mirror leaves its target holding what the source holds, in every namespace it copies: the
//! names both layouts share included, when the target is another server or prefix.
//!
//! What is never removed: lock fences and leadership terms (only ever raised: a fence must not
//! go backwards), and schedules, which become deleted markers that keep their tokens.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::{enc, Key};
use crate::keys::{Layout, RecordKind};
use crate::request::{Access, Request};
use crate::scripts::{DELETE_INDEXED_CHUNK, MIGRATE_DROP, MIGRATE_PRUNE_SCHEDULE};
use crate::value::Value;

use super::copy::{other_owners, renamed, Pair, Settings};
use super::engine::{delete, members, scan_page, script_call, send_ok};
use super::names::{self, Name};
use super::{MigrationReport, Namespace, Progress};

/// Log members checked per page when a mirror prunes a log.
const PRUNE_PAGE: i64 = 1000;

/// A target datum the source no longer holds.
pub(super) enum Doomed {
    /// A chat, contact or checkpoint record (a schedule becomes a marker instead).
    Record { kind: RecordKind, id: String },
    /// A user-data entry.
    UserEntry {
        user: String,
        ns: String,
        key: String,
    },
    /// A key that keeps its name (conversation, cursor, lease, durability table part).
    Shared(Namespace, Key),
}

impl<S: Executor, T: Executor> Pair<'_, S, T> {
    /// The prune pass: every target key of a copied namespace whose datum the source no longer
    /// holds is removed. Yields how many target keys of the copied namespaces it checked: none
    /// means the target held nothing stale, so a second pass after the copy has nothing to do.
    pub(super) async fn prune(
        &self,
        settings: &Settings,
        tgt_nodes: &[Option<String>],
        scan_count: u32,
        report: &mut MigrationReport,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<u64, Error> {
        let pattern = self.tgt.prefix_pattern();
        let mut seen = 0u64;
        let mut checked = 0u64;
        for node in tgt_nodes {
            let mut cursor = Bytes::from_static(b"0");
            loop {
                let (next, keys) =
                    scan_page(self.target, node, &cursor, &pattern, scan_count).await?;
                seen += keys.len() as u64;
                checked += self.prune_page(settings, keys, report).await?;
                progress(&Progress {
                    scanned: seen,
                    total: 0,
                    moved: report.moved(),
                    phase: "pruning",
                });
                cursor = next;
                if cursor.as_ref() == b"0" {
                    break;
                }
            }
        }
        Ok(checked)
    }

    fn target_name(&self, key: &[u8]) -> Name {
        match self.tgt.layout() {
            Layout::Legacy => names::legacy(&self.tgt, key),
            Layout::Cluster => names::cluster(&self.tgt, key),
        }
    }

    async fn prune_page(
        &self,
        settings: &Settings,
        keys: Vec<Bytes>,
        report: &mut MigrationReport,
    ) -> Result<u64, Error> {
        // What each target key is in the source; asked with EXISTS.
        let mut asked: Vec<(Key, Name)> = Vec::new();
        let mut batch = Vec::new();
        for key in keys {
            let name = self.target_name(&key);
            if !settings.includes(Namespace::of(&name)) {
                continue;
            }
            let counterpart = match &name {
                Name::Record { kind, id } => self.src.record(*kind, id),
                Name::UserEntry { user, ns, key } => self.src.user_entry(user, ns, key),
                Name::Log { chat } => self.src.message_log(chat),
                Name::Drain { chat } => self.src.message_drain(chat),
                Name::Conversation | Name::Cursor | Name::Lease | Name::Durable { .. }
                    if settings.separate =>
                {
                    renamed(&key, self.tgt.prefix(), self.src.prefix())
                }
                _ => continue,
            };
            batch.push(
                Request::cmd(Access::Read, "EXISTS")
                    .key(&counterpart)
                    .build()?,
            );
            asked.push((Key::new(key), name));
        }
        let checked = asked.len() as u64;
        let answers = send_ok(self.source, batch).await?;
        let mut doomed = Vec::new();
        for ((key, name), exists) in asked.into_iter().zip(answers) {
            let exists = exists.as_i64()? > 0;
            match name {
                Name::Log { chat } => self.prune_log(&chat, false, !exists, report).await?,
                Name::Drain { chat } => self.prune_log(&chat, true, !exists, report).await?,
                _ if exists => {}
                Name::Record { kind, id } => doomed.push(Doomed::Record { kind, id }),
                Name::UserEntry { user, ns, key } => {
                    doomed.push(Doomed::UserEntry { user, ns, key })
                }
                name => doomed.push(Doomed::Shared(Namespace::of(&name), key)),
            }
        }
        self.remove(doomed, settings.dry_run, report).await?;
        Ok(checked)
    }

    /// Removes target data the source no longer holds, counting it as `pruned`: records and
    /// entries with their index members in the cluster layout, schedules turned into deleted
    /// markers, shared names deleted. A datum already gone at the target counts nothing.
    pub(super) async fn remove(
        &self,
        doomed: Vec<Doomed>,
        dry_run: bool,
        report: &mut MigrationReport,
    ) -> Result<(), Error> {
        let cluster = self.tgt.layout() == Layout::Cluster;
        let mut schedules = Vec::new();
        // Per namespace, per index (cluster layout; `None` in the legacy layout): the values
        // and their index members.
        type Group = (Vec<Key>, Vec<Bytes>);
        let mut groups: BTreeMap<(Namespace, Option<Vec<u8>>), Group> = BTreeMap::new();
        let mut indexes: BTreeMap<Vec<u8>, Key> = BTreeMap::new();
        let mut add = |ns: Namespace, index: Option<Key>, value: Key, member: Bytes| {
            let id = index.as_ref().map(|k| k.as_bytes().to_vec());
            if let (Some(id), Some(index)) = (&id, index) {
                indexes.entry(id.clone()).or_insert(index);
            }
            let group = groups.entry((ns, id)).or_default();
            group.0.push(value);
            group.1.push(member);
        };
        for d in doomed {
            match d {
                Doomed::Record {
                    kind: RecordKind::Schedule,
                    id,
                } => schedules.push(id),
                Doomed::Record { kind, id } => add(
                    Namespace::of_record(kind),
                    self.tgt.record_index_of(kind, &id),
                    self.tgt.record(kind, &id),
                    Bytes::from(id),
                ),
                Doomed::UserEntry { user, ns, key } => add(
                    Namespace::UserData,
                    self.tgt.user_index(&user),
                    self.tgt.user_entry(&user, &ns, &key),
                    Bytes::from(format!("{}:{}", enc(&ns), enc(&key))),
                ),
                Doomed::Shared(ns, key) => add(ns, None, key, Bytes::new()),
            }
        }
        for ((ns, index), (values, ids)) in groups {
            let removed = if dry_run {
                self.existing(&values).await?
            } else if let Some(index) = index.and_then(|i| indexes.get(&i).cloned()) {
                let mut removed = 0;
                for (values, ids) in values.chunks(256).zip(ids.chunks(256)) {
                    let mut keys = vec![index.clone()];
                    keys.extend(values.iter().cloned());
                    let call =
                        Request::script(&DELETE_INDEXED_CHUNK, Access::Write, keys, ids.to_vec())?;
                    for v in send_ok(self.target, vec![call]).await? {
                        removed += u64::try_from(v.as_i64()?).unwrap_or(0);
                    }
                }
                removed
            } else {
                delete(self.target, self.tgt_cluster, values).await?
            };
            report.counts(ns).pruned += removed;
        }
        // A schedule becomes a deleted marker that keeps its token, once (one already a marker
        // is not pruned again), and not at all when it is not a hash.
        let dry = Bytes::from_static(if dry_run { b"1" } else { b"0" });
        let mut marks = Vec::with_capacity(schedules.len());
        for id in &schedules {
            let mut keys = vec![self.tgt.record(RecordKind::Schedule, id)];
            let mut args = vec![dry.clone()];
            if cluster {
                keys.extend(self.tgt.record_index_of(RecordKind::Schedule, id));
                args.push(Bytes::copy_from_slice(id.as_bytes()));
            }
            marks.push(script_call(
                self.tgt_cluster,
                &MIGRATE_PRUNE_SCHEDULE,
                Access::Write,
                keys,
                args,
            )?);
        }
        for (id, code) in schedules.iter().zip(send_ok(self.target, marks).await?) {
            match code.as_i64()? {
                1 => report.counts(Namespace::Schedules).pruned += 1,
                0 => {}
                _ => {
                    let key = self.tgt.record(RecordKind::Schedule, id);
                    report.unreadable += 1;
                    report.example("unreadable", key.as_bytes());
                }
            }
        }
        Ok(())
    }

    /// How many of `keys` exist at the target (what a dry run would remove).
    async fn existing(&self, keys: &[Key]) -> Result<u64, Error> {
        let mut batch = Vec::with_capacity(keys.len());
        for key in keys {
            batch.push(Request::cmd(Access::Read, "EXISTS").key(key).build()?);
        }
        let mut n = 0;
        for v in send_ok(self.target, batch).await? {
            n += u64::try_from(v.as_i64()?).unwrap_or(0);
        }
        Ok(n)
    }

    /// Removes from a target log (or drain) the messages the source's log does not hold, with
    /// their items; all of them when the source has no such log.
    async fn prune_log(
        &self,
        chat: &str,
        drain: bool,
        all: bool,
        report: &mut MigrationReport,
    ) -> Result<(), Error> {
        let log = self.tgt_log(chat, drain);
        let src_log = self.src_log(chat, drain);
        let mut start = 0i64;
        loop {
            let range = Request::cmd(Access::Read, "ZRANGE")
                .key(&log)
                .arg(start)
                .arg(start + PRUNE_PAGE - 1)
                .build()?;
            let ids: Vec<Bytes> = send_ok(self.target, vec![range])
                .await?
                .pop()
                .map(|v| v.into_array())
                .transpose()?
                .unwrap_or_default()
                .into_iter()
                .map(|v| v.into_bytes())
                .collect::<Result<_, _>>()?;
            if ids.is_empty() {
                return Ok(());
            }
            let gone: Vec<Bytes> = if all {
                ids.clone()
            } else {
                let mut ask = Vec::with_capacity(ids.len());
                for id in &ids {
                    ask.push(
                        Request::cmd(Access::Read, "ZSCORE")
                            .key(&src_log)
                            .arg(id)
                            .build()?,
                    );
                }
                let scores = send_ok(self.source, ask).await?;
                ids.iter()
                    .zip(scores)
                    .filter(|(_, s)| *s == Value::Nil)
                    .map(|(id, _)| id.clone())
                    .collect()
            };
            let removed = self.drop_messages(chat, drain, &gone, report).await?;
            let len = ids.len() as i64;
            if len < PRUNE_PAGE {
                return Ok(());
            }
            start += len - removed;
        }
    }

    /// Removes messages `ids` from a target log (or drain), each with its item unless another
    /// message of the source still owns that item (the other list of the chat; for a legacy
    /// target, another chat whose reading of the item's name is the same key), counting them
    /// as `pruned`. Yields how many members were removed.
    pub(super) async fn drop_messages(
        &self,
        chat: &str,
        drain: bool,
        ids: &[Bytes],
        report: &mut MigrationReport,
    ) -> Result<i64, Error> {
        if ids.is_empty() {
            return Ok(0);
        }
        let ns = if drain {
            Namespace::Drains
        } else {
            Namespace::Messages
        };
        report.counts(ns).pruned += ids.len() as u64;
        let readings = self.tgt.layout() == Layout::Legacy;
        let mut pairs = Vec::new();
        let mut asked = Vec::new();
        for id in ids {
            for pair in other_owners(&self.src, chat, id, drain, readings) {
                pairs.push(pair);
                asked.push(id.clone());
            }
        }
        let named = members(self.source, self.src_cluster, &pairs).await?;
        let kept: Vec<&Bytes> = asked
            .iter()
            .zip(named)
            .filter(|(_, n)| *n)
            .map(|(id, _)| id)
            .collect();
        if self.dry_run {
            return Ok(0);
        }
        let mut keys = vec![self.tgt_log(chat, drain)];
        let mut args = Vec::with_capacity(ids.len() * 2);
        for id in ids {
            keys.push(self.tgt.message_item_raw(chat, id));
            args.push(id.clone());
            let keep = kept.contains(&id);
            args.push(Bytes::from_static(if keep { b"0" } else { b"1" }));
        }
        let drop = script_call(self.tgt_cluster, &MIGRATE_DROP, Access::Write, keys, args)?;
        Ok(send_ok(self.target, vec![drop])
            .await?
            .pop()
            .map(|v| v.as_i64())
            .transpose()?
            .unwrap_or(0))
    }
}
