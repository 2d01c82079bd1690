//! A mirror removes from its target what the source no longer holds, also when the source
//! datum vanishes (expires) after the prune pass saw it alive: the target's stale copy does not
//! survive the run, and it is counted `pruned`.
//!
//! The expiry is simulated deterministically. The step calls `progress` with `phase ==
//! "pruning"` after each prune page and before the copy pass (`scan_count` is large enough for
//! one prune page per target node); at the last of those calls the test deletes the item of a
//! message with a raw admin command (its log member stays: the copy pass finds it dangling).
//! The other data that vanishes (a chat record, a checkpoint, a user-data entry, a conversation:
//! the steps copy into another prefix or server, so the names both layouts share are copied)
//! goes either just before the copy pass reads it, after its `SCAN` returned it (the source's
//! client is wrapped: each key is deleted right before the `migrate_read` call that holds it),
//! or at that same last prune page, before the copy pass's `SCAN` reaches it (the
//! `_between_the_passes` cases: a second prune pass after the copy removes those). Both directions: a rollback (from the cluster
//! layout on one node, and from the cluster), and a forward mirror (into the cluster layout on
//! one node, and into the cluster), each where the lifecycle allows it.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use botmesh_redis_core::driver::scripts::MIGRATE_READ;
use botmesh_redis_core::driver::{Plan, Reply, Step};
use botmesh_redis_core::keys::{enc, RecordKind};
use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, MarkerOutcome, MigrateOptions,
    MigrationReport, Namespace, Progress, RollbackOptions,
};
use botmesh_redis_core::{Error, Executor, Key, Keyspace, Layout};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{assert_same_data, digest, Cmd, Node};
use botmesh_redis_tests::{both_drivers, unique_prefix};

/// One prune page per node, whatever else the shared servers hold.
const ONE_PAGE: u32 = 100_000;

/// The legacy keyspace: for each kind of datum, one that stays and one that vanishes.
fn legacy_data(ks: &Keyspace) -> Vec<Cmd> {
    let set = |key: Key, value: &str| Cmd::new("SET", key.as_bytes()).arg(value);
    vec![
        set(ks.record(RecordKind::Chat, "c-keep"), "chat that stays"),
        set(ks.record(RecordKind::Chat, "c-gone"), "chat that vanishes"),
        set(ks.record(RecordKind::Checkpoint, "cp-keep"), "offset 1"),
        set(ks.record(RecordKind::Checkpoint, "cp-gone"), "offset 2")
            .arg("PX")
            .arg("600000"),
        set(ks.user_entry("u", "ns", "k-keep"), "stays"),
        set(ks.user_entry("u", "ns", "k-gone"), "vanishes"),
        set(ks.conversation("conv-keep"), "state that stays"),
        set(ks.conversation("conv-gone"), "state that vanishes"),
        Cmd::new("ZADD", ks.message_log("chat").as_bytes())
            .arg("1")
            .arg("m-keep")
            .arg("2")
            .arg("m-gone"),
        set(ks.message_item("chat", "m-keep"), "hello"),
        set(ks.message_item("chat", "m-gone"), "bye"),
    ]
}

/// The source keys that vanish, in the layout of `ks`: the records, user-data entry and
/// conversation, and the message item.
fn vanishing(ks: &Keyspace) -> (Vec<Key>, Key) {
    (
        vec![
            ks.record(RecordKind::Chat, "c-gone"),
            ks.record(RecordKind::Checkpoint, "cp-gone"),
            ks.user_entry("u", "ns", "k-gone"),
            ks.conversation("conv-gone"),
        ],
        ks.message_item("chat", "m-gone"),
    )
}

/// What the run must count as pruned: each vanished datum once (the message by its member).
fn pruned_once() -> BTreeMap<Namespace, u64> {
    [
        Namespace::Chats,
        Namespace::Checkpoints,
        Namespace::UserData,
        Namespace::Conversations,
        Namespace::Messages,
    ]
    .into_iter()
    .map(|ns| (ns, 1))
    .collect()
}

fn pruned(report: &MigrationReport) -> BTreeMap<Namespace, u64> {
    report
        .namespaces
        .iter()
        .filter(|(_, c)| c.pruned > 0)
        .map(|(ns, c)| (*ns, c.pruned))
        .collect()
}

fn exists(node: Node<'_>, key: &Key) -> bool {
    node.call(&Cmd::new("EXISTS", key.as_bytes())).as_int() == Some(1)
}

fn member(node: Node<'_>, zset: &Key, member: &str) -> bool {
    !node
        .call(&Cmd::new("ZSCORE", zset.as_bytes()).arg(member))
        .is_nil()
}

/// When the vanishing source keys go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    /// After the copy pass's `SCAN` returned them, just before it reads them (each key right
    /// before the `migrate_read` call that holds it); the message item at the last prune page.
    BeforeTheRead,
    /// All of them at the last prune page, before the copy pass's `SCAN`.
    BetweenThePasses,
}

/// What an [`Expiring`] executor deletes, and when.
struct Expiry {
    /// Where the source keys are.
    source: Node<'static>,
    /// Set at the last prune page: from then on, each `migrate_read` call first deletes the
    /// keys of `before_read` it reads.
    armed: AtomicBool,
    /// The keys still to delete before their read.
    before_read: Mutex<Vec<Key>>,
}

impl Expiry {
    fn before(&self, step: &Step<impl Sized>) {
        let Step::Send(batch) = step else {
            return;
        };
        if !self.armed.load(Ordering::SeqCst) {
            return;
        }
        let read: Vec<&Key> = batch
            .iter()
            .filter(|r| {
                r.script_ref()
                    .is_some_and(|s| s.name() == MIGRATE_READ.name())
            })
            .flat_map(|r| r.keys())
            .collect();
        let mut left = self.before_read.lock().unwrap();
        let (now, later): (Vec<Key>, Vec<Key>) = left.drain(..).partition(|k| read.contains(&k));
        *left = later;
        drop(left);
        let doomed: Vec<Cmd> = now.iter().map(|k| Cmd::new("DEL", k.as_bytes())).collect();
        self.source.run(&doomed);
    }
}

/// The source's client, deleting source keys just before the copy pass reads them.
#[derive(Clone)]
struct Expiring<E> {
    inner: E,
    expiry: Arc<Expiry>,
}

impl<E: Executor> Executor for Expiring<E> {
    fn run<P: Plan>(&self, plan: P) -> impl Future<Output = Result<P::Output, Error>> + Send {
        self.inner.run(BeforeRead {
            plan,
            expiry: self.expiry.clone(),
        })
    }

    fn deployment(&self) -> botmesh_redis_core::Deployment {
        self.inner.deployment()
    }

    fn detach<P: Plan>(&self, plan: P) {
        self.inner.detach(plan)
    }

    fn shutdown(&self, grace: std::time::Duration) -> impl Future<Output = ()> + Send {
        self.inner.shutdown(grace)
    }
}

struct BeforeRead<P> {
    plan: P,
    expiry: Arc<Expiry>,
}

impl<P: Plan> Plan for BeforeRead<P> {
    type Output = P::Output;

    fn operation(&self) -> &'static str {
        self.plan.operation()
    }

    fn start(&mut self) -> Step<P::Output> {
        let step = self.plan.start();
        self.expiry.before(&step);
        step
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<P::Output> {
        let step = self.plan.resume(replies);
        self.expiry.before(&step);
        step
    }
}

/// Runs `step` over the source's client wrapped so that the vanishing keys of `ks` (on
/// `source`) go `when` said; the target has `target_nodes` nodes, one prune page each. Yields
/// the step's report; asserts that there were that many prune pages and that every key went.
async fn with_expiry<E, F>(
    source: Node<'static>,
    client: &E,
    ks: &Keyspace,
    when: When,
    target_nodes: usize,
    step: F,
) -> MigrationReport
where
    E: Executor,
    F: AsyncFnOnce(&Expiring<E>, &mut (dyn FnMut(&Progress) + Send)) -> MigrationReport,
{
    let (records, item) = vanishing(ks);
    let expiry = Arc::new(Expiry {
        source,
        armed: AtomicBool::new(false),
        before_read: Mutex::new(match when {
            When::BeforeTheRead => records.clone(),
            When::BetweenThePasses => Vec::new(),
        }),
    });
    let wrapped = Expiring {
        inner: client.clone(),
        expiry: expiry.clone(),
    };
    let at_last_page: Vec<Cmd> = match when {
        When::BeforeTheRead => vec![item],
        When::BetweenThePasses => records.into_iter().chain([item]).collect(),
    }
    .iter()
    .map(|k| Cmd::new("DEL", k.as_bytes()))
    .collect();
    let mut pages = 0;
    let report = {
        let mut progress = |p: &Progress| {
            if p.phase == "pruning" {
                pages += 1;
                if pages == target_nodes {
                    source.run(&at_last_page);
                    expiry.armed.store(true, Ordering::SeqCst);
                }
            }
        };
        step(&wrapped, &mut progress).await
    };
    // Two prune passes (the target held data: one before the copy, one after), one page per
    // target node each; the keys vanished at the last page of the first.
    assert_eq!(
        pages,
        2 * target_nodes,
        "one prune page per target node and pass expected"
    );
    let left = expiry.before_read.lock().unwrap().clone();
    assert!(left.is_empty(), "never read by the copy pass: {left:?}");
    report
}

/// Migrates a legacy prefix of the shared single node into `host` (another prefix), starts the
/// bots there, and rolls back, mirroring, into the legacy prefix, whose keys still hold the
/// data as it was migrated. The vanished source data goes from the legacy target too.
async fn rollback<R: Runtime>((host, when): (Node<'static>, When)) {
    let single = Node::shared_single();
    let legacy_client = single.client::<R>().await;
    let cluster_client = host.client::<R>().await;
    let legacy = unique_prefix("mig-vanish-rb");
    let cluster = unique_prefix("mig-vanish-rb-cl");
    let lks = Keyspace::new(Layout::Legacy, legacy.as_str()).unwrap();
    let cks = Keyspace::new(Layout::Cluster, cluster.as_str()).unwrap();
    single.run(&legacy_data(&lks));
    let mut forward = MigrateOptions::new(legacy.as_str());
    forward.target_prefix = Some(cluster.clone());
    let migrated =
        migrate_to_cluster_layout(&legacy_client, &cluster_client, &forward, &mut |_| {})
            .await
            .unwrap();
    assert_eq!(migrated.marker, MarkerOutcome::Written, "{migrated:#?}");
    host.start_bots::<R>(Layout::Cluster, &cluster)
        .await
        .unwrap();

    let mut options = RollbackOptions::new(cluster.as_str());
    options.target_prefix = Some(legacy.clone());
    options.scan_count = ONE_PAGE;
    let report = with_expiry(
        host,
        &cluster_client,
        &cks,
        when,
        1,
        async |source, progress| {
            rollback_to_legacy_layout(source, &legacy_client, &options, progress)
                .await
                .unwrap()
        },
    )
    .await;
    assert_eq!(pruned(&report), pruned_once(), "{report:#?}");
    assert_eq!(
        (report.dangling, report.unreadable, report.unrepresentable),
        (1, 0, 0),
        "{report:#?}"
    );

    for key in [
        lks.record(RecordKind::Chat, "c-gone"),
        lks.record(RecordKind::Checkpoint, "cp-gone"),
        lks.user_entry("u", "ns", "k-gone"),
        lks.conversation("conv-gone"),
        lks.message_item("chat", "m-gone"),
    ] {
        assert!(!exists(single, &key), "the stale {key} survived the mirror");
    }
    assert!(!member(single, &lks.message_log("chat"), "m-gone"));
    assert!(member(single, &lks.message_log("chat"), "m-keep"));
    assert_same_data(
        "the legacy target mirrors the source",
        &digest(host, Layout::Cluster, &cluster),
        &digest(single, Layout::Legacy, &legacy),
    );
    single.delete_prefix(&legacy);
    host.delete_prefix(&cluster);
}

/// Migrates a legacy prefix of the shared single node into `host` (another prefix), lets the
/// bots run on the legacy side again, and migrates again: the mirror refreshes the stale
/// cluster-layout copy, and what vanished at the source goes from it, index members too.
async fn forward<R: Runtime>((host, when): (Node<'static>, When)) {
    let single = Node::shared_single();
    let legacy_client = single.client::<R>().await;
    let cluster_client = host.client::<R>().await;
    let legacy = unique_prefix("mig-vanish-fw");
    let cluster = unique_prefix("mig-vanish-fw-cl");
    let lks = Keyspace::new(Layout::Legacy, legacy.as_str()).unwrap();
    let cks = Keyspace::new(Layout::Cluster, cluster.as_str()).unwrap();
    single.run(&legacy_data(&lks));
    let mut options = MigrateOptions::new(legacy.as_str());
    options.target_prefix = Some(cluster.clone());
    options.scan_count = ONE_PAGE;
    let first = migrate_to_cluster_layout(&legacy_client, &cluster_client, &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(first.marker, MarkerOutcome::Written, "{first:#?}");
    single
        .start_bots::<R>(Layout::Legacy, &legacy)
        .await
        .unwrap();

    let nodes = host.conns().len();
    let report = with_expiry(
        single,
        &legacy_client,
        &lks,
        when,
        nodes,
        async |source, progress| {
            migrate_to_cluster_layout(source, &cluster_client, &options, progress)
                .await
                .unwrap()
        },
    )
    .await;
    assert_eq!(pruned(&report), pruned_once(), "{report:#?}");
    assert_eq!((report.dangling, report.unreadable), (1, 0), "{report:#?}");

    for key in [
        cks.record(RecordKind::Chat, "c-gone"),
        cks.record(RecordKind::Checkpoint, "cp-gone"),
        cks.user_entry("u", "ns", "k-gone"),
        cks.conversation("conv-gone"),
        cks.message_item("chat", "m-gone"),
    ] {
        assert!(!exists(host, &key), "the stale {key} survived the mirror");
    }
    let index = |kind, id| cks.record_index_of(kind, id).unwrap();
    let user_index = cks.user_index("u").unwrap();
    let gone_members = [
        (index(RecordKind::Chat, "c-gone"), "c-gone".to_owned()),
        (
            index(RecordKind::Checkpoint, "cp-gone"),
            "cp-gone".to_owned(),
        ),
        (
            user_index.clone(),
            format!("{}:{}", enc("ns"), enc("k-gone")),
        ),
        (cks.message_log("chat"), "m-gone".to_owned()),
    ];
    for (zset, id) in &gone_members {
        assert!(!member(host, zset, id), "{zset} still names {id}");
    }
    let kept_members = [
        (index(RecordKind::Chat, "c-keep"), "c-keep".to_owned()),
        (
            index(RecordKind::Checkpoint, "cp-keep"),
            "cp-keep".to_owned(),
        ),
        (user_index, format!("{}:{}", enc("ns"), enc("k-keep"))),
        (cks.message_log("chat"), "m-keep".to_owned()),
    ];
    for (zset, id) in &kept_members {
        assert!(member(host, zset, id), "{zset} lost {id}");
    }
    let copy = digest(host, Layout::Cluster, &cluster);
    copy.assert_indexes_agree();
    assert_same_data(
        "the cluster-layout target mirrors the source",
        &digest(single, Layout::Legacy, &legacy),
        &copy,
    );
    single.delete_prefix(&legacy);
    host.delete_prefix(&cluster);
}

both_drivers!(rollback {
    rollback_from_one_node => (Node::shared_single(), When::BeforeTheRead),
    rollback_from_the_cluster => (Node::shared_cluster(), When::BeforeTheRead),
    rollback_from_one_node_between_the_passes => (Node::shared_single(), When::BetweenThePasses),
    rollback_from_the_cluster_between_the_passes => (Node::shared_cluster(), When::BetweenThePasses),
});
both_drivers!(forward {
    forward_into_one_node => (Node::shared_single(), When::BeforeTheRead),
    forward_into_the_cluster => (Node::shared_cluster(), When::BeforeTheRead),
    forward_into_one_node_between_the_passes => (Node::shared_single(), When::BetweenThePasses),
    forward_into_the_cluster_between_the_passes => (Node::shared_cluster(), When::BetweenThePasses),
});
