//! `delete_abandoned_side`: deletes the side of a prefix the bots left, once the other side
//! holds its data. It only deletes: it never copies and never prunes, so it cannot bring back
//! what the live side deleted nor overwrite what it wrote.
//!
//! What it deletes: every key under the prefix that is a name of the side's layout (records,
//! indexes, message logs and drains with the items they name, user data, fences, terms, lock
//! and leadership holders, turn queues), and, when the other side is on another server or
//! prefix, the names both layouts share. What it leaves: message items no log names (orphans,
//! which no copy carried over), keys that are no name of the layout, and, in place, the names
//! both layouts share (the live side's). Its own lifecycle record stays, marked `deleted`, so a
//! store refuses to start on the empty side and later steps know what happened.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::Key;
use crate::keys::{Keyspace, Layout};
use crate::request::{Access, Request};

use super::copy::owners_of_items;
use super::engine::{delete, elapsed, scan_page, send_ok, server_ms};
use super::lifecycle::{self, Phase, StepKind};
use super::names::{self, Name};
use super::sides::{
    other_server, refuse_if_live, server, view, MarkerOp, Recorded, Server, Watched,
};
use super::step::lifecycle_refusal;
use super::{CleanupOptions, CleanupReport, Namespace, Progress, Refusal, EXAMPLES};

/// Log members read per page.
const LOG_PAGE: i64 = 1000;

/// Deletes the `options.layout` side of `options.prefix` on `abandoned`, whose other side (the
/// other layout, under `options.other_prefix()`) is on `other`; for an in-place migration pass
/// the same client twice.
///
/// Refused before anything is deleted unless the lifecycle records show the other side holds
/// the data: the other side went live after this side's copy, or it holds an exact copy of
/// this side and no bot started on this side since ([`lifecycle::cleanup`]); also while
/// pending tickets (or, on another server, heartbeats) show bots running on this side, unless
/// `allow_live`. A cleanup killed at any point is finished by running it again.
pub async fn delete_abandoned_side<A: Executor, O: Executor>(
    abandoned: &A,
    other: &O,
    options: &CleanupOptions,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<CleanupReport, Error> {
    let ks = Keyspace::new(options.layout, options.prefix.clone())?;
    let other_layout = match options.layout {
        Layout::Legacy => Layout::Cluster,
        Layout::Cluster => Layout::Legacy,
    };
    let other_ks = Keyspace::new(other_layout, options.other_prefix())?;
    let doomed_server = server(abandoned).await?;
    let other_server_ = server(other).await?;
    for (layout, srv) in [
        (options.layout, &doomed_server),
        (other_layout, &other_server_),
    ] {
        if layout == Layout::Legacy && srv.is_cluster() {
            return Err(Refusal::LegacyOnCluster.into());
        }
    }
    let separate = other_server(&doomed_server, &other_server_, options.other_server)?
        || options.prefix != options.other_prefix();
    if !options.allow_live {
        let watched = Watched {
            e: abandoned,
            ks: &ks,
            heartbeats: separate,
        };
        refuse_if_live::<A, A>(watched, None, progress).await?;
    }
    run(
        Side {
            e: abandoned,
            server: &doomed_server,
            ks,
        },
        Side {
            e: other,
            server: &other_server_,
            ks: other_ks,
        },
        separate,
        options.dry_run,
        options.scan_count,
        progress,
    )
    .await
}

/// One side of a cleanup: its server and keyspace.
pub(super) struct Side<'a, E> {
    pub e: &'a E,
    pub server: &'a Server,
    pub ks: Keyspace,
}

/// The cleanup of `doomed`, once the live check passed: the lifecycle's decision, then the
/// deletion, between the record's `deleting` and `deleted`.
pub(super) async fn run<A: Executor, O: Executor>(
    doomed: Side<'_, A>,
    other: Side<'_, O>,
    separate: bool,
    dry_run: bool,
    scan_count: u32,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<CleanupReport, Error> {
    let d_view = view(doomed.e, doomed.server, &doomed.ks, false).await?;
    let o_view = view(other.e, other.server, &other.ks, false).await?;
    lifecycle::cleanup(&d_view, &o_view)
        .map_err(|reason| lifecycle_refusal(StepKind::Cleanup, reason, &d_view, &o_view))?;
    // The names both layouts share stay while the other layout of this prefix on this server
    // (the other side in place, or an in-place sibling of a separate step) is not deleted: they
    // are its keys too.
    let sibling_layout = match doomed.ks.layout() {
        Layout::Legacy => Layout::Cluster,
        Layout::Cluster => Layout::Legacy,
    };
    let sibling = Keyspace::new(sibling_layout, doomed.ks.prefix())
        .ok()
        .filter(|ks| separate && !(ks.layout() == Layout::Legacy && doomed.server.is_cluster()));
    let keep_shared = match &sibling {
        None => !separate,
        Some(ks) => {
            let data = ks.layout() == Layout::Legacy;
            lifecycle::sibling_in_use(&view(doomed.e, doomed.server, ks, data).await?)
        }
    };
    let first = doomed.server.nodes.first().cloned().flatten();
    let started_ms = server_ms(doomed.e, &first).await?;
    let mut record = Recorded {
        e: doomed.e,
        ks: doomed.ks.clone(),
        current: d_view.record.clone().ok().flatten(),
    };
    let phase = |record: &Recorded<'_, A>, phase: Phase, at_ms: i64| {
        record.current.clone().map(|mut r| {
            r.phase = phase;
            r.at_ms = at_ms;
            r
        })
    };
    if !dry_run {
        if let Some(r) = phase(&record, Phase::Deleting, started_ms) {
            record.put(r, MarkerOp::Keep).await?;
        }
    }
    let mut deleter = Deleter {
        e: doomed.e,
        ks: &doomed.ks,
        cluster: doomed.server.is_cluster(),
        in_place_other: (!separate).then(|| other.ks.clone()),
        keep_shared,
        dry_run,
        report: CleanupReport {
            layout: doomed.ks.layout(),
            dry_run,
            scanned: 0,
            deleted: BTreeMap::new(),
            orphans: 0,
            unknown: 0,
            shared_kept: 0,
            examples: BTreeMap::new(),
            elapsed: std::time::Duration::ZERO,
        },
    };
    let pattern = doomed.ks.prefix_pattern();
    for node in &doomed.server.nodes {
        let mut cursor = Bytes::from_static(b"0");
        loop {
            let (next, keys) = scan_page(doomed.e, node, &cursor, &pattern, scan_count).await?;
            deleter.page(keys).await?;
            progress(&Progress {
                scanned: deleter.report.scanned,
                total: 0,
                moved: deleter.report.total(),
                phase: "deleting",
            });
            cursor = next;
            if cursor.as_ref() == b"0" {
                break;
            }
        }
    }
    let mut report = deleter.report;
    let now = server_ms(doomed.e, &first).await?;
    if !dry_run {
        // A cluster side's marker goes with it: a store started there must not find it.
        let marker = match doomed.ks.layout() {
            Layout::Cluster => MarkerOp::Delete,
            Layout::Legacy => MarkerOp::Keep,
        };
        if let Some(r) = phase(&record, Phase::Deleted, now) {
            record.put(r, marker).await?;
        }
    }
    report.elapsed = elapsed(started_ms, now);
    Ok(report)
}

/// The deletion pass over the doomed side's keys.
struct Deleter<'a, E> {
    e: &'a E,
    ks: &'a Keyspace,
    cluster: bool,
    /// In place: the other layout under the same prefix on this server, whose keys (and the
    /// names both share) belong to the live side.
    in_place_other: Option<Keyspace>,
    /// The names both layouts share are another keyspace's too: left.
    keep_shared: bool,
    dry_run: bool,
    report: CleanupReport,
}

impl<E: Executor> Deleter<'_, E> {
    fn example(&mut self, what: &'static str, key: &[u8]) {
        let list = self.report.examples.entry(what).or_default();
        if list.len() < EXAMPLES {
            list.push(String::from_utf8_lossy(key).into_owned());
        }
    }

    fn is_live_sides(&self, key: &[u8]) -> bool {
        let Some(other) = &self.in_place_other else {
            return false;
        };
        let name = match other.layout() {
            Layout::Legacy => names::legacy(other, key),
            Layout::Cluster => names::cluster(other, key),
        };
        name != Name::Unknown && !name.is_shared()
    }

    async fn page(&mut self, keys: Vec<Bytes>) -> Result<(), Error> {
        let mut plain: BTreeMap<Namespace, Vec<Key>> = BTreeMap::new();
        let mut logs = Vec::new();
        let mut items = Vec::new();
        for key in keys {
            self.report.scanned += 1;
            if self.is_live_sides(&key) {
                continue;
            }
            let name = match self.ks.layout() {
                Layout::Legacy => names::legacy(self.ks, &key),
                Layout::Cluster => names::cluster(self.ks, &key),
            };
            match name {
                Name::Unknown => {
                    self.report.unknown += 1;
                    self.example("unknown", &key);
                }
                // The record stays (marked deleted); the marker goes with the record's last
                // write (a cluster side's), or is the live side's (in place).
                Name::Marker | Name::Lifecycle { .. } => {}
                ref shared if shared.is_shared() && self.keep_shared => {
                    self.report.shared_kept += 1;
                }
                Name::Log { chat } => logs.push((Key::new(key), chat, Namespace::Messages)),
                Name::Drain { chat } => logs.push((Key::new(key), chat, Namespace::Drains)),
                item @ (Name::LegacyItem { .. } | Name::Item { .. }) => items.push((key, item)),
                other => plain
                    .entry(Namespace::of(&other))
                    .or_default()
                    .push(Key::new(key)),
            }
        }
        // Orphans first, while the logs of this page still name their items.
        let (orphans, _) = owners_of_items(self.e, self.cluster, self.ks, &items).await?;
        for ((key, _), orphan) in items.iter().zip(orphans) {
            if orphan == Some(true) {
                self.report.orphans += 1;
                self.example("orphans", key);
            }
        }
        for (ns, keys) in plain {
            let n = self.delete(keys).await?;
            *self.report.deleted.entry(ns).or_default() += n;
        }
        for (log, chat, ns) in logs {
            self.delete_log(log, &chat, ns).await?;
        }
        Ok(())
    }

    /// Deletes keys (counts those that exist, in a dry run).
    async fn delete(&self, keys: Vec<Key>) -> Result<u64, Error> {
        if !self.dry_run {
            return delete(self.e, self.cluster, keys).await;
        }
        let mut batch = Vec::with_capacity(keys.len());
        for key in &keys {
            batch.push(Request::cmd(Access::Read, "EXISTS").key(key).build()?);
        }
        let mut n = 0;
        for v in send_ok(self.e, batch).await? {
            n += u64::try_from(v.as_i64()?).unwrap_or(0);
        }
        Ok(n)
    }

    /// Deletes a log (or drain) and the items its members name, page by page; the log goes
    /// last, so a cleanup killed in between finds its remaining items through it.
    async fn delete_log(&mut self, log: Key, chat: &str, ns: Namespace) -> Result<(), Error> {
        let mut start = 0i64;
        loop {
            let range = Request::cmd(Access::Read, "ZRANGE")
                .key(&log)
                .arg(start)
                .arg(start + LOG_PAGE - 1)
                .build()?;
            let ids: Vec<Bytes> = match send_ok(self.e, vec![range]).await?.pop() {
                Some(v) => v
                    .into_array()?
                    .into_iter()
                    .map(|m| m.into_bytes())
                    .collect::<Result<_, _>>()?,
                None => Vec::new(),
            };
            let items: Vec<Key> = ids
                .iter()
                .map(|id| self.ks.message_item_raw(chat, id))
                .collect();
            let n = self.delete(items).await?;
            *self.report.deleted.entry(Namespace::Items).or_default() += n;
            if (ids.len() as i64) < LOG_PAGE {
                break;
            }
            start += LOG_PAGE;
        }
        let n = self.delete(vec![log]).await?;
        *self.report.deleted.entry(ns).or_default() += n;
        Ok(())
    }
}
