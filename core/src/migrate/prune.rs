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
use crate::keys::Key;
use crate::keys::{Keyspace, Layout, RecordKind};
use crate::request::{Access, Request};
use crate::scripts::{DELETE_INDEXED_CHUNK, MIGRATE_DROP, MIGRATE_PRUNE_SCHEDULE};
use crate::store::user::member;
use crate::value::Value;

use super::engine::{delete, existing, members, scan_page, script_call, send_ok};
use super::names::{self, Name};
use super::owners::other_owners;
use super::pair::{renamed, Pair, Settings};
use super::{MigrationReport, Namespace, Progress};

/// Log members checked per page when a mirror prunes a log.
const PRUNE_PAGE: i64 = 1000;

/// A target datum the source no longer holds.
#[derive(Clone, Debug, PartialEq, Eq)]
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
            let name = names::of(&self.tgt, &key);
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
        let (removals, schedules) = removals(&self.tgt, doomed);
        for removal in removals {
            let removed = match dry_run {
                true => existing(self.target, &removal.keys).await?,
                false => self.delete_removal(&removal).await?,
            };
            report.counts(removal.ns).pruned += removed;
        }
        self.mark_schedules(&schedules, dry_run, report).await
    }

    /// Deletes a removal's keys, with their index members when they have an index.
    async fn delete_removal(&self, removal: &Removal) -> Result<u64, Error> {
        let Some(index) = &removal.index else {
            return delete(self.target, self.tgt_cluster, removal.keys.clone()).await;
        };
        let mut removed = 0;
        let chunks = removal.keys.chunks(256).zip(removal.members.chunks(256));
        for (values, ids) in chunks {
            let mut keys = vec![index.clone()];
            keys.extend(values.iter().cloned());
            let call = Request::script(&DELETE_INDEXED_CHUNK, Access::Write, keys, ids.to_vec())?;
            for v in send_ok(self.target, vec![call]).await? {
                removed += u64::try_from(v.as_i64()?).unwrap_or(0);
            }
        }
        Ok(removed)
    }

    /// Turns schedules into deleted markers that keep their tokens, once (one already a marker
    /// is not pruned again), and not at all when it is not a hash.
    async fn mark_schedules(
        &self,
        schedules: &[String],
        dry_run: bool,
        report: &mut MigrationReport,
    ) -> Result<(), Error> {
        let cluster = self.tgt.layout() == Layout::Cluster;
        let dry = Bytes::from_static(if dry_run { b"1" } else { b"0" });
        let mut marks = Vec::with_capacity(schedules.len());
        for id in schedules {
            let mut keys = vec![self.tgt.record(RecordKind::Schedule, id)];
            let mut args = vec![dry.clone()];
            if cluster {
                keys.extend(self.tgt.record_index_of(RecordKind::Schedule, id));
                args.push(Bytes::copy_from_slice(id.as_bytes()));
            }
            let (c, script) = (self.tgt_cluster, &MIGRATE_PRUNE_SCHEDULE);
            marks.push(script_call(c, script, Access::Write, keys, args)?);
        }
        for (id, code) in schedules.iter().zip(send_ok(self.target, marks).await?) {
            match code.as_i64()? {
                1 => report.counts(Namespace::Schedules).pruned += 1,
                0 => {}
                _ => report.unreadable_key(self.tgt.record(RecordKind::Schedule, id).as_bytes()),
            }
        }
        Ok(())
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

/// Target keys of one namespace removed together: under one index (cluster layout), with the
/// index's members, or without one.
#[derive(Debug, PartialEq, Eq)]
struct Removal {
    ns: Namespace,
    index: Option<Key>,
    keys: Vec<Key>,
    /// The index member of each key (empty without an index).
    members: Vec<Bytes>,
}

/// Groups what is doomed at `tgt` into removals, per namespace and index; schedules apart (by
/// id), since they become markers instead.
fn removals(tgt: &Keyspace, doomed: Vec<Doomed>) -> (Vec<Removal>, Vec<String>) {
    let mut schedules = Vec::new();
    let mut groups: BTreeMap<(Namespace, Option<Key>), Removal> = BTreeMap::new();
    let mut add = |ns: Namespace, index: Option<Key>, key: Key, member: Bytes| {
        let removal = groups
            .entry((ns, index.clone()))
            .or_insert_with(|| Removal {
                ns,
                index,
                keys: Vec::new(),
                members: Vec::new(),
            });
        removal.keys.push(key);
        removal.members.push(member);
    };
    for d in doomed {
        match d {
            Doomed::Record {
                kind: RecordKind::Schedule,
                id,
            } => schedules.push(id),
            Doomed::Record { kind, id } => add(
                Namespace::of_record(kind),
                tgt.record_index_of(kind, &id),
                tgt.record(kind, &id),
                Bytes::from(id),
            ),
            Doomed::UserEntry { user, ns, key } => add(
                Namespace::UserData,
                tgt.user_index(&user),
                tgt.user_entry(&user, &ns, &key),
                member(&ns, &key),
            ),
            Doomed::Shared(ns, key) => add(ns, None, key, Bytes::new()),
        }
    }
    (groups.into_values().collect(), schedules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doomed_data_is_removed_per_index_and_schedules_become_markers() {
        let tgt = Keyspace::new(Layout::Cluster, "p").unwrap();
        let record = |kind, id: &str| Doomed::Record {
            kind,
            id: id.into(),
        };
        let doomed = vec![
            record(RecordKind::Chat, "a"),
            record(RecordKind::Schedule, "s"),
            record(RecordKind::Chat, "a"),
            Doomed::UserEntry {
                user: "u".into(),
                ns: "n".into(),
                key: "k:1".into(),
            },
            Doomed::Shared(Namespace::Cursors, Key::new("p:cursor:x")),
        ];
        let (removals, schedules) = removals(&tgt, doomed);
        assert_eq!(schedules, ["s"]);
        let chat_index = tgt.record_index_of(RecordKind::Chat, "a");
        assert_eq!(
            removals,
            vec![
                Removal {
                    ns: Namespace::Chats,
                    index: chat_index,
                    keys: vec![tgt.record(RecordKind::Chat, "a"); 2],
                    members: vec![Bytes::from_static(b"a"); 2],
                },
                Removal {
                    ns: Namespace::UserData,
                    index: tgt.user_index("u"),
                    keys: vec![tgt.user_entry("u", "n", "k:1")],
                    members: vec![Bytes::from_static(b"n:k%3A1")],
                },
                Removal {
                    ns: Namespace::Cursors,
                    index: None,
                    keys: vec![Key::new("p:cursor:x")],
                    members: vec![Bytes::new()],
                },
            ]
        );
    }

    #[test]
    fn a_legacy_target_removes_without_indexes() {
        let tgt = Keyspace::new(Layout::Legacy, "p").unwrap();
        let doomed = vec![
            Doomed::Record {
                kind: RecordKind::Contact,
                id: "a".into(),
            },
            Doomed::Record {
                kind: RecordKind::Contact,
                id: "b".into(),
            },
        ];
        let (removals, schedules) = removals(&tgt, doomed);
        assert!(schedules.is_empty());
        assert_eq!(removals.len(), 1);
        assert_eq!(removals[0].index, None);
        assert_eq!(
            removals[0].keys,
            [
                tgt.record(RecordKind::Contact, "a"),
                tgt.record(RecordKind::Contact, "b")
            ]
        );
    }
}
