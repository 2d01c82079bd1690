//! The operator's sequences that once lost or brought back data, run as an operator runs them:
//! steps apart, with bots writing and deleting through the store API between them, over every
//! namespace a bot writes (records, messages, checkpoints, user data, conversations, a cursor,
//! the outbox). Each step reads the two sides' lifecycle records and refuses what would write
//! into the live side; the cleanup step deletes the side the bots left, and only that.

use botmesh_redis_core::migrate::lifecycle::Unsafe;
use botmesh_redis_core::migrate::{
    delete_abandoned_side, migrate_to_cluster_layout, rollback_to_legacy_layout, CleanupOptions,
    MigrateOptions, MigrationReport, Refusal, RollbackOptions,
};
use botmesh_redis_core::{Error, Keyspace, Layout};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::keyspace::{Budget, Cmd, Cut, Node};
use botmesh_redis_tests::lifecycle::{assert_holds, write, Data, Op, Side};
use botmesh_redis_tests::{both_drivers, unique_prefix};

fn b(text: &str) -> bytes::Bytes {
    bytes::Bytes::from(text.to_owned())
}

/// What the legacy bots wrote before the migration: a datum of every namespace.
fn first_writes() -> Vec<Op> {
    vec![
        Op::UpsertChat("c0", b("chat 0")),
        Op::UpsertChat("c:1", b("chat 1")),
        Op::SaveMessage("c0", "m0", 10, b("hello")),
        Op::SaveMessage("c0", "m:1", 20, b("world")),
        Op::SaveMessage("c:1", "m0", 30, b("other chat")),
        Op::SetCheckpoint("cp0", b("offset 7")),
        Op::SetUser("u0", "lang", b("pt")),
        Op::SetUser("u 1", "tz:x", b("UTC")),
        Op::SetConversation("c0", b("asking name")),
        Op::SetConversation("c:1", b("idle")),
        Op::SetCursor(5),
        Op::Enqueue("send-a".into(), b("reply a")),
        Op::Enqueue("send-b".into(), b("reply b")),
    ]
}

/// What the bots on the new side delete and change: a chat, a message, a checkpoint, a user's
/// data ("forget me"), a conversation, the sends (claimed and acked), and new data.
fn deletes_and_changes() -> Vec<Op> {
    vec![
        Op::DeleteChat("c:1"),
        Op::DeleteMessage("c0", "m:1"),
        Op::ClearCheckpoint("cp0"),
        Op::ForgetUser("u0"),
        Op::DeleteConversation("c0"),
        Op::SendAll,
        Op::UpsertChat("c{2} 😀", b("a new chat")),
        Op::SaveMessage("c0", "m*2", 40, b("new message")),
        Op::SetCursor(9),
        Op::Enqueue("send-c".into(), b("reply c")),
    ]
}

fn refused_as(result: Result<MigrationReport, Error>, reason: Unsafe) -> String {
    match result {
        Err(Error::Refused(Refusal::Lifecycle {
            reason: got,
            message,
            ..
        })) if got == reason => message,
        other => panic!("expected the lifecycle's {reason:?}, got {other:?}"),
    }
}

/// The sides of a forward migration from the shared single node: in place, into the other
/// single node, or into the cluster.
fn forward_sides(target: &str) -> (Side, Side) {
    let prefix = unique_prefix("lc-seq");
    let legacy = Side {
        node: Node::shared_single(),
        layout: Layout::Legacy,
        prefix: prefix.clone(),
    };
    let node = match target {
        "in place" => Node::shared_single(),
        "another node" => Node::other_single(),
        _ => Node::shared_cluster(),
    };
    let cluster = Side {
        node,
        layout: Layout::Cluster,
        prefix,
    };
    (legacy, cluster)
}

/// Sequence 1: migrate (without `delete_source`), the bots run on the cluster layout and delete,
/// then the operator runs `migrate --delete-source` as the old docs advised. The copy is
/// refused (it would bring back what the bots deleted), nothing is written on either side, and
/// the cleanup step deletes the legacy side without bringing anything back.
async fn a_delete_source_after_the_bots_ran_brings_nothing_back<R: Runtime>() {
    for target in ["in place", "another node", "into the cluster"] {
        let (legacy, cluster) = forward_sides(target);
        let mut model = Data::default();
        let bots = legacy.start::<R>().await.unwrap();
        write(&bots, &mut model, &first_writes()).await;

        let src = legacy.client::<R>().await;
        let tgt = cluster.client::<R>().await;
        let options = MigrateOptions::new(legacy.prefix.as_str());
        migrate_to_cluster_layout(&src, &tgt, &options, &mut |_| {})
            .await
            .unwrap();

        // Days of bots on the cluster layout.
        let bots = cluster.start::<R>().await.unwrap();
        write(&bots, &mut model, &deletes_and_changes()).await;
        assert_holds::<R>(target, &cluster, &model).await;

        let (legacy_before, cluster_before) = (legacy.raw(), cluster.raw());
        let mut again = options.clone();
        again.delete_source = true;
        let message = refused_as(
            migrate_to_cluster_layout(&src, &tgt, &again, &mut |_| {}).await,
            Unsafe::TargetLive,
        );
        assert!(
            message.contains("botmesh-redis cleanup --layout legacy"),
            "{message}"
        );
        assert!(
            legacy.raw() == legacy_before,
            "{target}: the legacy side changed"
        );
        assert!(
            cluster.raw() == cluster_before,
            "{target}: the cluster side changed"
        );

        let cleanup = CleanupOptions::new(legacy.prefix.as_str(), Layout::Legacy);
        let report = delete_abandoned_side(&src, &tgt, &cleanup, &mut |_| {})
            .await
            .unwrap();
        assert!(report.total() > 0, "{target}: {report:#?}");
        // Nothing came back, nothing the bots wrote went.
        assert_holds::<R>(target, &cluster, &model).await;
        // The legacy side holds its lifecycle record, and in place the names both layouts
        // share (they are the cluster side's too); nothing else.
        let left = legacy.node.keys(&legacy.prefix);
        let record = Keyspace::new(Layout::Legacy, legacy.prefix.as_str())
            .unwrap()
            .lifecycle();
        assert!(left.contains(record.as_bytes()), "{target}");
        if target != "in place" {
            assert_eq!(left.len(), 1, "{target}: {left:?}");
        }
    }
}

/// Where sequences 2 and 3 start: the legacy bots wrote, a migration copied their keyspace into
/// the cluster, and the bots ran there, deleting and changing; a third keyspace on another node
/// is ready for a rollback.
struct Migrated<R: Runtime> {
    legacy: Side,
    cluster: Side,
    back: Side,
    model: Data,
    single: Client<R>,
    on_cluster: Client<R>,
    other: Client<R>,
    forward: MigrateOptions,
}

async fn migrated_and_used<R: Runtime>(back_prefix: &str) -> Migrated<R> {
    let (legacy, cluster) = forward_sides("into the cluster");
    let back = Side {
        node: Node::other_single(),
        layout: Layout::Legacy,
        prefix: unique_prefix(back_prefix),
    };
    let mut model = Data::default();
    let bots = legacy.start::<R>().await.unwrap();
    write(&bots, &mut model, &first_writes()).await;
    let (single, on_cluster, other) = (
        legacy.client::<R>().await,
        cluster.client::<R>().await,
        back.client::<R>().await,
    );
    let forward = MigrateOptions::new(legacy.prefix.as_str());
    migrate_to_cluster_layout(&single, &on_cluster, &forward, &mut |_| {})
        .await
        .unwrap();
    let bots = cluster.start::<R>().await.unwrap();
    write(&bots, &mut model, &deletes_and_changes()).await;
    Migrated {
        legacy,
        cluster,
        back,
        model,
        single,
        on_cluster,
        other,
        forward,
    }
}

/// Sequence 2: migrate into the cluster, the bots run there, roll back into another node
/// (mirror, keeping the cluster copy), the legacy bots run there for days, then the operator
/// deletes the cluster-layout keys as the old docs advised ("roll back with delete_source"):
/// refused, as is the copy-only variant; the cleanup step deletes the cluster side and keeps
/// every write of the legacy bots.
async fn a_cleanup_after_a_rollback_keeps_what_the_legacy_bots_wrote<R: Runtime>() {
    let Migrated {
        cluster,
        back,
        mut model,
        on_cluster,
        other,
        ..
    } = migrated_and_used::<R>("lc-seq-back").await;

    let mut rollback = RollbackOptions::new(cluster.prefix.as_str());
    rollback.target_prefix = Some(back.prefix.clone());
    rollback_to_legacy_layout(&on_cluster, &other, &rollback, &mut |_| {})
        .await
        .unwrap();
    assert_holds::<R>("rolled back", &back, &model).await;

    // The legacy bots run on the rolled-back keyspace: new chats, updated ones, deletes.
    let bots = back.start::<R>().await.unwrap();
    let legacy_writes = [
        Op::UpsertChat("c:1", b("chat 1 again")),
        Op::UpsertChat("c0", b("chat 0, renamed")),
        Op::SaveMessage("c:1", "m0", 50, b("back on legacy")),
        Op::DeleteMessage("c0", "m0"),
        Op::SetUser("u0", "lang", b("en")),
        Op::SetConversation("c0", b("new dialogue")),
        Op::SetCheckpoint("cp%1", b("offset 99")),
        Op::Enqueue("send-d".into(), b("reply d")),
    ];
    write(&bots, &mut model, &legacy_writes).await;

    let (cluster_before, back_before) = (cluster.raw(), back.raw());
    let mut delete = rollback.clone();
    delete.delete_source = true;
    refused_as(
        rollback_to_legacy_layout(&on_cluster, &other, &delete, &mut |_| {}).await,
        Unsafe::TargetLive,
    );
    delete.mirror = false;
    let copy_only = rollback_to_legacy_layout(&on_cluster, &other, &delete, &mut |_| {}).await;
    assert!(
        matches!(copy_only, Err(Error::Refused(Refusal::DeleteWithoutMirror))),
        "{copy_only:?}"
    );
    let mut copy_only = rollback.clone();
    copy_only.mirror = false;
    refused_as(
        rollback_to_legacy_layout(&on_cluster, &other, &copy_only, &mut |_| {}).await,
        Unsafe::TargetLive,
    );
    assert!(cluster.raw() == cluster_before, "the cluster side changed");
    assert!(back.raw() == back_before, "the legacy side changed");

    let mut cleanup = CleanupOptions::new(cluster.prefix.as_str(), Layout::Cluster);
    cleanup.other_prefix = Some(back.prefix.clone());
    delete_abandoned_side(&on_cluster, &other, &cleanup, &mut |_| {})
        .await
        .unwrap();
    assert_holds::<R>("after the cleanup", &back, &model).await;
    let record = Keyspace::new(Layout::Cluster, cluster.prefix.as_str())
        .unwrap()
        .lifecycle();
    assert_eq!(
        cluster
            .node
            .keys(&cluster.prefix)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![record.as_bytes().to_vec()],
        "only the cluster side's lifecycle record is left"
    );
    // A store started by mistake on the deleted side refuses.
    let refused = cluster.start::<R>().await;
    assert!(
        matches!(refused, Err(Error::KeyspaceNotReady { .. })),
        "{:?}",
        refused.err()
    );
}

/// Sequence 3: migrate into the cluster, the bots there remove a conversation and send (claim
/// and ack) every queued message, so Redis drops the emptied outbox keys; the mirroring
/// rollback into the original legacy node, which still holds the state at migration time,
/// removes them there too: no user lands back in an old dialogue, no acked send goes out
/// again.
async fn a_mirror_rollback_removes_what_the_cluster_deleted<R: Runtime>() {
    for target in ["another node", "into the cluster"] {
        let (legacy, cluster) = forward_sides(target);
        let mut model = Data::default();
        let bots = legacy.start::<R>().await.unwrap();
        write(&bots, &mut model, &first_writes()).await;
        let (src, tgt) = (legacy.client::<R>().await, cluster.client::<R>().await);
        let forward = MigrateOptions::new(legacy.prefix.as_str());
        migrate_to_cluster_layout(&src, &tgt, &forward, &mut |_| {})
            .await
            .unwrap();

        let bots = cluster.start::<R>().await.unwrap();
        let cluster_writes = [
            Op::DeleteConversation("c0"),
            Op::DeleteConversation("c:1"),
            Op::SendAll,
            Op::ForgetUser("u 1"),
            Op::SetCursor(-3),
        ];
        write(&bots, &mut model, &cluster_writes).await;
        assert!(model.conversations.is_empty() && model.outbox.is_empty());

        let rollback = RollbackOptions::new(cluster.prefix.as_str());
        let report = rollback_to_legacy_layout(&tgt, &src, &rollback, &mut |_| {})
            .await
            .unwrap();
        assert!(report.mirrored, "{report:#?}");
        assert_holds::<R>(target, &legacy, &model).await;
        // The sends the cluster bots acked are not claimed again on the legacy side.
        let bots = legacy.start::<R>().await.unwrap();
        let sends = bots
            .durability("out")
            .unwrap()
            .claim(
                "after",
                botmesh_redis_core::Limit::DEFAULT,
                std::time::Duration::from_secs(60),
            )
            .await
            .unwrap();
        assert!(
            sends.is_empty(),
            "{target}: acked sends came back: {sends:?}"
        );
    }
}

/// The phase and role a side's lifecycle record says, read off the server.
fn phase_and_role(side: &Side) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let record = Keyspace::new(side.layout, side.prefix.as_str())
        .unwrap()
        .lifecycle();
    let field = |name: &str| {
        side.node
            .call(&Cmd::new("HGET", record.as_bytes()).arg(name))
            .as_bytes()
            .map(<[u8]>::to_vec)
    };
    (field("phase"), field("role"))
}

/// Sequence 3: migrate into the cluster, the bots run there and delete, a rollback into a third
/// keyspace is killed once it began on both sides, and days later the operator runs the first
/// migration's command again (from the shell's history). Refused: the cluster side is where the
/// bots' data is, and the legacy side the stale copy of it; nothing is written on either side.
async fn a_migration_again_after_a_killed_rollback_elsewhere_is_refused<R: Runtime>() {
    let Migrated {
        legacy,
        cluster,
        back,
        model,
        single,
        on_cluster,
        other,
        forward,
    } = migrated_and_used::<R>("lc-seq-third").await;

    // The rollback is cut at its first batches until the cluster side's record says it is the
    // source of a copy under way (a rerun resumes the same copy).
    let mut rollback = RollbackOptions::new(cluster.prefix.as_str());
    rollback.target_prefix = Some(back.prefix.clone());
    let began = (Some(b"copying".to_vec()), Some(b"source".to_vec()));
    for limit in 1.. {
        let budget = Budget::new(limit, Cut::BeforeSend);
        let (from, to) = (budget.wrap(on_cluster.clone()), budget.wrap(other.clone()));
        match rollback_to_legacy_layout(&from, &to, &rollback, &mut |_| {}).await {
            Err(Error::NotSent { .. }) if phase_and_role(&cluster) == began => break,
            Err(Error::NotSent { .. }) => {}
            other => panic!("the rollback, cut at batch {limit}: {other:?}"),
        }
    }

    let (legacy_before, cluster_before) = (legacy.raw(), cluster.raw());
    refused_as(
        migrate_to_cluster_layout(&single, &on_cluster, &forward, &mut |_| {}).await,
        Unsafe::SourceMayBeStale,
    );
    assert!(legacy.raw() == legacy_before, "the legacy side changed");
    assert!(cluster.raw() == cluster_before, "the cluster side changed");
    assert_holds::<R>("after the refusal", &cluster, &model).await;
}

both_drivers!(
    a_delete_source_after_the_bots_ran_brings_nothing_back,
    a_cleanup_after_a_rollback_keeps_what_the_legacy_bots_wrote,
    a_mirror_rollback_removes_what_the_cluster_deleted,
    a_migration_again_after_a_killed_rollback_elsewhere_is_refused
);
