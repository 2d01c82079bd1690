//! `botmesh-redis inspect`: what a prefix holds, per layout and namespace.

use botmesh_redis_tokio::migrate::{inspect_keyspace, KeyspaceReport, Namespace, Progress};
use botmesh_redis_tokio::Client;

use crate::output::{progress, set_total, Fields, Table};
use crate::{connect, Failure, InspectArgs};

/// Runs `inspect` and prints its report.
pub(crate) async fn run(args: &InspectArgs, quiet: bool) -> Result<(), Failure> {
    let client = connect(&args.connection).await?;
    println!(
        "inspect: prefix {:?} on {}",
        args.prefix,
        args.connection.describe()
    );
    let report = scan(&client, &args.prefix, args.scan_count, quiet).await;
    client.close().await;
    print!("{}", render(&report?));
    Ok(())
}

/// `inspect_keyspace` with a bar of the keys scanned out of the nodes' `DBSIZE`.
pub(crate) async fn scan(
    client: &Client,
    prefix: &str,
    scan_count: u32,
    quiet: bool,
) -> Result<KeyspaceReport, Failure> {
    let bar = progress(quiet, "scanning");
    let shown = bar.clone();
    let mut on_page = move |p: &Progress| {
        set_total(&shown, p.total, "keys scanned");
        shown.set_position(p.scanned);
    };
    let report = inspect_keyspace(client, prefix, scan_count, &mut on_page).await;
    bar.finish_and_clear();
    Ok(report?)
}

/// The counts table and the summary lines.
pub(crate) fn render(report: &KeyspaceReport) -> String {
    let mut out = String::from("\n");
    out.push_str(&counts_table(report));
    out.push('\n');
    let mut fields = Fields::new();
    let unknown = if report.unknown_examples.is_empty() {
        report.unknown.to_string()
    } else {
        format!(
            "{} (for example {})",
            report.unknown,
            report.unknown_examples.join(", ")
        )
    };
    fields.add("unknown keys", unknown);
    fields.add("marker", marker(report));
    add_lifecycle(&mut fields, report);
    fields.add(
        "nodes scanned",
        format!("{} ({})", report.nodes.len(), report.nodes.join(", ")),
    );
    fields.add("keys scanned", report.scanned);
    out.push_str(&fields.render());
    out
}

/// One line per lifecycle record under the prefix: what the migration steps recorded of each
/// side (docs/migration.md, "The lifecycle").
pub(crate) fn add_lifecycle(fields: &mut Fields, report: &KeyspaceReport) {
    for (layout, record) in &report.lifecycle {
        let text = match record {
            Ok(r) => r.describe(),
            Err(detail) => format!("unreadable record ({detail})"),
        };
        fields.add(format!("{layout} side"), text);
    }
}

/// The marker's value as shown: `none`, or the value quoted.
pub(crate) fn marker(report: &KeyspaceReport) -> String {
    report
        .marker
        .as_ref()
        .map_or_else(|| "none".to_owned(), |m| format!("{m:?}"))
}

/// One row per namespace that holds keys, with a total row.
fn counts_table(report: &KeyspaceReport) -> String {
    let get =
        |map: &std::collections::BTreeMap<Namespace, u64>, ns| map.get(&ns).copied().unwrap_or(0);
    let mut table = Table::new(["namespace", "legacy", "cluster", "shared"]);
    let mut totals = [0u64; 3];
    for ns in Namespace::ALL {
        let row = [
            get(&report.legacy, ns),
            get(&report.cluster, ns),
            get(&report.shared, ns),
        ];
        if row.iter().all(|&n| n == 0) {
            continue;
        }
        for (total, n) in totals.iter_mut().zip(row) {
            *total += n;
        }
        table.row(
            [ns.name().to_owned()]
                .into_iter()
                .chain(row.map(|n| n.to_string())),
        );
    }
    if table.is_empty() {
        return "  (no key of either layout under the prefix)\n".to_owned();
    }
    table.row(
        ["total".to_owned()]
            .into_iter()
            .chain(totals.map(|n| n.to_string())),
    );
    table.render()
}
