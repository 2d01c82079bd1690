//! A copy step, whichever its direction (a migration or a rollback), in named phases:
//!
//! 1. **sides**: what each server is (one node or a cluster; one server or two, from their
//!    `run_id`s), and each side's lifecycle record;
//! 2. **checks**: live bots, then the lifecycle's decision ([`lifecycle::copy`]): every
//!    refusal comes before anything is written;
//! 3. **records**: the target's record says "copying" (before any datum is written, so a
//!    store will not start on a half-made copy), then the source's;
//! 4. **prune** (a mirror): target data the source no longer holds is removed;
//! 5. **copy**: the source's keyspace, page by page;
//! 6. **complete**: the target's record and its marker in one call (the marker written last),
//!    then the source's record;
//! 7. **delete the source** (`delete_source`): the cleanup step on the source, which only
//!    deletes ([`super::cleanup`]).

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::{Keyspace, Layout, CLUSTER_V1};
use crate::request::{Access, Request};

use super::cleanup::{self, Side};
use super::copy::{Copier, Pair, Settings};
use super::engine::{dbsize, elapsed, scan_page, send_ok, server_ms};
use super::lifecycle::{self, CopyId, Phase, Record, Role, StepKind, View};
use super::sides::{
    other_server, refuse_if_live, server, view, MarkerOp, Recorded, Server, Watched,
};
use super::{MarkerOutcome, MigrationReport, Namespace, Progress, Refusal};

/// What a copy step was asked to do.
pub(super) struct CopyStep {
    pub kind: StepKind,
    /// The source's prefix.
    pub prefix: String,
    /// The target's prefix.
    pub target_prefix: String,
    pub other_server: Option<bool>,
    pub mirror: bool,
    pub overwrite: bool,
    pub dry_run: bool,
    pub include: Option<Vec<Namespace>>,
    pub allow_live: bool,
    pub delete_source: bool,
    pub scan_count: u32,
}

impl CopyStep {
    fn layouts(&self) -> (Layout, Layout) {
        match self.kind {
            StepKind::Rollback => (Layout::Cluster, Layout::Legacy),
            _ => (Layout::Legacy, Layout::Cluster),
        }
    }

    fn complete_include(&self) -> bool {
        self.include
            .as_ref()
            .is_none_or(|list| Namespace::COPIED.iter().all(|ns| list.contains(ns)))
    }
}

/// The refusal of a lifecycle decision, with both sides' states (legacy first).
pub(super) fn lifecycle_refusal(
    step: StepKind,
    reason: lifecycle::Unsafe,
    a: &View,
    b: &View,
) -> Error {
    let sides = if a.layout == Layout::Legacy {
        [a.clone(), b.clone()]
    } else {
        [b.clone(), a.clone()]
    };
    Refusal::Lifecycle {
        step,
        message: reason.message(step, &sides),
        reason,
    }
    .into()
}

/// How a side is named in the other side's record.
fn described(ks: &Keyspace, server: &Server) -> String {
    format!(
        "the {} keyspace {:?} on {}",
        ks.layout(),
        ks.prefix(),
        server.described
    )
}

/// The record a side gets when a copy begins: the copy's id, its role, `copying`; what bots
/// did before (`started`) stays, for later steps to read.
fn beginning(
    current: Option<&Record>,
    copy: u64,
    role: Role,
    exact: bool,
    peer: String,
    now_ms: i64,
) -> Record {
    let prev = current
        .and_then(|r| (r.copy != copy).then_some(r.copy))
        .or(current.and_then(|r| r.prev));
    Record {
        copy,
        prev,
        role,
        phase: Phase::Copying,
        exact,
        peer,
        at_ms: now_ms,
        started: current.and_then(|r| r.started),
        started_at_ms: current.and_then(|r| r.started_at_ms),
        live_after: current.map(|r| r.live_after.clone()).unwrap_or_default(),
    }
}

/// Runs a copy step. See the module docs.
pub(super) async fn run<S: Executor, T: Executor>(
    source: &S,
    target: &T,
    step: CopyStep,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<MigrationReport, Error> {
    // 1. sides
    let (from, to) = step.layouts();
    let src = Keyspace::new(from, step.prefix.clone())?;
    let src_server = server(source).await?;
    let tgt_server = server(target).await?;
    match step.kind {
        StepKind::Rollback if tgt_server.is_cluster() => {
            return Err(Refusal::TargetIsCluster.into())
        }
        StepKind::Migrate if src_server.is_cluster() => return Err(Refusal::SourceIsCluster.into()),
        _ => {}
    }
    let separate = other_server(&src_server, &tgt_server, step.other_server)?
        || step.prefix != step.target_prefix;
    if to == Layout::Cluster && !separate && step.prefix.contains(['{', '}']) {
        return Err(Refusal::BracedPrefixInPlace {
            prefix: step.prefix.clone(),
        }
        .into());
    }
    let tgt = Keyspace::new(to, step.target_prefix.clone())?;
    if step.delete_source && !step.mirror {
        return Err(Refusal::DeleteWithoutMirror.into());
    }
    if step.delete_source && !step.complete_include() {
        return Err(Refusal::DeleteAfterPartialCopy.into());
    }
    let src_view = view(source, &src_server, &src, false).await?;
    let tgt_view = view(target, &tgt_server, &tgt, to == Layout::Legacy).await?;
    let tgt_marker = read_marker(target, &tgt).await?;
    if let Some(value) = &tgt_marker {
        if to == Layout::Cluster && value.as_ref() != CLUSTER_V1.as_bytes() {
            return Err(Refusal::ForeignMarker {
                key: tgt.marker().to_string(),
                value: String::from_utf8_lossy(value).into_owned(),
            }
            .into());
        }
    }

    // 2. checks
    if !step.allow_live {
        refuse_if_live(
            Watched {
                e: source,
                ks: &src,
                heartbeats: true,
            },
            Some(Watched {
                e: target,
                ks: &tgt,
                heartbeats: separate,
            }),
            progress,
        )
        .await?;
    }
    let decision = lifecycle::copy(&src_view, &tgt_view);
    let deleting = matches!(&src_view.record, Ok(Some(r)) if r.phase == Phase::Deleting);
    if decision == Err(lifecycle::Unsafe::SourceDeleted) && step.delete_source && deleting {
        // A `delete_source` run killed while it deleted the source: the copy is complete, so
        // the rerun only finishes the deletion (the cleanup decides whether it may).
        let mut report = MigrationReport::new(from, step.dry_run);
        report.mirrored = step.mirror;
        report.marker = match step.kind {
            StepKind::Rollback => MarkerOutcome::Kept,
            _ => MarkerOutcome::AlreadySet,
        };
        let deleted = cleanup::run(
            Side {
                e: source,
                server: &src_server,
                ks: src.clone(),
            },
            Side {
                e: target,
                server: &tgt_server,
                ks: tgt.clone(),
            },
            separate,
            step.dry_run,
            step.scan_count,
            progress,
        )
        .await?;
        report.source_deleted = deleted.total();
        return Ok(report);
    }
    let decision =
        decision.map_err(|reason| lifecycle_refusal(step.kind, reason, &src_view, &tgt_view))?;
    // (A braced legacy prefix has no cluster-layout sibling, and no legacy keyspace lives on a
    // cluster.)
    let sibling = Keyspace::new(from, step.target_prefix.clone())
        .ok()
        .filter(|ks| separate && !(ks.layout() == Layout::Legacy && tgt_server.is_cluster()));
    if let Some(sibling) = sibling {
        let data = sibling.layout() == Layout::Legacy;
        let sibling_view = view(target, &tgt_server, &sibling, data).await?;
        lifecycle::shared_names(&sibling_view)
            .map_err(|reason| lifecycle_refusal(step.kind, reason, &src_view, &tgt_view))?;
    }
    let first = src_server.nodes.first().cloned().flatten();
    let started_ms = server_ms(source, &first).await?;
    let known = |v: &View| v.record.as_ref().ok().cloned().flatten();
    let (src_record, tgt_record) = (known(&src_view), known(&tgt_view));
    let copy = match decision {
        CopyId::Resume(copy) => copy,
        // Above both sides' copies, so "started since this copy" means what it says even
        // between servers whose clocks disagree.
        CopyId::New => [src_record.as_ref(), tgt_record.as_ref()]
            .into_iter()
            .flatten()
            .map(|r| r.copy + 1)
            .fold(u64::try_from(started_ms).unwrap_or(0), u64::max),
    };
    let mut report = MigrationReport::new(from, step.dry_run);
    report.copy = decision;
    report.mirrored = step.mirror;

    // 3. records
    let mut tgt_rec = Recorded {
        e: target,
        ks: tgt.clone(),
        current: tgt_record,
    };
    let mut src_rec = Recorded {
        e: source,
        ks: src.clone(),
        current: src_record,
    };
    if !step.dry_run {
        let record = beginning(
            tgt_rec.current.as_ref(),
            copy,
            Role::Target,
            step.mirror,
            described(&src, &src_server),
            started_ms,
        );
        tgt_rec.put(record, MarkerOp::Keep).await?;
        let record = beginning(
            src_rec.current.as_ref(),
            copy,
            Role::Source,
            true,
            described(&tgt, &tgt_server),
            started_ms,
        );
        src_rec.put(record, MarkerOp::Keep).await?;
    }

    // 4. prune, 5. copy
    let settings = Settings {
        mirror: step.mirror,
        overwrite: step.overwrite,
        dry_run: step.dry_run,
        separate,
        include: step.include.clone(),
    };
    let own_other = Keyspace::new(to, step.prefix.clone()).ok();
    let mut run = Copier {
        pair: Pair {
            source,
            target,
            src: src.clone(),
            tgt: tgt.clone(),
            src_cluster: src_server.is_cluster(),
            tgt_cluster: tgt_server.is_cluster(),
            dry_run: step.dry_run,
        },
        settings,
        own_other,
        report,
    };
    let mut stale = 0;
    if step.mirror {
        let mut pruned = run.report.part();
        stale = run
            .pair
            .prune(
                &run.settings,
                &tgt_server.nodes,
                step.scan_count,
                &mut pruned,
                progress,
            )
            .await?;
        run.report.absorb(pruned);
    }
    copy_pass(&mut run, &src_server.nodes, step.scan_count, progress).await?;
    if stale > 0 && !step.dry_run {
        // The target held data before the run: a source key that went away (expired) after the
        // first pass checked it, and before the copy pass's scan reached it, left its stale
        // copy behind. A second pass, after the copy, compares again. (An empty target, the
        // usual first migration, holds nothing stale and is not scanned twice.)
        let mut pruned = run.report.part();
        run.pair
            .prune(
                &run.settings,
                &tgt_server.nodes,
                step.scan_count,
                &mut pruned,
                progress,
            )
            .await?;
        run.report.absorb(pruned);
    }
    let mut report = run.report;

    // 6. complete
    let complete = step.complete_include() && report.unrepresentable == 0;
    report.marker = if step.dry_run {
        match step.kind {
            StepKind::Rollback => MarkerOutcome::Kept,
            _ => MarkerOutcome::NotWrittenDryRun,
        }
    } else {
        // A rollback that could not copy everything still completes (the legacy bots may
        // start), but it is no exact copy: the cluster side may then only be deleted once they
        // ran on it.
        let exact = step.mirror && report.unrepresentable == 0;
        let marker = match step.kind {
            StepKind::Rollback if complete => MarkerOp::Delete,
            StepKind::Rollback => MarkerOp::Keep,
            _ if complete => MarkerOp::Set,
            _ => MarkerOp::Keep,
        };
        let done = step.complete_include();
        if done {
            let mut record = tgt_rec
                .current
                .clone()
                .ok_or_else(|| crate::plan::misuse("the target's record was not written"))?;
            record.phase = Phase::Complete;
            record.exact = exact;
            record.at_ms = server_ms(source, &first).await?;
            tgt_rec.put(record, marker).await?;
            if let Some(mut record) = src_rec.current.clone() {
                record.phase = Phase::Complete;
                src_rec.put(record, MarkerOp::Keep).await?;
            }
        }
        match (step.kind, done, complete, tgt_marker.is_some()) {
            (StepKind::Rollback, _, false, _) => MarkerOutcome::Kept,
            (StepKind::Rollback, _, true, true) => MarkerOutcome::Removed,
            (StepKind::Rollback, _, true, false) => MarkerOutcome::Absent,
            (_, false, _, _) => MarkerOutcome::NotWrittenPartial,
            (_, true, _, true) => MarkerOutcome::AlreadySet,
            (_, true, _, false) => MarkerOutcome::Written,
        }
    };

    // 7. delete the source
    if step.delete_source && !step.dry_run && complete {
        let doomed = Side {
            e: source,
            server: &src_server,
            ks: src.clone(),
        };
        let other = Side {
            e: target,
            server: &tgt_server,
            ks: tgt.clone(),
        };
        let deleted =
            cleanup::run(doomed, other, separate, false, step.scan_count, progress).await?;
        report.source_deleted = deleted.total();
    }
    report.elapsed = elapsed(started_ms, server_ms(source, &first).await?);
    Ok(report)
}

/// One pass over every master of the source: each `SCAN` page is copied while the next is read.
async fn copy_pass<S: Executor, T: Executor>(
    run: &mut Copier<'_, S, T>,
    nodes: &[Option<String>],
    scan_count: u32,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<(), Error> {
    let source = run.pair.source;
    let total = dbsize(source, nodes).await?;
    let pattern = run.pair.src.prefix_pattern();
    for node in nodes {
        let start = Bytes::from_static(b"0");
        let mut page = scan_page(source, node, &start, &pattern, scan_count).await?;
        loop {
            let (next, keys) = std::mem::take(&mut page);
            let last = next.as_ref() == b"0";
            if last {
                run.page(keys).await?;
            } else {
                let (copied, fetched) = futures_util::future::join(
                    run.page(keys),
                    scan_page(source, node, &next, &pattern, scan_count),
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
            if last {
                break;
            }
        }
    }
    Ok(())
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
