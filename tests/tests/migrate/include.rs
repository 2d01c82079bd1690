//! `include`: a run limited to some namespaces copies only those, and leaves the layout marker
//! unset (so a cluster-layout store still refuses the prefix); a later complete run copies the
//! rest, keeps what is there, and writes the marker.

use std::collections::BTreeMap;

use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, Counts, MarkerOutcome, MigrateOptions, MigrationReport, Namespace,
};
use botmesh_redis_core::{Error, Layout};
use botmesh_redis_core::{Store, StoreOptions};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{
    assert_same_data, digest, seeds, write_generated, Digest, Expected, Node,
};
use botmesh_redis_tests::{both_drivers, unique_prefix};

const SEEDS: &[u64] = &[61];

fn pick<T: Default>(keep: bool, value: T) -> T {
    if keep {
        value
    } else {
        T::default()
    }
}

/// The part of `d` that a run limited to `include` copies (plus, in place, the names both
/// layouts share, which the cluster reading sees whatever was copied).
fn limited(d: &Digest, include: &[Namespace], in_place: bool) -> Digest {
    let has = |ns| include.contains(&ns);
    let kinds: Vec<RecordKind> = RecordKind::ALL
        .into_iter()
        .filter(|k| k != &RecordKind::Schedule && has(Namespace::of_record(*k)))
        .collect();
    let shared = |ns| in_place || has(ns);
    Digest {
        messages: pick(has(Namespace::Messages), d.messages.clone()),
        drains: pick(has(Namespace::Messages), d.drains.clone()),
        records: d
            .records
            .iter()
            .filter(|((kind, _), _)| kinds.contains(kind))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        schedules: pick(has(Namespace::Schedules), d.schedules.clone()),
        user_data: pick(has(Namespace::UserData), d.user_data.clone()),
        fences: pick(has(Namespace::Fences), d.fences.clone()),
        terms: pick(has(Namespace::Terms), d.terms.clone()),
        cursors: pick(shared(Namespace::Cursors), d.cursors.clone()),
        conversations: pick(shared(Namespace::Conversations), d.conversations.clone()),
        leases: pick(shared(Namespace::Leases), d.leases.clone()),
        durable: pick(shared(Namespace::Durability), d.durable.clone()),
        ..Digest::default()
    }
}

/// The report of the limited run: only the included namespaces, all copied.
fn check_limited_report(
    report: &MigrationReport,
    expected: &Expected,
    include: &[Namespace],
    separate: bool,
) {
    let all = expected.forward_namespaces(separate);
    let wanted: BTreeMap<Namespace, Counts> = all
        .into_iter()
        .filter(|(ns, _)| {
            include.contains(ns)
                || (*ns == Namespace::Drains && include.contains(&Namespace::Messages))
        })
        .collect();
    assert_eq!(report.namespaces, wanted, "{report:#?}");
    assert_eq!(report.marker, MarkerOutcome::NotWrittenPartial);
}

async fn limited_then_complete<R: Runtime>(target: Option<Node<'static>>, include: &[Namespace]) {
    let source = Node::shared_single();
    let tgt_node = target.unwrap_or(source);
    let separate = target.is_some();
    let src = source.client::<R>().await;
    let tgt = tgt_node.client::<R>().await;
    for seed in seeds(SEEDS) {
        let prefix = unique_prefix("mig-include");
        let generated = write_generated(source, &prefix, seed, 1);
        let before = digest(source, Layout::Legacy, &prefix);
        let mut options = MigrateOptions::new(prefix.as_str());
        options.include = Some(include.to_vec());
        let report = migrate_to_cluster_layout(&src, &tgt, &options, &mut |_| {})
            .await
            .unwrap();
        check_limited_report(&report, &generated.expected, include, separate);
        let partial = digest(tgt_node, Layout::Cluster, &prefix);
        assert_same_data(
            &format!("seed {seed}: limited to {include:?}"),
            &limited(&before, include, !separate),
            &partial,
        );
        assert_eq!(partial.marker, None);
        if !separate {
            // The start guard stays armed: the prefix still holds legacy data and no marker.
            let store = Store::new(
                tgt.clone(),
                StoreOptions::new(prefix.as_str()).layout(Layout::Cluster),
            )
            .unwrap();
            assert!(
                matches!(store.start().await, Err(Error::LegacyDataFound { .. })),
                "seed {seed}: a cluster-layout store started on a partly migrated prefix"
            );
        }

        options.include = None;
        let report = migrate_to_cluster_layout(&src, &tgt, &options, &mut |_| {})
            .await
            .unwrap();
        assert_eq!(report.marker, MarkerOutcome::Written);
        for ns in include {
            if let Some(counts) = report.namespaces.get(ns) {
                // The complete run mirrors: what the limited run wrote compares equal and is
                // kept. DUMP payloads compare as bytes, and a set's payload lists its members
                // in the order of its hash table, which a RESTORE may change: an equal set can
                // count as overwritten (with the same value).
                let dumped = matches!(ns, Namespace::Durability | Namespace::Conversations);
                assert_eq!(
                    (counts.copied, if dumped { 0 } else { counts.overwritten }),
                    (0, 0),
                    "seed {seed}: {ns} was copied by the limited run: {report:#?}"
                );
            }
        }
        let complete = digest(tgt_node, Layout::Cluster, &prefix);
        assert_same_data(&format!("seed {seed}: complete"), &before, &complete);
        complete.assert_indexes_agree();
    }
}

async fn in_place<R: Runtime>() {
    limited_then_complete::<R>(
        None,
        &[Namespace::Messages, Namespace::Chats, Namespace::Fences],
    )
    .await;
}

async fn into_the_cluster<R: Runtime>() {
    limited_then_complete::<R>(
        Some(Node::shared_cluster()),
        &[
            Namespace::UserData,
            Namespace::Checkpoints,
            Namespace::Schedules,
            Namespace::Cursors,
            Namespace::Durability,
        ],
    )
    .await;
}

both_drivers!(in_place, into_the_cluster);
