//! A heartbeat or a pending turn ticket means a bot still runs on the prefix: a migration or a
//! rollback refuses with `Refusal::Live`, naming the keys, before writing anything, whether the
//! key is on the source or on a separate target; `allow_live` runs anyway.

use botmesh_redis_core::keys::{RecordKind, TurnPart};
use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, MarkerOutcome, MigrateOptions,
    MigrationReport, Namespace, Refusal, RollbackOptions,
};
use botmesh_redis_core::{Error, Key, Keyspace, Layout};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{assert_same_data, digest, Cmd, Node};
use botmesh_redis_tests::{both_drivers, unique_prefix};

/// A little data of each kind a migration copies (no lease: see migrate_leases.rs).
fn some_data(ks: &Keyspace) -> Vec<Cmd> {
    let mut data = vec![
        Cmd::new("SET", ks.record(RecordKind::Chat, "c:1").as_bytes()).arg("chat"),
        Cmd::new("ZADD", ks.message_log("c:1").as_bytes())
            .arg("5")
            .arg("m"),
        Cmd::new("SET", ks.message_item("c:1", "m").as_bytes()).arg("hello"),
        Cmd::new("SET", ks.lock_fence("job").as_bytes()).arg("9007199254740993"),
        Cmd::new("SET", ks.record(RecordKind::Checkpoint, "cp").as_bytes())
            .arg("offset")
            .arg("PX")
            .arg("600000"),
        Cmd::new("SET", ks.cursor("feed").as_bytes()).arg("42"),
    ];
    if ks.layout() == Layout::Cluster {
        // A migrated keyspace carries the marker; a mirroring rollback requires it.
        data.push(Cmd::new("SET", ks.marker().as_bytes()).arg("cluster:v1"));
    }
    data
}

/// A live key: a heartbeat, or a turn queue with a pending ticket (in `ks`'s layout).
#[derive(Clone, Copy, Debug)]
enum Live {
    Heartbeat,
    Ticket,
}

impl Live {
    fn key(self, ks: &Keyspace) -> Key {
        match self {
            Live::Heartbeat => ks.heartbeat("replica-1"),
            Live::Ticket => ks.turn("chat:{7}", TurnPart::Tix),
        }
    }

    fn write(self, ks: &Keyspace) -> Cmd {
        match self {
            Live::Heartbeat => Cmd::new("SET", self.key(ks).as_bytes())
                .arg("alive")
                .arg("PX")
                .arg("600000"),
            Live::Ticket => Cmd::new("ZADD", self.key(ks).as_bytes())
                .arg("3")
                .arg("r1|q1"),
        }
    }

    fn refusal(self, ks: &Keyspace) -> Refusal {
        let (heartbeats, tickets) = match self {
            Live::Heartbeat => (1, 0),
            Live::Ticket => (0, 1),
        };
        Refusal::Live {
            heartbeats,
            tickets,
            examples: vec![self.key(ks).to_string()],
        }
    }

    /// Where the report counts the live key when `allow_live` copies around it.
    fn not_copied(self) -> Namespace {
        match self {
            Live::Heartbeat => Namespace::Heartbeats,
            Live::Ticket => Namespace::Turns,
        }
    }
}

fn refused(result: Result<MigrationReport, Error>) -> Refusal {
    match result {
        Err(Error::Refused(refusal)) => refusal,
        other => panic!("not refused: {other:?}"),
    }
}

/// Forward: the live key on the source (in place on the single node), or on a separate
/// target (the shared cluster, in the cluster layout).
async fn forward<R: Runtime>(on_target: bool) {
    let single = Node::shared_single();
    let cluster = Node::shared_cluster();
    let source = single.client::<R>().await;
    let target = if on_target {
        cluster.client::<R>().await
    } else {
        source.clone()
    };
    let tgt_node = if on_target { cluster } else { single };
    for live in [Live::Heartbeat, Live::Ticket] {
        let prefix = unique_prefix("mig-live-fwd");
        let legacy = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
        let target_ks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
        single.run(&some_data(&legacy));
        let live_ks = if on_target { &target_ks } else { &legacy };
        tgt_node.run(&[live.write(live_ks)]);
        let source_before = single.raw_dump(&prefix);
        let target_before = tgt_node.raw_dump(&prefix);
        let data = digest(single, Layout::Legacy, &prefix);

        let mut options = MigrateOptions::new(prefix.as_str());
        let result = migrate_to_cluster_layout(&source, &target, &options, &mut |_| {}).await;
        assert_eq!(refused(result), live.refusal(live_ks), "{live:?}");
        assert!(
            single.raw_dump(&prefix) == source_before,
            "{live:?}: the source changed"
        );
        assert!(
            tgt_node.raw_dump(&prefix) == target_before,
            "{live:?}: the target changed"
        );

        options.allow_live = true;
        let report = migrate_to_cluster_layout(&source, &target, &options, &mut |_| {})
            .await
            .unwrap();
        assert_eq!(report.marker, MarkerOutcome::Written, "{live:?}");
        if !on_target {
            assert_eq!(
                report.not_copied.get(&live.not_copied()),
                Some(&1),
                "{live:?}: {report:#?}"
            );
        }
        let copy = digest(tgt_node, Layout::Cluster, &prefix);
        assert_same_data(&format!("{live:?}: copied with allow_live"), &data, &copy);
    }
}

async fn forward_live_source<R: Runtime>() {
    forward::<R>(false).await;
}

async fn forward_live_target<R: Runtime>() {
    forward::<R>(true).await;
}

/// Rollback from the shared cluster into the single node: the live key on the cluster-layout
/// source, or on the legacy target (another prefix).
async fn rollback<R: Runtime>(on_target: bool) {
    let single = Node::shared_single();
    let cluster = Node::shared_cluster();
    let legacy_client = single.client::<R>().await;
    let cluster_client = cluster.client::<R>().await;
    for live in [Live::Heartbeat, Live::Ticket] {
        let prefix = unique_prefix("mig-live-rb");
        let back = unique_prefix("mig-live-back");
        let source_ks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
        let target_ks = Keyspace::new(Layout::Legacy, back.as_str()).unwrap();
        cluster.run(&some_data(&source_ks));
        let data = digest(cluster, Layout::Cluster, &prefix);
        let (live_node, live_ks) = if on_target {
            (single, &target_ks)
        } else {
            (cluster, &source_ks)
        };
        live_node.run(&[live.write(live_ks)]);
        let source_before = cluster.raw_dump(&prefix);
        let target_before = single.raw_dump(&back);

        let mut options = RollbackOptions::new(prefix.as_str());
        options.target_prefix = Some(back.clone());
        let result =
            rollback_to_legacy_layout(&cluster_client, &legacy_client, &options, &mut |_| {}).await;
        assert_eq!(refused(result), live.refusal(live_ks), "{live:?}");
        assert!(
            cluster.raw_dump(&prefix) == source_before,
            "{live:?}: the source changed"
        );
        assert!(
            single.raw_dump(&back) == target_before,
            "{live:?}: the target changed"
        );

        options.allow_live = true;
        let report =
            rollback_to_legacy_layout(&cluster_client, &legacy_client, &options, &mut |_| {})
                .await
                .unwrap();
        assert_eq!(report.unrepresentable, 0, "{report:#?}");
        let restored = digest(single, Layout::Legacy, &back);
        assert_same_data(
            &format!("{live:?}: restored with allow_live"),
            &data,
            &restored,
        );
    }
}

async fn rollback_live_source<R: Runtime>() {
    rollback::<R>(false).await;
}

async fn rollback_live_target<R: Runtime>() {
    rollback::<R>(true).await;
}

both_drivers!(
    forward_live_source,
    forward_live_target,
    rollback_live_source,
    rollback_live_target
);
