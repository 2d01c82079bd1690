//! A migration or a rollback killed at any point and run again ends with the same keyspace as
//! an uninterrupted run, and the layout marker changes only once a run is complete.
//!
//! The kill is exact and reproducible: a [`Budget`] lets the run send only so many batches
//! (counted across the source and target clients), then fails the next one before it is sent
//! or after it ran (its replies lost). A few rounds instead drop the run's future after a
//! random short time, as a killed process would.

use std::time::Duration;

use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, MarkerOutcome, MigrateOptions,
    RollbackOptions,
};
use botmesh_redis_core::{Error, Executor, Keyspace, Layout};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::keyspace::{
    assert_same_data, digest_since, seeds, write_generated, Budget, Cut, Limited, Node, Rng,
};
use botmesh_redis_tests::{both_drivers, unique_prefix};

const SEEDS: &[u64] = &[31];
/// Cut rounds per seed and direction (plus `DROPS` rounds that drop the future).
const CUTS: usize = 6;
const DROPS: usize = 2;
/// `SCAN COUNT`: small, so that a run has many pages and many points to be killed at.
const SCAN_COUNT: u32 = 50;

/// How a round kills the run.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// After this many batches, with this cut.
    Batches(usize, Cut),
    /// Drop the run's future after this long.
    After(Duration),
}

impl Kill {
    fn draw(rng: &mut Rng, round: usize, batches: usize) -> Kill {
        if round < CUTS {
            let cut = if rng.chance(50) {
                Cut::BeforeSend
            } else {
                Cut::AfterReply
            };
            Kill::Batches(rng.range(0, batches as u64) as usize, cut)
        } else {
            Kill::After(Duration::from_micros(rng.range(500, 40_000)))
        }
    }
}

fn marker(node: Node<'_>, prefix: &str) -> Option<String> {
    let ks = Keyspace::new(Layout::Legacy, prefix).unwrap();
    let value = node.conns()[0]
        .call(&[b"GET".as_slice(), ks.marker().as_bytes()])
        .unwrap();
    value.as_str().map(str::to_owned)
}

fn marker_at(node: Node<'_>, prefix: &str) -> Option<String> {
    // On a cluster the marker lives on the master of its slot.
    match node {
        Node::Cluster(cluster) => {
            let ks = Keyspace::new(Layout::Legacy, prefix).unwrap();
            let mut conn = cluster.conn_for_key(ks.marker().as_bytes()).unwrap();
            let value = conn
                .call(&[b"GET".as_slice(), ks.marker().as_bytes()])
                .unwrap();
            value.as_str().map(str::to_owned)
        }
        Node::Single(_) => marker(node, prefix),
    }
}

/// Runs `run` on clients killed as `kill` says; `Ok(true)` when it was killed, `Ok(false)`
/// when it completed first.
async fn killed<R: Runtime, F, Fut>(kill: Kill, src: &Client<R>, tgt: &Client<R>, run: F) -> bool
where
    F: FnOnce(Limited<Client<R>>, Limited<Client<R>>) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    match kill {
        Kill::Batches(at, cut) => {
            let budget = Budget::new(at, cut);
            match run(budget.wrap(src.clone()), budget.wrap(tgt.clone())).await {
                Ok(()) => false,
                Err(Error::NotSent { .. } | Error::ReplyLost { .. }) => true,
                Err(other) => panic!("the cut run failed otherwise: {other}"),
            }
        }
        Kill::After(after) => {
            let budget = Budget::unlimited();
            let fut = run(budget.wrap(src.clone()), budget.wrap(tgt.clone()));
            match tokio::time::timeout(after, fut).await {
                Ok(result) => {
                    result.unwrap();
                    false
                }
                Err(_) => true,
            }
        }
    }
}

/// Counts the batches of an uninterrupted run.
async fn counted<R: Runtime, F, Fut>(src: &Client<R>, tgt: &Client<R>, run: F) -> usize
where
    F: FnOnce(Limited<Client<R>>, Limited<Client<R>>) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let budget = Budget::unlimited();
    run(budget.wrap(src.clone()), budget.wrap(tgt.clone()))
        .await
        .unwrap();
    budget.sent()
}

async fn forward<E: Executor>(src: E, tgt: E, options: MigrateOptions) -> Result<(), Error> {
    migrate_to_cluster_layout(&src, &tgt, &options, &mut |_| {})
        .await
        .map(|_| ())
}

async fn backward<E: Executor>(src: E, tgt: E, options: RollbackOptions) -> Result<(), Error> {
    rollback_to_legacy_layout(&src, &tgt, &options, &mut |_| {})
        .await
        .map(|_| ())
}

fn forward_options(prefix: &str, _separate: bool) -> MigrateOptions {
    let mut options = MigrateOptions::new(prefix);
    options.scan_count = SCAN_COUNT;
    options
}

/// Forward from the shared single node into `target` (in place when `None`).
async fn forward_killed<R: Runtime>(target: Option<Node<'static>>) {
    let source = Node::shared_single();
    let tgt_node = target.unwrap_or(source);
    let separate = target.is_some();
    let src = source.client::<R>().await;
    let tgt = tgt_node.client::<R>().await;
    for seed in seeds(SEEDS) {
        let mut rng = Rng::new(seed ^ 0x6b69_6c6c);
        let reference_prefix = unique_prefix("mig-kill-ref");
        let reference_written = source.now_ms();
        write_generated(source, &reference_prefix, seed, 1);
        let options = forward_options(&reference_prefix, separate);
        let batches = counted(&src, &tgt, |s, t| forward(s, t, options)).await;
        let reference = digest_since(
            tgt_node,
            Layout::Cluster,
            &reference_prefix,
            reference_written,
        );
        let mut kills = 0;
        for round in 0..CUTS + DROPS {
            let prefix = unique_prefix("mig-kill");
            let written = source.now_ms();
            write_generated(source, &prefix, seed, 1);
            let kill = Kill::draw(&mut rng, round, batches);
            let what = format!("seed {seed}, round {round}: {kill:?} of {batches} batches");
            let options = forward_options(&prefix, separate);
            let run = options.clone();
            if killed(kill, &src, &tgt, |s, t| forward(s, t, run)).await {
                kills += 1;
                if marker_at(tgt_node, &prefix).is_some() {
                    // Only a complete run writes the marker (its reply may have been lost).
                    assert_same_data(
                        &format!("{what}: marker written by an incomplete run"),
                        &reference,
                        &digest_since(tgt_node, Layout::Cluster, &prefix, written),
                    );
                }
            }
            let report = migrate_to_cluster_layout(&src, &tgt, &options, &mut |_| {})
                .await
                .unwrap();
            assert!(
                matches!(
                    report.marker,
                    MarkerOutcome::Written | MarkerOutcome::AlreadySet
                ),
                "{what}: {report:#?}"
            );
            let after = digest_since(tgt_node, Layout::Cluster, &prefix, written);
            assert_same_data(&what, &reference, &after);
            after.assert_indexes_agree();
            assert_eq!(after.marker.as_deref(), Some("cluster:v1"));
            source.delete_prefix(&prefix);
            tgt_node.delete_prefix(&prefix);
        }
        assert!(kills >= CUTS / 2, "only {kills} rounds were killed");
    }
}

/// Forward (uninterrupted) from the shared single node into `host`, then a rollback from
/// there into the single node: in place, or into a fresh prefix.
async fn rollback_killed<R: Runtime>(host: Node<'static>, in_place: bool) {
    let single = Node::shared_single();
    let legacy = single.client::<R>().await;
    let cluster = host.client::<R>().await;
    let prepare = |prefix: &str| {
        let options = forward_options(prefix, !in_place);
        let back = if in_place {
            prefix.to_owned()
        } else {
            unique_prefix("mig-kill-back")
        };
        let mut rollback = RollbackOptions::new(prefix);
        rollback.target_prefix = Some(back.clone());
        rollback.scan_count = SCAN_COUNT;
        (options, rollback, back)
    };
    for seed in seeds(SEEDS) {
        let mut rng = Rng::new(seed ^ 0x6261_636b);
        let reference_prefix = unique_prefix("mig-kill-ref");
        let reference_written = single.now_ms();
        write_generated(single, &reference_prefix, seed, 1);
        let (options, rollback, reference_back) = prepare(&reference_prefix);
        forward(legacy.clone(), cluster.clone(), options)
            .await
            .unwrap();
        // The bots ran on the cluster layout before the rollback.
        host.start_bots::<R>(Layout::Cluster, &reference_prefix)
            .await
            .unwrap();
        let batches = counted(&cluster, &legacy, |s, t| backward(s, t, rollback)).await;
        let reference = digest_since(single, Layout::Legacy, &reference_back, reference_written);
        let mut kills = 0;
        for round in 0..CUTS + DROPS {
            let prefix = unique_prefix("mig-kill");
            let written = single.now_ms();
            write_generated(single, &prefix, seed, 1);
            let (options, rollback, back) = prepare(&prefix);
            forward(legacy.clone(), cluster.clone(), options)
                .await
                .unwrap();
            host.start_bots::<R>(Layout::Cluster, &prefix)
                .await
                .unwrap();
            let kill = Kill::draw(&mut rng, round, batches);
            let what = format!("seed {seed}, round {round}: {kill:?} of {batches} batches");
            let run = rollback.clone();
            if killed(kill, &cluster, &legacy, |s, t| backward(s, t, run)).await {
                kills += 1;
                if in_place && marker(single, &back).is_none() {
                    // Only a complete rollback removes the marker.
                    assert_same_data(
                        &format!("{what}: marker removed by an incomplete rollback"),
                        &reference,
                        &digest_since(single, Layout::Legacy, &back, written),
                    );
                }
            }
            let report = rollback_to_legacy_layout(&cluster, &legacy, &rollback, &mut |_| {})
                .await
                .unwrap();
            assert_eq!(report.unrepresentable, 0, "{what}: {report:#?}");
            let after = digest_since(single, Layout::Legacy, &back, written);
            assert_same_data(&what, &reference, &after);
            assert_eq!(after.marker, None, "{what}");
            for p in [&prefix, &back] {
                single.delete_prefix(p);
                host.delete_prefix(p);
            }
        }
        assert!(kills >= CUTS / 2, "only {kills} rounds were killed");
    }
}

async fn forward_in_place<R: Runtime>() {
    forward_killed::<R>(None).await;
}

async fn forward_into_the_cluster<R: Runtime>() {
    forward_killed::<R>(Some(Node::shared_cluster())).await;
}

async fn rollback_in_place<R: Runtime>() {
    rollback_killed::<R>(Node::shared_single(), true).await;
}

async fn rollback_from_the_cluster<R: Runtime>() {
    rollback_killed::<R>(Node::shared_cluster(), false).await;
}

both_drivers!(
    forward_in_place,
    forward_into_the_cluster,
    rollback_in_place,
    rollback_from_the_cluster
);
