//! `rollback_to_legacy_layout`: copies a cluster-layout keyspace (on one node or on every
//! master of a cluster) back into the legacy layout of a single node, mirroring by default.
//! The phases are in [`super::step`].

use crate::error::Error;
use crate::executor::Executor;

use super::lifecycle::StepKind;
use super::step::{self, CopyStep};
use super::{MigrationReport, Progress, RollbackOptions};

/// Copies the cluster-layout keyspace of `options.prefix` on `source` (a single node, or a
/// cluster: every master is scanned) into the legacy layout of `options.target_prefix()` on
/// `target`, a single node (for an in-place rollback, pass the same client twice).
///
/// With `mirror` (the default) the legacy target is made to match the source: what differs is
/// replaced, and legacy data the source no longer holds is deleted, in every namespace the
/// rollback copies (a schedule becomes a deleted marker that keeps its token; fences and terms
/// are only raised). A complete rollback removes the target's layout marker, so a
/// cluster-layout store started there by mistake refuses the restored data. The lifecycle
/// refuses a rollback into a legacy side the bots already run on: to delete the cluster side
/// then, use [`delete_abandoned_side`](super::delete_abandoned_side).
pub async fn rollback_to_legacy_layout<S: Executor, T: Executor>(
    source: &S,
    target: &T,
    options: &RollbackOptions,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<MigrationReport, Error> {
    let step = CopyStep {
        kind: StepKind::Rollback,
        prefix: options.prefix.clone(),
        target_prefix: options.target_prefix().to_owned(),
        other_server: options.other_server,
        mirror: options.mirror,
        overwrite: false,
        dry_run: options.dry_run,
        include: None,
        allow_live: options.allow_live,
        delete_source: options.delete_source,
        scan_count: options.scan_count,
    };
    step::run(source, target, step, progress).await
}
