//! Leases copied to another prefix or server: the token is only raised (exactly, past 2^53), a
//! live holder arrives with the time it had left, an expired holder is not copied, and a live
//! holder at the target wins unless `overwrite`. Both directions, both drivers.

use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, Counts, MigrateOptions, MigrationReport,
    Namespace, RollbackOptions,
};
use botmesh_redis_core::{Keyspace, Layout};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{digest, Cmd, Lease, Node, TTL_TOLERANCE_MS};
use botmesh_redis_tests::{both_drivers, unique_prefix};

/// Writes three leases under `from` and two under `to` (both on the shared single node):
///
/// - `live`: token 5, a holder with 60 s left; absent at the target;
/// - `expired`: token 2^53 + 1, a holder whose deadline passed; the target holds 2^53, which a
///   double cannot tell apart;
/// - `contested`: token 3, a live holder; the target holds token 10 and another live holder.
fn seed_leases(node: Node<'_>, from: &Keyspace, to: &Keyspace) -> i64 {
    let now = node.now_ms();
    let lease = |ks: &Keyspace, name: &str, token: &str, holder: Option<(&str, i64)>| {
        let mut cmd = Cmd::new("HSET", ks.lease(name).as_bytes())
            .arg("token")
            .arg(token);
        if let Some((holder, until)) = holder {
            cmd = cmd
                .arg("holder")
                .arg(holder)
                .arg("until")
                .arg(until.to_string());
        }
        cmd
    };
    node.run(&[
        lease(from, "live", "5", Some(("h-live", now + 60_000))),
        lease(
            from,
            "expired",
            "9007199254740993",
            Some(("h-old", now - 5_000)),
        ),
        lease(from, "contested", "3", Some(("h-src", now + 60_000))),
        lease(to, "expired", "9007199254740992", None),
        lease(to, "contested", "10", Some(("h-tgt", now + 90_000))),
    ]);
    now
}

fn check_target(node: Node<'_>, layout: Layout, to: &Keyspace, overwrite: bool) {
    let leases = digest(node, layout, to.prefix()).leases;
    let live = &leases["live"];
    assert_eq!(live.token.as_deref(), Some("5"));
    let (holder, left) = live.holder.clone().expect("the live holder is copied");
    assert_eq!(holder, "h-live");
    assert!(
        (left - 60_000).abs() <= TTL_TOLERANCE_MS,
        "{left} ms left, about 60000 wanted"
    );
    assert_eq!(
        leases["expired"],
        Lease {
            token: Some("9007199254740993".into()),
            holder: None
        },
        "the token is raised by one past 2^53; the expired holder is not copied"
    );
    let contested = &leases["contested"];
    assert_eq!(
        contested.token.as_deref(),
        Some("10"),
        "a token is never lowered"
    );
    let (holder, _) = contested.holder.clone().unwrap();
    assert_eq!(holder, if overwrite { "h-src" } else { "h-tgt" });
}

fn check_report(report: &MigrationReport, overwrite: bool) {
    assert_eq!(
        report.namespaces.get(&Namespace::Leases),
        Some(&Counts {
            copied: 1,
            kept: u64::from(!overwrite),
            overwritten: 1 + u64::from(overwrite),
            pruned: 0
        }),
        "{report:#?}"
    );
}

async fn forward_into_another_prefix<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    // Copy-only keeps a live holder found at the target; the mirror (the default) replaces it.
    for mirror in [false, true] {
        let from = Keyspace::new(Layout::Legacy, unique_prefix("mig-lease-src")).unwrap();
        let to = Keyspace::new(Layout::Cluster, unique_prefix("mig-lease-tgt")).unwrap();
        seed_leases(node, &from, &to);
        let mut options = MigrateOptions::new(from.prefix());
        options.target_prefix = Some(to.prefix().to_owned());
        options.mirror = mirror;
        let report = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
            .await
            .unwrap();
        check_report(&report, mirror);
        check_target(node, Layout::Cluster, &to, mirror);
    }
}

async fn rollback_into_another_prefix<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    for mirror in [false, true] {
        let from = Keyspace::new(Layout::Cluster, unique_prefix("mig-lease-src")).unwrap();
        let to = Keyspace::new(Layout::Legacy, unique_prefix("mig-lease-tgt")).unwrap();
        seed_leases(node, &from, &to);
        // A migrated keyspace carries the marker; a mirroring rollback requires it.
        node.run(&[Cmd::new("SET", from.marker().as_bytes()).arg("cluster:v1")]);
        let mut options = RollbackOptions::new(from.prefix());
        options.target_prefix = Some(to.prefix().to_owned());
        options.mirror = mirror;
        let report = rollback_to_legacy_layout(&client, &client, &options, &mut |_| {})
            .await
            .unwrap();
        check_report(&report, mirror);
        check_target(node, Layout::Legacy, &to, mirror);
    }
}

both_drivers!(forward_into_another_prefix, rollback_into_another_prefix);
