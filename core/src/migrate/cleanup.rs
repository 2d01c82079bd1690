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

use super::engine::{delete, elapsed, existing, scan_page, send_ok, server_ms};
use super::lifecycle::{self, Phase, StepKind};
use super::names::{self, Name};
use super::owners::owners_of_items;
use super::sides::{
    other_server, refuse_if_live, server, sibling, view, MarkerOp, Recorded, Server, Watched,
};
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
    let other_layout = options.layout.other();
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
        .map_err(|reason| reason.refusal(StepKind::Cleanup, &d_view, &o_view))?;
    let keep_shared = keep_shared(&doomed, separate).await?;
    let started_ms = doomed.server_ms().await?;
    let mut record = Recorded {
        e: doomed.e,
        ks: doomed.ks.clone(),
        current: d_view.record.clone().ok().flatten(),
    };
    if !dry_run {
        record
            .mark(Phase::Deleting, started_ms, MarkerOp::Keep)
            .await?;
    }
    let mut deleter = Deleter {
        e: doomed.e,
        ks: &doomed.ks,
        cluster: doomed.server.is_cluster(),
        in_place_other: (!separate).then(|| other.ks.clone()),
        keep_shared,
        dry_run,
        report: CleanupReport::new(doomed.ks.layout(), dry_run),
    };
    deleter
        .pass(&doomed.server.nodes, scan_count, progress)
        .await?;
    let mut report = deleter.report;
    let now = doomed.server_ms().await?;
    if !dry_run {
        // A cluster side's marker goes with it: a store started there must not find it.
        let marker = match doomed.ks.layout() {
            Layout::Cluster => MarkerOp::Delete,
            Layout::Legacy => MarkerOp::Keep,
        };
        record.mark(Phase::Deleted, now, marker).await?;
    }
    report.elapsed = elapsed(started_ms, now);
    Ok(report)
}

/// Whether the names both layouts share stay. In place they are the live side's. On another
/// server or prefix they stay while the other layout of this prefix on this server (an
/// in-place sibling of a separate step) is not deleted: they are its keys too.
async fn keep_shared<E: Executor>(doomed: &Side<'_, E>, separate: bool) -> Result<bool, Error> {
    let (layout, prefix) = (doomed.ks.layout().other(), doomed.ks.prefix());
    let Some(ks) = sibling(layout, prefix, separate, doomed.server.is_cluster()) else {
        return Ok(!separate);
    };
    let data = ks.layout() == Layout::Legacy;
    let sibling_view = view(doomed.e, doomed.server, &ks, data).await?;
    Ok(lifecycle::sibling_in_use(&sibling_view))
}

impl<E: Executor> Side<'_, E> {
    /// The side's clock: a cleanup's times are read there.
    async fn server_ms(&self) -> Result<i64, Error> {
        let first = self.server.nodes.first().cloned().flatten();
        server_ms(self.e, &first).await
    }
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
        self.in_place_other
            .as_ref()
            .is_some_and(|other| names::is_own(other, key))
    }

    /// Deletes what the side's keys name, `SCAN` page by page, on every master.
    async fn pass(
        &mut self,
        nodes: &[Option<String>],
        scan_count: u32,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<(), Error> {
        let pattern = self.ks.prefix_pattern();
        for node in nodes {
            let mut cursor = Bytes::from_static(b"0");
            loop {
                let (next, keys) = scan_page(self.e, node, &cursor, &pattern, scan_count).await?;
                self.page(keys).await?;
                progress(&Progress {
                    scanned: self.report.scanned,
                    total: 0,
                    moved: self.report.total(),
                    phase: "deleting",
                });
                cursor = next;
                if cursor.as_ref() == b"0" {
                    break;
                }
            }
        }
        Ok(())
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
            let name = names::of(self.ks, &key);
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
        match self.dry_run {
            true => existing(self.e, &keys).await,
            false => delete(self.e, self.cluster, keys).await,
        }
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
