//! A copy step, whichever its direction (a migration or a rollback), in named phases:
//!
//! 1. **sides** ([`Sides::read`]): what each server is (one node or a cluster; one server or
//!    two, from their `run_id`s), and each side's lifecycle record and marker;
//! 2. **checks** ([`Sides::check`]): live bots, then the lifecycle's decision
//!    ([`lifecycle::copy`]): every refusal comes before anything is written;
//! 3. **records** ([`Sides::begin`]): the target's record says "copying" (before any datum is
//!    written, so a store will not start on a half-made copy), then the source's;
//! 4. **prune** (a mirror): target data the source no longer holds is removed;
//! 5. **copy** ([`Sides::transfer`]): the source's keyspace, page by page;
//! 6. **complete** ([`Sides::complete`]): the target's record and its marker in one call (the
//!    marker written last), then the source's record;
//! 7. **delete the source** (`delete_source`): the cleanup step on the source, which only
//!    deletes ([`super::cleanup`]).
//!
//! What each phase decides is a pure function below it ([`misdirected`], [`misconfigured`],
//! [`next`], [`copy_id`], [`beginning`], [`marker_op`], [`marker_outcome`]), table-tested in
//! this file; the phases only read, ask, and write.

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::{Keyspace, Layout, CLUSTER_V1};
use crate::request::{Access, Request};
use crate::scan::gained_slots;

use super::cleanup::{self, Side};
use super::copy::Copier;
use super::engine::{elapsed, layout, send_ok, server_ms};
use super::lifecycle::{self, CopyId, Phase, Record, Role, StepKind, Unsafe, View};
use super::pair::{Pair, Settings};
use super::sides::{
    other_server, refuse_if_live, server, sibling, view, MarkerOp, Recorded, Server, Watched,
};
use super::{CleanupReport, MarkerOutcome, MigrationReport, Namespace, Progress, Refusal};

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

    /// Whether every copied namespace is included.
    fn complete_include(&self) -> bool {
        self.include
            .as_ref()
            .is_none_or(|list| Namespace::COPIED.iter().all(|ns| list.contains(ns)))
    }
}

/// Runs a copy step. See the module docs.
pub(super) async fn run<S: Executor, T: Executor>(
    source: &S,
    target: &T,
    step: CopyStep,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<MigrationReport, Error> {
    let sides = Sides::read(source, target, &step).await?;
    let decision = match sides.check(&step, progress).await? {
        Next::FinishDeletion => return sides.finish_deletion(&step, progress).await,
        Next::Copy(decision) => decision,
    };
    let started_ms = sides.source_ms().await?;
    let (src_record, tgt_record) = sides.records();
    let copy = copy_id(
        decision,
        src_record.as_ref(),
        tgt_record.as_ref(),
        started_ms,
    );
    let mut records = sides.begin(&step, copy, started_ms).await?;
    let mut report = MigrationReport::new(sides.src.layout(), step.dry_run);
    report.copy = decision;
    report.mirrored = step.mirror;
    let mut report = sides.transfer(&step, report, progress).await?;
    report.marker = sides.complete(&step, &mut records, &report).await?;
    // The source goes only when the target holds all of it: a key the target could not
    // represent, or whose payload it refused (`unreadable`: a newer server's), lives on the
    // source alone.
    let exact = step.complete_include() && report.is_exact();
    if step.delete_source && !step.dry_run && exact {
        let deleted = sides
            .delete_source(false, step.scan_count, progress)
            .await?;
        report.source_deleted = deleted.total();
    }
    report.elapsed = elapsed(started_ms, sides.source_ms().await?);
    Ok(report)
}

/// What the sides phase found: both servers, keyspaces and lifecycle views.
struct Sides<'a, S, T> {
    source: &'a S,
    target: &'a T,
    src: Keyspace,
    tgt: Keyspace,
    src_server: Server,
    tgt_server: Server,
    /// The target is another server or prefix: the names both layouts share are copied.
    separate: bool,
    src_view: View,
    tgt_view: View,
    /// The target's marker was set before the step.
    had_marker: bool,
}

/// Both sides' records as a step holds them while it writes them.
struct Records<'a, S, T> {
    src: Recorded<'a, S>,
    tgt: Recorded<'a, T>,
}

/// What the checks let a step do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Copy (a new copy, or a rerun of the one both records name).
    Copy(CopyId),
    /// Only finish the deletion of a source a killed `delete_source` run began deleting.
    FinishDeletion,
}

impl<'a, S: Executor, T: Executor> Sides<'a, S, T> {
    /// Phase 1: what each side is, refusing a step whose shape is wrong before reading more.
    async fn read(source: &'a S, target: &'a T, step: &CopyStep) -> Result<Self, Error> {
        let (from, to) = step.layouts();
        let src = Keyspace::new(from, step.prefix.clone())?;
        let src_server = server(source).await?;
        let tgt_server = server(target).await?;
        if let Some(refusal) =
            misdirected(step.kind, src_server.is_cluster(), tgt_server.is_cluster())
        {
            return Err(refusal.into());
        }
        let separate = other_server(&src_server, &tgt_server, step.other_server)?
            || step.prefix != step.target_prefix;
        if let Some(refusal) = misconfigured(step, separate) {
            return Err(refusal.into());
        }
        let tgt = Keyspace::new(to, step.target_prefix.clone())?;
        let src_view = view(source, &src_server, &src, false).await?;
        let tgt_view = view(target, &tgt_server, &tgt, to == Layout::Legacy).await?;
        let marker = read_marker(target, &tgt).await?;
        if let Some(refusal) = foreign_marker(&tgt, marker.as_deref()) {
            return Err(refusal.into());
        }
        Ok(Sides {
            source,
            target,
            src,
            tgt,
            src_server,
            tgt_server,
            separate,
            src_view,
            tgt_view,
            had_marker: marker.is_some(),
        })
    }

    /// Phase 2: live bots, the lifecycle's decision, and the names both layouts share.
    async fn check(
        &self,
        step: &CopyStep,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<Next, Error> {
        if !step.allow_live {
            let source = Watched {
                e: self.source,
                ks: &self.src,
                heartbeats: true,
            };
            let target = Watched {
                e: self.target,
                ks: &self.tgt,
                heartbeats: self.separate,
            };
            refuse_if_live(source, Some(target), progress).await?;
        }
        let deleting = matches!(&self.src_view.record, Ok(Some(r)) if r.phase == Phase::Deleting);
        let decision = lifecycle::copy(&self.src_view, &self.tgt_view);
        let next = next(decision, step.delete_source, deleting)
            .map_err(|reason| self.refusal(step.kind, reason))?;
        let sibling = sibling(
            self.src.layout(),
            &step.target_prefix,
            self.separate,
            self.tgt_server.is_cluster(),
        );
        if let (Next::Copy(_), Some(sibling)) = (next, sibling) {
            let data = sibling.layout() == Layout::Legacy;
            let sibling_view = view(self.target, &self.tgt_server, &sibling, data).await?;
            lifecycle::shared_names(&sibling_view)
                .map_err(|reason| self.refusal(step.kind, reason))?;
        }
        Ok(next)
    }

    /// Phase 3: both records say "copying", the target's first.
    async fn begin(
        &self,
        step: &CopyStep,
        copy: u64,
        now_ms: i64,
    ) -> Result<Records<'a, S, T>, Error> {
        let (src_record, tgt_record) = self.records();
        let mut records = Records {
            src: Recorded {
                e: self.source,
                ks: self.src.clone(),
                current: src_record,
            },
            tgt: Recorded {
                e: self.target,
                ks: self.tgt.clone(),
                current: tgt_record,
            },
        };
        if step.dry_run {
            return Ok(records);
        }
        let peer = described(&self.src, &self.src_server);
        let tgt = &mut records.tgt;
        let record = beginning(
            tgt.current.as_ref(),
            copy,
            Role::Target,
            step.mirror,
            peer,
            now_ms,
        );
        tgt.put(record, MarkerOp::Keep).await?;
        let peer = described(&self.tgt, &self.tgt_server);
        let src = &mut records.src;
        let record = beginning(src.current.as_ref(), copy, Role::Source, true, peer, now_ms);
        src.put(record, MarkerOp::Keep).await?;
        Ok(records)
    }

    /// Phases 4 and 5: a mirror's prune pass, the copy pass, and a second prune pass when the
    /// target held data before the run.
    async fn transfer(
        &self,
        step: &CopyStep,
        report: MigrationReport,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<MigrationReport, Error> {
        let mut run = Copier {
            pair: Pair {
                source: self.source,
                target: self.target,
                src: self.src.clone(),
                tgt: self.tgt.clone(),
                src_cluster: self.src_server.is_cluster(),
                tgt_cluster: self.tgt_server.is_cluster(),
                dry_run: step.dry_run,
            },
            settings: Settings {
                mirror: step.mirror,
                overwrite: step.overwrite,
                dry_run: step.dry_run,
                separate: self.separate,
                include: step.include.clone(),
            },
            own_other: Keyspace::new(self.tgt.layout(), step.prefix.clone()).ok(),
            report,
        };
        let (tgt_nodes, count) = (&self.tgt_server.nodes, step.scan_count);
        let stale = match step.mirror {
            true => run.prune(tgt_nodes, count, progress).await?,
            false => 0,
        };
        run.copy_all(&self.src_server.nodes, count, progress)
            .await?;
        if stale > 0 && !step.dry_run {
            // The target held data before the run: a source key that went away (expired) after
            // the first pass checked it, and before the copy pass's scan reached it, left its
            // stale copy behind. A second pass, after the copy, compares again. (An empty
            // target, the usual first migration, holds nothing stale and is not scanned twice.)
            run.prune(tgt_nodes, count, progress).await?;
        }
        // Slots that moved since the masters were listed at the step's start (a reshard, a
        // master added) may have left keys unvisited by the passes: uncopied, or stale copies
        // unpruned. Then the step stops as a cut one does, for its rerun.
        for (side, server, now) in [
            ("source", &self.src_server, layout(self.source).await?),
            ("target", &self.tgt_server, layout(self.target).await?),
        ] {
            if !gained_slots(&server.owners, &now.1).is_empty() {
                return Err(Error::SlotsMoved { side });
            }
        }
        Ok(run.report)
    }

    /// Phase 6: the target's record says "complete", with its marker in the same call; then the
    /// source's record.
    async fn complete(
        &self,
        step: &CopyStep,
        records: &mut Records<'a, S, T>,
        report: &MigrationReport,
    ) -> Result<MarkerOutcome, Error> {
        let done = step.complete_include();
        let complete = done && report.unrepresentable == 0;
        let outcome = marker_outcome(step.kind, step.dry_run, done, complete, self.had_marker);
        if step.dry_run || !done {
            return Ok(outcome);
        }
        let mut record = records
            .tgt
            .current
            .clone()
            .ok_or_else(|| crate::plan::misuse("the target's record was not written"))?;
        record.phase = Phase::Complete;
        // A copy that could not carry everything (keys the target cannot represent, payloads
        // it refused) still completes (the bots may start), but it is no exact copy: the
        // source side may then only be deleted once they ran on the target.
        record.exact = step.mirror && report.is_exact();
        record.at_ms = self.source_ms().await?;
        records
            .tgt
            .put(record, marker_op(step.kind, complete))
            .await?;
        if let Some(mut record) = records.src.current.clone() {
            record.phase = Phase::Complete;
            records.src.put(record, MarkerOp::Keep).await?;
        }
        Ok(outcome)
    }

    /// Phase 7: the cleanup step on the source.
    async fn delete_source(
        &self,
        dry_run: bool,
        scan_count: u32,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<CleanupReport, Error> {
        let doomed = Side {
            e: self.source,
            server: &self.src_server,
            ks: self.src.clone(),
        };
        let other = Side {
            e: self.target,
            server: &self.tgt_server,
            ks: self.tgt.clone(),
        };
        cleanup::run(doomed, other, self.separate, dry_run, scan_count, progress).await
    }

    /// A `delete_source` run killed while it deleted the source: the copy is complete, so the
    /// rerun only finishes the deletion (the cleanup decides whether it may).
    async fn finish_deletion(
        &self,
        step: &CopyStep,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<MigrationReport, Error> {
        let mut report = MigrationReport::new(self.src.layout(), step.dry_run);
        report.mirrored = step.mirror;
        report.marker = match step.kind {
            StepKind::Rollback => MarkerOutcome::Kept,
            _ => MarkerOutcome::AlreadySet,
        };
        let deleted = self
            .delete_source(step.dry_run, step.scan_count, progress)
            .await?;
        report.source_deleted = deleted.total();
        Ok(report)
    }

    /// The source server's clock: a step's times are all read there.
    async fn source_ms(&self) -> Result<i64, Error> {
        let first = self.src_server.nodes.first().cloned().flatten();
        server_ms(self.source, &first).await
    }

    /// Both sides' records as read, when they could be.
    fn records(&self) -> (Option<Record>, Option<Record>) {
        let known = |v: &View| v.record.as_ref().ok().cloned().flatten();
        (known(&self.src_view), known(&self.tgt_view))
    }

    fn refusal(&self, step: StepKind, reason: Unsafe) -> Error {
        reason.refusal(step, &self.src_view, &self.tgt_view)
    }
}

/// A step whose direction its servers rule out: a migration reads a legacy keyspace, which no
/// cluster holds, and a rollback writes one.
fn misdirected(kind: StepKind, src_cluster: bool, tgt_cluster: bool) -> Option<Refusal> {
    match kind {
        StepKind::Rollback if tgt_cluster => Some(Refusal::TargetIsCluster),
        StepKind::Migrate if src_cluster => Some(Refusal::SourceIsCluster),
        _ => None,
    }
}

/// A step whose options contradict each other or the layouts.
fn misconfigured(step: &CopyStep, separate: bool) -> Option<Refusal> {
    let (_, to) = step.layouts();
    if to == Layout::Cluster && !separate && step.prefix.contains(['{', '}']) {
        // In place, the braced prefix's legacy keys would read as the cluster layout's tags.
        return Some(Refusal::BracedPrefixInPlace {
            prefix: step.prefix.clone(),
        });
    }
    if step.delete_source && !step.mirror {
        return Some(Refusal::DeleteWithoutMirror);
    }
    if step.delete_source && !step.complete_include() {
        return Some(Refusal::DeleteAfterPartialCopy);
    }
    None
}

/// A target marker that names another layout than the one this step writes.
fn foreign_marker(tgt: &Keyspace, marker: Option<&[u8]>) -> Option<Refusal> {
    let value = marker?;
    (tgt.layout() == Layout::Cluster && value != CLUSTER_V1.as_bytes()).then(|| {
        Refusal::ForeignMarker {
            key: tgt.marker().to_string(),
            value: String::from_utf8_lossy(value).into_owned(),
        }
    })
}

/// What the lifecycle's decision lets the step do: a source its own `delete_source` run began
/// deleting is deleted to the end (and nothing else), rather than refused.
fn next(
    decision: Result<CopyId, Unsafe>,
    delete_source: bool,
    deleting: bool,
) -> Result<Next, Unsafe> {
    match decision {
        Err(Unsafe::SourceDeleted) if delete_source && deleting => Ok(Next::FinishDeletion),
        Err(reason) => Err(reason),
        Ok(copy) => Ok(Next::Copy(copy)),
    }
}

/// The id of the copy a step runs: the one it resumes, or a new one above both sides' copies
/// (and no lower than the source's clock), so "started since this copy" means what it says
/// even between servers whose clocks disagree.
fn copy_id(decision: CopyId, src: Option<&Record>, tgt: Option<&Record>, now_ms: i64) -> u64 {
    match decision {
        CopyId::Resume(copy) => copy,
        CopyId::New => [src, tgt]
            .into_iter()
            .flatten()
            .map(|r| r.copy + 1)
            .fold(u64::try_from(now_ms).unwrap_or(0), u64::max),
    }
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

/// What a complete copy does with the target's marker: a rollback deletes it (the legacy bots
/// may start), a migration sets it; an incomplete copy leaves it.
fn marker_op(kind: StepKind, complete: bool) -> MarkerOp {
    match (kind, complete) {
        (StepKind::Rollback, true) => MarkerOp::Delete,
        (_, true) => MarkerOp::Set,
        (_, false) => MarkerOp::Keep,
    }
}

/// The marker's outcome as the report tells it. `done`: every copied namespace was included;
/// `complete`: and the target layout could hold all of it.
fn marker_outcome(
    kind: StepKind,
    dry_run: bool,
    done: bool,
    complete: bool,
    had_marker: bool,
) -> MarkerOutcome {
    let rollback = kind == StepKind::Rollback;
    match (rollback, dry_run, done, complete, had_marker) {
        (true, true, ..) => MarkerOutcome::Kept,
        (false, true, ..) => MarkerOutcome::NotWrittenDryRun,
        (true, _, _, false, _) => MarkerOutcome::Kept,
        (true, _, _, true, true) => MarkerOutcome::Removed,
        (true, _, _, true, false) => MarkerOutcome::Absent,
        (false, _, false, _, _) => MarkerOutcome::NotWrittenPartial,
        (false, _, true, _, true) => MarkerOutcome::AlreadySet,
        (false, _, true, _, false) => MarkerOutcome::Written,
    }
}

/// The marker's value under `ks`.
async fn read_marker<E: Executor>(e: &E, ks: &Keyspace) -> Result<Option<Bytes>, Error> {
    let get = Request::cmd(Access::Read, "GET").key(ks.marker()).build()?;
    send_ok(e, vec![get])
        .await?
        .pop()
        .map_or(Ok(None), |v| v.into_opt_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(kind: StepKind) -> CopyStep {
        CopyStep {
            kind,
            prefix: "p".into(),
            target_prefix: "p".into(),
            other_server: None,
            mirror: true,
            overwrite: false,
            dry_run: false,
            include: None,
            allow_live: false,
            delete_source: false,
            scan_count: 100,
        }
    }

    fn record(copy: u64, prev: Option<u64>, started: Option<u64>) -> Record {
        Record {
            copy,
            prev,
            role: Role::Target,
            phase: Phase::Complete,
            exact: true,
            peer: "the other side".into(),
            at_ms: 5,
            started,
            started_at_ms: started.map(|s| s as i64 + 1),
            live_after: vec![3],
        }
    }

    #[test]
    fn a_migration_reads_no_cluster_and_a_rollback_writes_none() {
        use StepKind::{Migrate, Rollback};
        let table = [
            (Migrate, false, false, None),
            (Migrate, false, true, None),
            (Migrate, true, false, Some(Refusal::SourceIsCluster)),
            (Rollback, true, false, None),
            (Rollback, false, false, None),
            (Rollback, true, true, Some(Refusal::TargetIsCluster)),
        ];
        for (kind, src, tgt, want) in table {
            assert_eq!(misdirected(kind, src, tgt), want, "{kind:?} {src} {tgt}");
        }
    }

    #[test]
    fn options_that_contradict_each_other_are_refused() {
        let braced = CopyStep {
            prefix: "{p}".into(),
            target_prefix: "{p}".into(),
            ..step(StepKind::Migrate)
        };
        assert_eq!(
            misconfigured(&braced, false),
            Some(Refusal::BracedPrefixInPlace {
                prefix: "{p}".into()
            })
        );
        assert_eq!(misconfigured(&braced, true), None);
        let braced_back = CopyStep {
            prefix: "{p}".into(),
            ..step(StepKind::Rollback)
        };
        assert_eq!(misconfigured(&braced_back, false), None);
        let copy_only = CopyStep {
            mirror: false,
            delete_source: true,
            ..step(StepKind::Migrate)
        };
        assert_eq!(
            misconfigured(&copy_only, true),
            Some(Refusal::DeleteWithoutMirror)
        );
        let partial = CopyStep {
            include: Some(vec![Namespace::Chats]),
            delete_source: true,
            ..step(StepKind::Migrate)
        };
        assert_eq!(
            misconfigured(&partial, true),
            Some(Refusal::DeleteAfterPartialCopy)
        );
        let everything = CopyStep {
            include: Some(Namespace::COPIED.to_vec()),
            delete_source: true,
            ..step(StepKind::Migrate)
        };
        assert_eq!(misconfigured(&everything, true), None);
    }

    #[test]
    fn only_another_layouts_marker_is_foreign() {
        let cluster = Keyspace::new(Layout::Cluster, "p").unwrap();
        let legacy = Keyspace::new(Layout::Legacy, "p").unwrap();
        assert_eq!(foreign_marker(&cluster, None), None);
        assert_eq!(foreign_marker(&cluster, Some(b"cluster:v1")), None);
        assert_eq!(
            foreign_marker(&cluster, Some(b"cluster:v2")),
            Some(Refusal::ForeignMarker {
                key: cluster.marker().to_string(),
                value: "cluster:v2".into()
            })
        );
        assert_eq!(foreign_marker(&legacy, Some(b"cluster:v2")), None);
    }

    #[test]
    fn only_a_deleting_source_of_a_delete_source_run_is_finished() {
        let deleted = || Err(Unsafe::SourceDeleted);
        assert_eq!(next(deleted(), true, true), Ok(Next::FinishDeletion));
        assert_eq!(next(deleted(), false, true), Err(Unsafe::SourceDeleted));
        assert_eq!(next(deleted(), true, false), Err(Unsafe::SourceDeleted));
        assert_eq!(
            next(Err(Unsafe::TargetLive), true, true),
            Err(Unsafe::TargetLive)
        );
        assert_eq!(
            next(Ok(CopyId::New), true, true),
            Ok(Next::Copy(CopyId::New))
        );
        assert_eq!(
            next(Ok(CopyId::Resume(7)), false, false),
            Ok(Next::Copy(CopyId::Resume(7)))
        );
    }

    #[test]
    fn a_new_copy_is_above_both_sides_copies_and_the_clock() {
        let (a, b) = (record(100, None, None), record(250, None, None));
        assert_eq!(copy_id(CopyId::Resume(100), Some(&a), Some(&b), 900), 100);
        assert_eq!(copy_id(CopyId::New, None, None, 900), 900);
        assert_eq!(copy_id(CopyId::New, Some(&a), Some(&b), 900), 900);
        assert_eq!(copy_id(CopyId::New, Some(&a), Some(&b), 120), 251);
        assert_eq!(copy_id(CopyId::New, Some(&b), None, 10), 251);
        // A clock before the epoch reads as 0: the copies still order the ids.
        assert_eq!(copy_id(CopyId::New, None, Some(&a), -5), 101);
    }

    #[test]
    fn a_beginning_keeps_what_bots_did_and_remembers_the_last_copy() {
        let fresh = beginning(None, 9, Role::Source, true, "peer".into(), 40);
        assert_eq!(
            fresh,
            Record {
                copy: 9,
                prev: None,
                role: Role::Source,
                phase: Phase::Copying,
                exact: true,
                peer: "peer".into(),
                at_ms: 40,
                started: None,
                started_at_ms: None,
                live_after: Vec::new(),
            }
        );
        let old = record(4, Some(2), Some(4));
        let next = beginning(Some(&old), 9, Role::Target, false, "peer".into(), 40);
        assert_eq!((next.copy, next.prev), (9, Some(4)));
        assert_eq!((next.started, next.started_at_ms), (Some(4), Some(5)));
        assert_eq!(next.live_after, vec![3]);
        assert!(!next.exact);
        // A rerun of copy 4 keeps the copy before it as `prev`.
        let rerun = beginning(Some(&old), 4, Role::Target, true, "peer".into(), 40);
        assert_eq!((rerun.copy, rerun.prev), (4, Some(2)));
    }

    #[test]
    fn a_complete_copy_sets_or_deletes_the_marker_and_an_incomplete_one_keeps_it() {
        use StepKind::{Migrate, Rollback};
        assert_eq!(marker_op(Migrate, true), MarkerOp::Set);
        assert_eq!(marker_op(Migrate, false), MarkerOp::Keep);
        assert_eq!(marker_op(Rollback, true), MarkerOp::Delete);
        assert_eq!(marker_op(Rollback, false), MarkerOp::Keep);
    }

    #[test]
    fn the_report_tells_what_became_of_the_marker() {
        use MarkerOutcome::*;
        use StepKind::{Migrate, Rollback};
        // (kind, dry run, done, complete, had marker) → outcome
        let table = [
            (Migrate, true, true, true, false, NotWrittenDryRun),
            (Migrate, true, false, false, true, NotWrittenDryRun),
            (Migrate, false, false, false, false, NotWrittenPartial),
            (Migrate, false, true, true, false, Written),
            (Migrate, false, true, true, true, AlreadySet),
            (Migrate, false, true, false, true, AlreadySet),
            (Rollback, true, true, true, true, Kept),
            (Rollback, false, true, false, true, Kept),
            (Rollback, false, false, false, true, Kept),
            (Rollback, false, true, true, true, Removed),
            (Rollback, false, true, true, false, Absent),
        ];
        for (kind, dry, done, complete, had, want) in table {
            assert_eq!(
                marker_outcome(kind, dry, done, complete, had),
                want,
                "{kind:?} dry {dry} done {done} complete {complete} had {had}"
            );
        }
    }
}
