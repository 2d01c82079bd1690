//! `rollback_to_legacy_layout`: copies a cluster-layout keyspace (on one node or on every
//! master of a cluster) back into the legacy layout of a single node, mirroring by default.

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::Key;
use crate::keys::{Keyspace, Layout, RecordKind, CLUSTER_V1};
use crate::request::{Access, Request};

use super::copy::{other_owners, Copier, Settings};
use super::engine::{
    dbsize, elapsed, masters, members, scan_page, script_call, send, send_ok, server_ms,
};
use super::forward::{read_marker, refuse_if_live};
use super::names::{self, Name};
use super::{
    MarkerOutcome, MigrationReport, Namespace, Progress, Refusal, RollbackOptions, MIGRATE_DROP,
    MIGRATE_PRUNE_SCHEDULE,
};

/// Log members checked per page when a mirror prunes a legacy log.
const PRUNE_PAGE: i64 = 1000;

/// Copies the cluster-layout keyspace of `options.prefix` on `source` (a single node, or a
/// cluster: every master is scanned) into the legacy layout of `options.target_prefix()` on
/// `target`, a single node (for an in-place rollback, pass the same client twice).
///
/// With `mirror` (the default) the legacy target is made to match the source: records
/// overwrite, and legacy records, user data and messages the source no longer holds are
/// deleted (a schedule becomes a deleted marker that keeps its token); fences and terms are
/// only raised. A complete rollback (not a dry run, nothing the legacy layout cannot hold)
/// removes the target's layout marker, so a cluster-layout store started there by mistake
/// refuses the restored data.
pub async fn rollback_to_legacy_layout<S: Executor, T: Executor>(
    source: &S,
    target: &T,
    options: &RollbackOptions,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<MigrationReport, Error> {
    let src = Keyspace::new(Layout::Cluster, options.prefix.clone())?;
    let tgt = Keyspace::new(Layout::Legacy, options.target_prefix())?;
    let src_nodes = masters(source).await?;
    let src_cluster = src_nodes != [None];
    if masters(target).await? != [None] {
        return Err(Refusal::TargetIsCluster.into());
    }
    if !options.allow_live {
        refuse_if_live(source, target, &src, &tgt, options.separate(), progress).await?;
    }
    // The source's marker says it was migrated (or started) in the cluster layout, and not yet
    // taken apart by a rollback's delete_source.
    let migrated = read_marker(source, &src).await?.as_deref() == Some(CLUSTER_V1.as_bytes());
    if options.mirror && !migrated {
        // Mirroring deletes the legacy data the source does not hold: legacy data a source
        // without the marker never held is not "deleted since".
        return Err(Refusal::SourceNotMigrated {
            key: src.marker().to_string(),
        }
        .into());
    }
    if options.delete_source && !options.mirror && migrated {
        // Copy-only keeps existing legacy keys, which may be older than the source's:
        // deleting the source after it would lose the newer data for good.
        return Err(Refusal::DeleteWithoutMirror.into());
    }
    let started_ms = server_ms(source, &src_nodes.first().cloned().flatten()).await?;
    let mut report = MigrationReport::new(Layout::Cluster, options.dry_run);
    if options.mirror {
        // Pruning goes first, while the source is whole: it compares the legacy keys with it.
        let mut pruner = Pruner {
            source,
            target,
            src: src.clone(),
            tgt: tgt.clone(),
            src_cluster,
            dry_run: options.dry_run,
            report: &mut report,
        };
        pruner.run(options.scan_count, progress).await?;
    }
    let copy = Settings {
        overwrite: options.mirror,
        dry_run: options.dry_run,
        delete_source: false,
        separate: options.separate(),
        include: None,
    };
    let copied = copy_pass(source, target, options, &src_nodes, copy, progress).await?;
    report.absorb(copied);
    let complete = !options.dry_run && report.unrepresentable == 0;
    report.marker = if !complete {
        MarkerOutcome::Kept
    } else {
        let del = Request::cmd(Access::Write, "DEL")
            .key(&tgt.marker())
            .build()?;
        let removed = send_ok(target, vec![del]).await?.pop();
        match removed.map(|v| v.as_i64()).transpose()? {
            Some(1) => MarkerOutcome::Removed,
            _ => MarkerOutcome::Absent,
        }
    };
    if options.delete_source && complete {
        // Only now, with the target complete and its marker gone, is the source taken apart.
        // Its marker goes first: killed in the pass below, a rerun with mirror is refused (it
        // would prune what was already deleted here), and one without it finishes the job.
        let del = Request::cmd(Access::Write, "DEL")
            .key(&src.marker())
            .build()?;
        send_ok(source, vec![del]).await?;
        // A copy-only pass: every key is kept (the target matches the source), and each source
        // key the target holds is deleted.
        let delete = Settings {
            overwrite: false,
            dry_run: false,
            delete_source: true,
            separate: options.separate(),
            include: None,
        };
        let deleted = copy_pass(source, target, options, &src_nodes, delete, progress).await?;
        report.source_deleted += deleted.source_deleted;
    }
    report.elapsed = elapsed(
        started_ms,
        server_ms(source, &src_nodes.first().cloned().flatten()).await?,
    );
    Ok(report)
}

/// One pass over every master of the source with `settings`; yields its report.
async fn copy_pass<S: Executor, T: Executor>(
    source: &S,
    target: &T,
    options: &RollbackOptions,
    src_nodes: &[Option<String>],
    settings: Settings,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<MigrationReport, Error> {
    let mut run = Copier {
        source,
        target,
        settings,
        src: Keyspace::new(Layout::Cluster, options.prefix.clone())?,
        tgt: Keyspace::new(Layout::Legacy, options.target_prefix())?,
        src_cluster: src_nodes != [None],
        tgt_cluster: false,
        own_other: Some(Keyspace::new(Layout::Legacy, options.prefix.clone())?),
        report: MigrationReport::new(Layout::Cluster, options.dry_run),
    };
    let total = dbsize(source, src_nodes).await?;
    let pattern = run.src.prefix_pattern();
    for node in src_nodes {
        let mut cursor = Bytes::from_static(b"0");
        loop {
            let (next, keys) =
                scan_page(source, node, &cursor, &pattern, options.scan_count).await?;
            run.page(keys).await?;
            progress(&Progress {
                scanned: run.report.scanned,
                total,
                moved: run.report.moved(),
                phase: if run.settings.delete_source {
                    "deleting"
                } else {
                    "copying"
                },
            });
            cursor = next;
            if cursor.as_ref() == b"0" {
                break;
            }
        }
    }
    Ok(run.report)
}

/// The mirror's pass: legacy keys of the target whose data the source no longer holds.
struct Pruner<'a, S, T> {
    source: &'a S,
    target: &'a T,
    src: Keyspace,
    tgt: Keyspace,
    src_cluster: bool,
    dry_run: bool,
    report: &'a mut MigrationReport,
}

impl<S: Executor, T: Executor> Pruner<'_, S, T> {
    async fn run(
        &mut self,
        scan_count: u32,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<(), Error> {
        let pattern = self.tgt.prefix_pattern();
        let mut cursor = Bytes::from_static(b"0");
        let mut seen = 0u64;
        loop {
            let (next, keys) = scan_page(self.target, &None, &cursor, &pattern, scan_count).await?;
            seen += keys.len() as u64;
            self.page(keys).await?;
            progress(&Progress {
                scanned: seen,
                total: 0,
                moved: self.report.moved(),
                phase: "pruning",
            });
            cursor = next;
            if cursor.as_ref() == b"0" {
                return Ok(());
            }
        }
    }

    async fn page(&mut self, keys: Vec<Bytes>) -> Result<(), Error> {
        // What each legacy key would be in the source; asked with EXISTS.
        let mut asked: Vec<(Key, Name)> = Vec::new();
        let mut batch = Vec::new();
        for key in keys {
            let name = names::legacy(&self.tgt, &key);
            let counterpart = match &name {
                Name::Record { kind, id } => self.src.record(*kind, id),
                Name::UserEntry { user, ns, key } => self.src.user_entry(user, ns, key),
                Name::Log { chat } => self.src.message_log(chat),
                Name::Drain { chat } => self.src.message_drain(chat),
                _ => continue,
            };
            batch.push(
                Request::cmd(Access::Read, "EXISTS")
                    .key(&counterpart)
                    .build()?,
            );
            asked.push((Key::new(key), name));
        }
        let answers = send_ok(self.source, batch).await?;
        let mut deletes = Vec::new();
        let mut schedules = Vec::new();
        for ((key, name), exists) in asked.into_iter().zip(answers) {
            let exists = exists.as_i64()? > 0;
            match name {
                Name::Log { chat } => self.prune_log(&chat, false, !exists).await?,
                Name::Drain { chat } => self.prune_log(&chat, true, !exists).await?,
                Name::Record {
                    kind: RecordKind::Schedule,
                    ..
                } if !exists => schedules.push(key),
                Name::Record { kind, .. } if !exists => {
                    self.report.counts(Namespace::of_record(kind)).pruned += 1;
                    if !self.dry_run {
                        deletes.push(Request::cmd(Access::Write, "DEL").key(&key).build()?);
                    }
                }
                Name::UserEntry { .. } if !exists => {
                    self.report.counts(Namespace::UserData).pruned += 1;
                    if !self.dry_run {
                        deletes.push(Request::cmd(Access::Write, "DEL").key(&key).build()?);
                    }
                }
                _ => {}
            }
        }
        for reply in send(self.target, deletes).await? {
            reply?;
        }
        // A schedule becomes a deleted marker that keeps its token, once (one already a marker
        // is not pruned again), and not at all when it is not a hash.
        let dry = Bytes::from_static(if self.dry_run { b"1" } else { b"0" });
        let mut marks = Vec::with_capacity(schedules.len());
        for key in &schedules {
            marks.push(Request::script(
                &MIGRATE_PRUNE_SCHEDULE,
                Access::Write,
                vec![key.clone()],
                vec![dry.clone()],
            )?);
        }
        for (key, code) in schedules.iter().zip(send_ok(self.target, marks).await?) {
            match code.as_i64()? {
                1 => self.report.counts(Namespace::Schedules).pruned += 1,
                0 => {}
                _ => {
                    self.report.unreadable += 1;
                    self.report.example("unreadable", key.as_bytes());
                }
            }
        }
        Ok(())
    }

    /// Removes from a legacy log (or drain) the messages the source's log does not hold, with
    /// their items; all of them when the source has no such log.
    async fn prune_log(&mut self, chat: &str, drain: bool, all: bool) -> Result<(), Error> {
        let (log, src_log) = if drain {
            (self.tgt.message_drain(chat), self.src.message_drain(chat))
        } else {
            (self.tgt.message_log(chat), self.src.message_log(chat))
        };
        let ns = if drain {
            Namespace::Drains
        } else {
            Namespace::Messages
        };
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
                    .filter(|(_, s)| *s == crate::value::Value::Nil)
                    .map(|(id, _)| id.clone())
                    .collect()
            };
            self.report.counts(ns).pruned += gone.len() as u64;
            // A legacy item another message of the source still owns (the legacy collision,
            // or an id in both the chat's log and drain) keeps its item: only the member goes.
            let mut pairs = Vec::new();
            let mut asked = Vec::new();
            for id in &gone {
                let id_text = String::from_utf8_lossy(id);
                // The legacy item is named by every reading of `<chat>:<id>`: all of them count.
                for pair in other_owners(&self.src, chat, &id_text, drain, true) {
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
            let removed = if self.dry_run || gone.is_empty() {
                0
            } else {
                let mut keys = vec![log.clone()];
                let mut args = Vec::with_capacity(gone.len() * 2);
                for id in &gone {
                    keys.push(self.tgt.message_item(chat, &String::from_utf8_lossy(id)));
                    args.push(id.clone());
                    let keep = kept.contains(&id);
                    args.push(Bytes::from_static(if keep { b"0" } else { b"1" }));
                }
                let drop = script_call(false, &MIGRATE_DROP, Access::Write, keys, args)?;
                send_ok(self.target, vec![drop])
                    .await?
                    .pop()
                    .map(|v| v.as_i64())
                    .transpose()?
                    .unwrap_or(0)
            };
            let len = ids.len() as i64;
            if len < PRUNE_PAGE {
                return Ok(());
            }
            start += len - removed;
        }
    }
}
