//! `botmesh-redis migrate`, `rollback` and `cleanup`: the layout moves and the deletion of the
//! side the bots left, with a progress bar and the report as tables.

use std::time::Instant;

use botmesh_redis_tokio::migrate::lifecycle::CopyId;
use botmesh_redis_tokio::migrate::{
    delete_abandoned_side, migrate_to_cluster_layout, rollback_to_legacy_layout, CleanupOptions,
    CleanupReport, MigrateOptions, MigrationReport, Progress, RollbackOptions,
};
use botmesh_redis_tokio::{Client, ClientOptions, Layout};
use indicatif::ProgressBar;

use crate::connection::{describe_cluster, describe_url};
use crate::output::{progress, seconds, set_total, Fields, Table};
use crate::{connect, connect_with, CleanupArgs, Failure, MigrateArgs, RollbackArgs};

/// Runs `migrate` and prints its report.
pub(crate) async fn run_migrate(args: &MigrateArgs, quiet: bool) -> Result<(), Failure> {
    let source = connect(&args.connection).await?;
    let target_options = match (&args.target_url, args.target_cluster.is_empty()) {
        (Some(url), _) => Some(ClientOptions::url(url.clone())),
        (None, false) => Some(ClientOptions::cluster(args.target_cluster.clone())),
        (None, true) => None,
    };
    let target = match target_options {
        Some(base) => {
            let options = args.connection.target_options(base, &args.target);
            Some(connect_with(options).await?)
        }
        None => None,
    };
    let options = MigrateOptions {
        prefix: args.prefix.clone(),
        target_prefix: args.target_prefix.clone(),
        // The servers tell whether they are one (a --target-url may name the source's node).
        other_server: None,
        mirror: !args.no_mirror,
        dry_run: args.dry_run,
        include: args.include.clone(),
        overwrite: args.overwrite,
        allow_live: args.allow_live,
        delete_source: args.delete_source,
        scan_count: args.scan_count,
    };
    let place = match (&args.target_url, args.target_cluster.is_empty()) {
        (Some(url), _) => format!(
            "from {} to {}",
            args.connection.describe(),
            describe_url(url)
        ),
        (None, false) => format!(
            "from {} to cluster {}",
            args.connection.describe(),
            args.target_cluster
                .iter()
                .map(|s| describe_url(s))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        (None, true) => format!("in place on {}", args.connection.describe()),
    };
    println!(
        "migrate: prefix {:?} (legacy) -> prefix {:?} (cluster:v1), {place}, {}{}",
        options.prefix,
        options.target_prefix(),
        if options.mirror {
            "mirror"
        } else {
            "copy only"
        },
        if options.dry_run { ", dry run" } else { "" }
    );
    let bar = progress(quiet, "migrating");
    let mut on_progress = progress_callback(bar.clone());
    let started = Instant::now();
    let result = match &target {
        Some(target) => {
            migrate_to_cluster_layout(&source, target, &options, &mut on_progress).await
        }
        None => migrate_to_cluster_layout(&source, &source, &options, &mut on_progress).await,
    };
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    close(source, target).await;
    let mut report = result?;
    // The core measures on the source server's clock; the operator reads this process's.
    report.elapsed = elapsed;
    print!("{}", render(&report));
    complete(&report, options.delete_source)
}

/// A run that left keys of the source out (`unreadable`, `unrepresentable`) completed (the
/// bots may start on the target) but is not a success for a script: the target lacks those
/// keys, and the source was kept whatever `--delete-source` asked (exit 4).
fn complete(report: &MigrationReport, delete_source: bool) -> Result<(), Failure> {
    if report.is_exact() {
        return Ok(());
    }
    let kept = if delete_source {
        "; --delete-source was not carried out: the source is kept"
    } else {
        ""
    };
    Err(Failure::Incomplete(format!(
        "{} keys were not copied ({} unreadable, {} unrepresentable; examples above): the \
         target lacks them{kept}",
        report.unreadable + report.unrepresentable,
        report.unreadable,
        report.unrepresentable,
    )))
}

/// Runs `rollback` and prints its report.
pub(crate) async fn run_rollback(args: &RollbackArgs, quiet: bool) -> Result<(), Failure> {
    let source = connect(&args.connection).await?;
    let target = match &args.target_url {
        Some(url) => {
            let options = args
                .connection
                .target_options(ClientOptions::url(url.clone()), &args.target);
            Some(connect_with(options).await?)
        }
        None => None,
    };
    let options = RollbackOptions {
        prefix: args.prefix.clone(),
        target_prefix: args.target_prefix.clone(),
        other_server: None,
        mirror: !args.no_mirror,
        dry_run: args.dry_run,
        delete_source: args.delete_source,
        allow_live: args.allow_live,
        scan_count: args.scan_count,
    };
    let place = match &args.target_url {
        Some(url) => format!(
            "from {} to {}",
            args.connection.describe(),
            describe_url(url)
        ),
        None => format!("in place on {}", args.connection.describe()),
    };
    println!(
        "rollback: prefix {:?} (cluster:v1) -> prefix {:?} (legacy), {place}, {}{}",
        options.prefix,
        options.target_prefix(),
        if options.mirror {
            "mirror"
        } else {
            "copy only"
        },
        if options.dry_run { ", dry run" } else { "" }
    );
    let bar = progress(quiet, "rolling back");
    let mut on_progress = progress_callback(bar.clone());
    let started = Instant::now();
    let result = match &target {
        Some(target) => {
            rollback_to_legacy_layout(&source, target, &options, &mut on_progress).await
        }
        None => rollback_to_legacy_layout(&source, &source, &options, &mut on_progress).await,
    };
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    close(source, target).await;
    let mut report = result?;
    report.elapsed = elapsed;
    print!("{}", render(&report));
    complete(&report, options.delete_source)
}

/// Runs `cleanup` and prints its report.
pub(crate) async fn run_cleanup(args: &CleanupArgs, quiet: bool) -> Result<(), Failure> {
    let doomed = connect(&args.connection).await?;
    let other_options = match (&args.other_url, args.other_cluster.is_empty()) {
        (Some(url), _) => Some(ClientOptions::url(url.clone())),
        (None, false) => Some(ClientOptions::cluster(args.other_cluster.clone())),
        (None, true) => None,
    };
    let other = match other_options {
        Some(base) => {
            let options = args.connection.target_options(base, &args.target);
            Some(connect_with(options).await?)
        }
        None => None,
    };
    let options = CleanupOptions {
        prefix: args.prefix.clone(),
        layout: args.layout.into(),
        other_prefix: args.other_prefix.clone(),
        other_server: None,
        dry_run: args.dry_run,
        allow_live: args.allow_live,
        scan_count: args.scan_count,
    };
    let other_layout = match options.layout {
        Layout::Legacy => "cluster:v1",
        Layout::Cluster => "legacy",
    };
    let other_place = match (&args.other_url, args.other_cluster.is_empty()) {
        (Some(url), _) => describe_url(url),
        (None, false) => describe_cluster(&args.other_cluster),
        (None, true) => "in place".to_owned(),
    };
    println!(
        "cleanup: delete prefix {:?} ({}) on {}; the data is on prefix {:?} ({other_layout}), \
         {other_place}{}",
        options.prefix,
        options.layout,
        args.connection.describe(),
        options.other_prefix(),
        if options.dry_run { ", dry run" } else { "" }
    );
    let bar = progress(quiet, "deleting");
    let mut on_progress = progress_callback(bar.clone());
    let started = Instant::now();
    let result = match &other {
        Some(other) => delete_abandoned_side(&doomed, other, &options, &mut on_progress).await,
        None => delete_abandoned_side(&doomed, &doomed, &options, &mut on_progress).await,
    };
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    close(doomed, other).await;
    let mut report = result?;
    report.elapsed = elapsed;
    print!("{}", render_cleanup(&report));
    Ok(())
}

/// The cleanup's report: keys deleted per namespace, what was left and why.
pub(crate) fn render_cleanup(report: &CleanupReport) -> String {
    let mut out = String::from("\n");
    let mut table = Table::new([
        if report.dry_run {
            "would delete"
        } else {
            "deleted"
        },
        "keys",
    ]);
    for (ns, n) in &report.deleted {
        table.row([ns.name().to_owned(), n.to_string()]);
    }
    if report.deleted.is_empty() {
        out.push_str("  (nothing to delete)\n");
    } else {
        table.row(["total".to_owned(), report.total().to_string()]);
        out.push_str(&table.render());
    }
    out.push('\n');
    let mut fields = Fields::new();
    fields.add("keys scanned", report.scanned);
    fields.add("orphans left", report.orphans);
    fields.add("unknown keys left", report.unknown);
    fields.add("shared names kept (in place)", report.shared_kept);
    fields.add("elapsed", seconds(report.elapsed));
    out.push_str(&fields.render());
    if !report.examples.is_empty() {
        out.push_str("\nexamples\n");
        for (what, keys) in &report.examples {
            out.push_str(&format!("  {what}: {}\n", keys.join(", ")));
        }
    }
    out
}

async fn close(source: Client, target: Option<Client>) {
    source.close().await;
    if let Some(target) = target {
        target.close().await;
    }
}

/// The migration's progress on the bar: keys scanned out of the `DBSIZE` total, and the phase.
fn progress_callback(bar: ProgressBar) -> impl FnMut(&Progress) + Send {
    move |p: &Progress| {
        if p.total > 0 {
            set_total(&bar, p.total, "keys scanned");
        }
        bar.set_position(p.scanned);
        bar.set_message(format!("{}, {} moved", p.phase, p.moved));
    }
}

/// The report: per namespace, what was not copied, the problems and their examples, the marker
/// and the elapsed time.
pub(crate) fn render(report: &MigrationReport) -> String {
    let mut out = String::from("\n");
    let mut table = Table::new(["namespace", "copied", "kept", "overwritten", "pruned"]);
    let mut total = [0u64; 4];
    for (ns, c) in &report.namespaces {
        let row = [c.copied, c.kept, c.overwritten, c.pruned];
        for (t, n) in total.iter_mut().zip(row) {
            *t += n;
        }
        table.row(
            [ns.name().to_owned()]
                .into_iter()
                .chain(row.map(|n| n.to_string())),
        );
    }
    if table.is_empty() {
        out.push_str("  (nothing to copy)\n");
    } else {
        table.row(
            ["total".to_owned()]
                .into_iter()
                .chain(total.map(|n| n.to_string())),
        );
        out.push_str(&table.render());
    }
    if !report.not_copied.is_empty() {
        out.push('\n');
        let mut table = Table::new(["not copied (by design)", "keys"]);
        for (ns, n) in &report.not_copied {
            table.row([ns.name().to_owned(), n.to_string()]);
        }
        out.push_str(&table.render());
    }
    out.push('\n');
    let mut fields = Fields::new();
    fields.add("keys scanned", report.scanned);
    fields.add("orphans", report.orphans);
    fields.add("foreign items", report.foreign_items);
    fields.add("shared items", report.shared_items);
    fields.add("dangling", report.dangling);
    fields.add("unreadable", report.unreadable);
    fields.add("unrepresentable", report.unrepresentable);
    fields.add("unknown", report.unknown);
    fields.add("target-layout keys", report.target_layout);
    fields.add("source keys deleted", report.source_deleted);
    out.push_str(&fields.render());
    if !report.examples.is_empty() {
        out.push_str("\nexamples\n");
        for (what, keys) in &report.examples {
            out.push_str(&format!("  {what}: {}\n", keys.join(", ")));
        }
    }
    out.push('\n');
    let mut fields = Fields::new();
    let target = match report.from {
        Layout::Legacy => "cluster:v1",
        Layout::Cluster => "legacy",
    };
    let handled: [u64; 3] = report.namespaces.values().fold([0; 3], |[c, k, o], n| {
        [c + n.copied, k + n.kept, o + n.overwritten]
    });
    let [copied, kept, overwritten] = handled;
    fields.add(
        "result",
        if report.dry_run {
            format!(
                "dry run, nothing written: {} keys would be handled ({copied} copied, {kept} \
                 kept, {overwritten} overwritten)",
                report.moved()
            )
        } else {
            format!(
                "{} keys handled into the {target} layout ({copied} copied, {kept} kept, \
                 {overwritten} overwritten)",
                report.moved()
            )
        },
    );
    fields.add(
        "copy",
        match report.copy {
            CopyId::Resume(_) => "the one both sides' records name, run again",
            CopyId::New => "a new copy",
        },
    );
    fields.add("marker", &report.marker);
    fields.add("elapsed", seconds(report.elapsed));
    out.push_str(&fields.render());
    out
}
