//! `migrate_to_cluster_layout`: copies a legacy-layout keyspace into the cluster layout, in
//! place or into another server or prefix. The rules are in the module docs of
//! [`migrate`](super) and in `docs/migration.md`; the phases in [`super::step`].

use crate::error::Error;
use crate::executor::Executor;

use super::lifecycle::StepKind;
use super::step::{self, CopyStep};
use super::{MigrateOptions, MigrationReport, Progress};

/// Copies the legacy-layout keyspace of `options.prefix` on `source` into the cluster layout of
/// `options.target_prefix()` on `target` (for an in-place run, pass the same client twice).
///
/// Refuses with [`Error::Refused`] before writing anything when bots look live (unless
/// `allow_live`), when the lifecycle records show the step unsafe (the cluster side went live
/// since the last copy: a copy would bring back what its bots deleted), when the source is a
/// cluster, for an in-place run of a braced prefix, and when the target's marker holds another
/// layout. With `mirror` (the default) the target ends up holding exactly the source's data;
/// with `delete_source`, the source is then deleted by the cleanup step. Any transport error
/// ends the run: it is idempotent, so run it again.
pub async fn migrate_to_cluster_layout<S: Executor, T: Executor>(
    source: &S,
    target: &T,
    options: &MigrateOptions,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<MigrationReport, Error> {
    let step = CopyStep {
        kind: StepKind::Migrate,
        prefix: options.prefix.clone(),
        target_prefix: options.target_prefix().to_owned(),
        other_server: options.other_server,
        mirror: options.mirror,
        overwrite: options.overwrite,
        dry_run: options.dry_run,
        include: options.include.clone(),
        allow_live: options.allow_live,
        delete_source: options.delete_source,
        scan_count: options.scan_count,
    };
    step::run(source, target, step, progress).await
}
