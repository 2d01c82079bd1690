//! `migrate_to_cluster_layout`: copies a legacy-layout keyspace into the cluster layout, in
//! place or into another server or prefix. The rules are in the module docs of
//! [`migrate`](super) and in `docs/migration.md`.

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::{Keyspace, Layout, CLUSTER_V1};
use crate::request::{Access, Request};

use super::copy::{Copier, Settings};
use super::engine::{dbsize, elapsed, masters, scan_page, send_ok, server_ms};
use super::{MarkerOutcome, MigrateOptions, MigrationReport, Progress, Refusal};

/// Copies the legacy-layout keyspace of `options.prefix` on `source` into the cluster layout of
/// `options.target_prefix()` on `target` (for an in-place run, pass the same client twice).
///
/// Refuses with [`Error::Refused`] before writing anything when bots look live (unless
/// `allow_live`), when the source is a cluster, for an in-place run of a braced prefix, and
/// when the target's marker holds another layout. Any transport error ends the run: it is
/// idempotent, so run it again.
pub async fn migrate_to_cluster_layout<S: Executor, T: Executor>(
    source: &S,
    target: &T,
    options: &MigrateOptions,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<MigrationReport, Error> {
    let src = Keyspace::new(Layout::Legacy, options.prefix.clone())?;
    if !options.separate() && options.prefix.contains(['{', '}']) {
        return Err(Refusal::BracedPrefixInPlace {
            prefix: options.prefix.clone(),
        }
        .into());
    }
    let tgt = Keyspace::new(Layout::Cluster, options.target_prefix())?;
    let src_nodes = masters(source).await?;
    if src_nodes != [None] {
        return Err(Refusal::SourceIsCluster.into());
    }
    let tgt_cluster = masters(target).await? != [None];
    let marker = read_marker(target, &tgt).await?;
    if let Some(value) = &marker {
        if value.as_ref() != CLUSTER_V1.as_bytes() {
            return Err(Refusal::ForeignMarker {
                key: tgt.marker().to_string(),
                value: String::from_utf8_lossy(value).into_owned(),
            }
            .into());
        }
    }
    if !options.allow_live {
        refuse_if_live(source, target, &src, &tgt, options.separate(), progress).await?;
    }

    let mut run = Copier {
        source,
        target,
        settings: Settings {
            overwrite: options.overwrite,
            dry_run: options.dry_run,
            delete_source: options.delete_source,
            separate: options.separate(),
            include: options.include.clone(),
        },
        src,
        tgt,
        src_cluster: false,
        tgt_cluster,
        own_other: Keyspace::new(Layout::Cluster, options.prefix.clone()).ok(),
        report: MigrationReport::new(Layout::Legacy, options.dry_run),
    };
    let started_ms = server_ms(source, &src_nodes.first().cloned().flatten()).await?;
    let total = dbsize(source, &src_nodes).await?;
    let pattern = run.src.prefix_pattern();
    // The next page is read while the current one is copied: the source and the target work
    // at the same time.
    let count = options.scan_count;
    let mut page = scan_page(source, &None, &Bytes::from_static(b"0"), &pattern, count).await?;
    loop {
        let (next, keys) = std::mem::take(&mut page);
        if next.as_ref() == b"0" {
            run.page(keys).await?;
        } else {
            let (copied, fetched) = futures_util::future::join(
                run.page(keys),
                scan_page(source, &None, &next, &pattern, count),
            )
            .await;
            copied?;
            page = fetched?;
        }
        progress(&Progress {
            scanned: run.report.scanned,
            total,
            moved: run.report.moved(),
            phase: "copying",
        });
        if next.as_ref() == b"0" {
            break;
        }
    }
    run.report.marker = if options.dry_run {
        MarkerOutcome::NotWrittenDryRun
    } else if !options.complete() {
        MarkerOutcome::NotWrittenPartial
    } else if marker.is_some() {
        MarkerOutcome::AlreadySet
    } else {
        let set = Request::cmd(Access::Write, "SET")
            .key(&run.tgt.marker())
            .arg(CLUSTER_V1)
            .arg("NX")
            .build()?;
        send_ok(target, vec![set]).await?;
        MarkerOutcome::Written
    };
    run.report.elapsed = elapsed(
        started_ms,
        server_ms(source, &src_nodes.first().cloned().flatten()).await?,
    );
    Ok(run.report)
}

/// The pattern of the turn queues with pending tickets, in the layout of `ks`.
fn tickets(ks: &Keyspace) -> String {
    let prefix = crate::keys::glob_escape(ks.prefix());
    match ks.layout() {
        Layout::Legacy => format!("{prefix}:co:turn:*:tix"),
        Layout::Cluster => format!("{prefix}:co:{{t:*}}:tix"),
    }
}

/// Refuses with [`Refusal::Live`] when heartbeats or pending tickets show bots running on the
/// source, or at the target: the target layout's tickets in place too (bots already on the
/// new layout), and its heartbeats when it is separate (in place they are the same keys).
pub(super) async fn refuse_if_live<S: Executor, T: Executor>(
    source: &S,
    target: &T,
    src: &Keyspace,
    tgt: &Keyspace,
    separate: bool,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<(), Error> {
    progress(&Progress {
        phase: "checking",
        ..Progress::default()
    });
    let mut found = LiveFound::default();
    let heartbeats = src.heartbeat_pattern();
    found.scan(source, Some(&heartbeats), &tickets(src)).await?;
    let heartbeats = separate.then(|| tgt.heartbeat_pattern());
    found
        .scan(target, heartbeats.as_deref(), &tickets(tgt))
        .await?;
    found.refuse()
}

/// The marker's value under `ks`.
pub(super) async fn read_marker<E: Executor>(e: &E, ks: &Keyspace) -> Result<Option<Bytes>, Error> {
    let get = Request::cmd(Access::Read, "GET")
        .key(&ks.marker())
        .build()?;
    send_ok(e, vec![get])
        .await?
        .pop()
        .map_or(Ok(None), |v| v.into_opt_bytes())
}

/// Keys that show live bots: heartbeats and turn queues with pending tickets.
#[derive(Default)]
struct LiveFound {
    heartbeats: u64,
    tickets: u64,
    examples: Vec<String>,
}

impl LiveFound {
    /// Scans `e` for heartbeats and pending tickets.
    async fn scan<E: Executor>(
        &mut self,
        e: &E,
        heartbeats: Option<&str>,
        tickets: &str,
    ) -> Result<(), Error> {
        let patterns = heartbeats
            .map(|h| (h, true))
            .into_iter()
            .chain([(tickets, false)]);
        for (pattern, is_heartbeat) in patterns {
            let keys = e.run(crate::scan::scan(pattern, 1000)).await?;
            for key in &keys {
                if self.examples.len() < 5 {
                    self.examples
                        .push(String::from_utf8_lossy(key).into_owned());
                }
            }
            let n = keys.len() as u64;
            if is_heartbeat {
                self.heartbeats += n;
            } else {
                self.tickets += n;
            }
        }
        Ok(())
    }

    /// The refusal, when anything was found.
    fn refuse(self) -> Result<(), Error> {
        if self.heartbeats + self.tickets == 0 {
            return Ok(());
        }
        Err(Refusal::Live {
            heartbeats: self.heartbeats,
            tickets: self.tickets,
            examples: self.examples,
        }
        .into())
    }
}
