//! What must never go wrong with time and counters when a keyspace moves:
//!
//! - a record's TTL arrives within a second of what the source had left (never longer), and a
//!   record without one arrives without one;
//! - lock fences, leadership terms and cursors end at the higher of the source's and the
//!   target's values, whatever `overwrite` or the mirror says (exactly, past 2^53);
//! - schedule tokens never go backwards: a higher source token replaces the target's record
//!   even without `overwrite`, and an overwritten record keeps the target's higher token and
//!   its holder.
//!
//! Counters and schedules are drawn at random against a model, both directions.

use std::collections::BTreeMap;

use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::migrate::{
    migrate_to_cluster_layout, rollback_to_legacy_layout, Counts, MigrateOptions, MigrationReport,
    Namespace, RollbackOptions,
};
use botmesh_redis_core::{Key, Keyspace, Layout};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{
    digest, migrated_records, seeds, Blob, Cmd, Node, Rng, Sched, TOKENS, TTL_TOLERANCE_MS,
};
use botmesh_redis_tests::{both_drivers, unique_prefix};

const SEEDS: &[u64] = &[51, 52];

// --- TTLs --------------------------------------------------------------------------------------

/// The keys with a TTL to watch, and those without: checkpoints, user data, a conversation.
fn timed_keys(ks: &Keyspace) -> Vec<(Key, Option<u64>)> {
    vec![
        (ks.record(RecordKind::Checkpoint, "short"), Some(5_000)),
        (
            ks.record(RecordKind::Checkpoint, "ten-days"),
            Some(864_000_000),
        ),
        (ks.record(RecordKind::Checkpoint, "forever"), None),
        (ks.user_entry("u", "ns", "k:1"), Some(120_000)),
        (ks.user_entry("u", "ns", "k:2"), None),
        (ks.conversation("chat-1"), Some(90_000)),
        (ks.conversation("chat-2"), None),
    ]
}

fn pttls(node: Node<'_>, keys: &[Key]) -> Vec<i64> {
    keys.iter()
        .map(|key| {
            node.call(&Cmd::new("PTTL", key.as_bytes()))
                .as_int()
                .unwrap()
        })
        .collect()
}

/// Each target TTL is at most the source's, and less by at most a second.
fn check_ttls(what: &str, source: &[i64], target: &[i64], keys: &[Key]) {
    for ((s, t), key) in source.iter().zip(target).zip(keys) {
        if *s == -1 {
            assert_eq!(*t, -1, "{what}: {key:?} gained a TTL");
        } else {
            assert!(
                *s > 0 && *t > 0 && t <= s && s - t <= TTL_TOLERANCE_MS,
                "{what}: {key:?} had {s} ms left at the source and {t} at the target"
            );
        }
    }
}

async fn ttls_within_a_second<R: Runtime>() {
    let single = Node::shared_single();
    let cluster = Node::shared_cluster();
    let legacy_client = single.client::<R>().await;
    let cluster_client = cluster.client::<R>().await;
    let prefix = unique_prefix("mig-ttl");
    let legacy = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    let commands: Vec<Cmd> = timed_keys(&legacy)
        .into_iter()
        .map(|(key, ttl)| {
            let cmd = Cmd::new("SET", key.as_bytes()).arg("v");
            match ttl {
                Some(ms) => cmd.arg("PX").arg(ms.to_string()),
                None => cmd,
            }
        })
        .collect();
    single.run(&commands);
    let legacy_keys: Vec<Key> = timed_keys(&legacy).into_iter().map(|(k, _)| k).collect();
    let cluster_ks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
    let cluster_keys: Vec<Key> = timed_keys(&cluster_ks)
        .into_iter()
        .map(|(k, _)| k)
        .collect();

    let at_source = pttls(single, &legacy_keys);
    let options = MigrateOptions::new(prefix.as_str());
    migrate_to_cluster_layout(&legacy_client, &cluster_client, &options, &mut |_| {})
        .await
        .unwrap();
    let at_target = pttls(cluster, &cluster_keys);
    check_ttls("forward", &at_source, &at_target, &cluster_keys);
    // The expiring indexes are scored with the target's expiry time, or +inf.
    digest(cluster, Layout::Cluster, &prefix).assert_indexes_agree();

    // The bots ran on the cluster; the rollback into another prefix copies from them.
    cluster
        .start_bots::<R>(Layout::Cluster, &prefix)
        .await
        .unwrap();
    let back = unique_prefix("mig-ttl-back");
    let back_ks = Keyspace::new(Layout::Legacy, back.as_str()).unwrap();
    let back_keys: Vec<Key> = timed_keys(&back_ks).into_iter().map(|(k, _)| k).collect();
    let at_source = pttls(cluster, &cluster_keys);
    let mut rollback = RollbackOptions::new(prefix.as_str());
    rollback.target_prefix = Some(back);
    rollback_to_legacy_layout(&cluster_client, &legacy_client, &rollback, &mut |_| {})
        .await
        .unwrap();
    let at_target = pttls(single, &back_keys);
    check_ttls("rollback", &at_source, &at_target, &back_keys);
}

// --- counters and schedules ----------------------------------------------------------------

/// A counter namespace, its key builder and its digest map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Counter {
    Fence,
    Term,
    Cursor,
}

impl Counter {
    fn key(self, ks: &Keyspace, name: &str) -> Key {
        match self {
            Counter::Fence => ks.lock_fence(name),
            Counter::Term => ks.leader_term(name),
            Counter::Cursor => ks.cursor(name),
        }
    }

    fn namespace(self) -> Namespace {
        match self {
            Counter::Fence => Namespace::Fences,
            Counter::Term => Namespace::Terms,
            Counter::Cursor => Namespace::Cursors,
        }
    }
}

/// A canonical integer: one of the pool's edge values, or any 63-bit value (negative for
/// cursors only: fences and terms start at 1).
fn integer(rng: &mut Rng, negative: bool) -> String {
    if rng.chance(60) {
        let pool = if negative { TOKENS } else { &TOKENS[..8] };
        return (*rng.pick(pool)).to_owned();
    }
    let n = (rng.next_u64() >> 1) as i64;
    if negative && rng.chance(30) {
        (-n).to_string()
    } else {
        n.to_string()
    }
}

fn int(text: &str) -> i128 {
    text.parse().unwrap()
}

/// A schedule record as written and as read back.
fn sched(token: &str, holder: Option<&str>, deleted: bool, data: &str) -> Sched {
    Sched {
        token: Some(token.to_owned()),
        holder: holder.map(str::to_owned),
        deleted,
        data: (!deleted).then(|| Blob(data.as_bytes().to_vec())),
    }
}

fn write_sched(ks: &Keyspace, id: &str, s: &Sched) -> Vec<Cmd> {
    let key = ks.record(RecordKind::Schedule, id);
    let mut cmd = Cmd::new("HSET", key.as_bytes())
        .arg("token")
        .arg(s.token.as_deref().unwrap())
        .arg("deleted")
        .arg(if s.deleted { "1" } else { "0" });
    if let Some(holder) = &s.holder {
        cmd = cmd.arg("holder").arg(holder);
    }
    if let Some(data) = &s.data {
        cmd = cmd.arg("data").arg(&data.0);
    }
    let mut out = vec![cmd];
    if let Some(index) = ks.record_index_of(RecordKind::Schedule, id) {
        if !s.deleted {
            out.push(Cmd::new("ZADD", index.as_bytes()).arg("0").arg(id));
        }
    }
    out
}

/// The model: what the target must hold after the run, and the report's counts.
#[derive(Default)]
struct Model {
    source: Vec<Cmd>,
    target: Vec<Cmd>,
    counters: BTreeMap<(Counter, String), String>,
    schedules: BTreeMap<String, Sched>,
    counts: BTreeMap<Namespace, Counts>,
}

impl Model {
    fn count(&mut self, ns: Namespace, code: u8) {
        let c = self.counts.entry(ns).or_default();
        match code {
            0 => c.kept += 1,
            1 => c.copied += 1,
            _ => c.overwritten += 1,
        }
    }

    fn build(rng: &mut Rng, src: &Keyspace, tgt: &Keyspace, overwrite: bool) -> Model {
        let mut m = Model::default();
        for i in 0..30 {
            let counter = *rng.pick(&[Counter::Fence, Counter::Term, Counter::Cursor]);
            let name = format!("n{i}:{}", rng.pick(&["x", "{y}", "😀", ""]));
            let s = integer(rng, counter == Counter::Cursor);
            let t = rng
                .chance(70)
                .then(|| integer(rng, counter == Counter::Cursor));
            m.source
                .push(Cmd::new("SET", counter.key(src, &name).as_bytes()).arg(&s));
            let (end, code) = match &t {
                None => (s.clone(), 1),
                Some(t) => {
                    m.target
                        .push(Cmd::new("SET", counter.key(tgt, &name).as_bytes()).arg(t));
                    if overwrite && counter == Counter::Cursor {
                        // A mirror sets a cursor to the source's value; fences and terms are
                        // only ever raised.
                        (s.clone(), if s == *t { 0 } else { 2 })
                    } else if int(&s) > int(t) {
                        (s.clone(), 2)
                    } else {
                        (t.clone(), 0)
                    }
                }
            };
            m.count(counter.namespace(), code);
            m.counters.insert((counter, name), end);
        }
        for i in 0..20 {
            let id = format!("s{i}:{}", rng.pick(&["x", "{y}", "a b", ""]));
            let a = (*rng.pick(TOKENS)).to_owned();
            let src_holder = rng.chance(80).then(|| format!("hs{i}"));
            let source = sched(&a, src_holder.as_deref(), rng.chance(25), &format!("ds{i}"));
            m.source.extend(write_sched(src, &id, &source));
            let stored = rng.chance(75).then(|| {
                // Often the same token, to reach the equal-token rules.
                let b = if rng.chance(30) {
                    a.clone()
                } else {
                    (*rng.pick(TOKENS)).to_owned()
                };
                let holder = rng.chance(80).then(|| format!("ht{i}"));
                sched(&b, holder.as_deref(), rng.chance(25), &format!("dt{i}"))
            });
            let (end, code) = match stored {
                None => (source, 1),
                Some(stored) => {
                    m.target.extend(write_sched(tgt, &id, &stored));
                    let b = stored.token.clone().unwrap();
                    match int(&a).cmp(&int(&b)) {
                        std::cmp::Ordering::Greater => (source, 2),
                        std::cmp::Ordering::Less if overwrite => (
                            // The source's record with the stored (higher) token and holder.
                            Sched {
                                token: Some(b),
                                holder: stored.holder.clone(),
                                ..source
                            },
                            2,
                        ),
                        std::cmp::Ordering::Equal if overwrite => {
                            let end = Sched {
                                holder: source.holder.clone().or(stored.holder.clone()),
                                ..source
                            };
                            // The same record is kept (and written again).
                            let same = end.holder == stored.holder
                                && end.deleted == stored.deleted
                                && (end.deleted || end.data == stored.data);
                            (end, if same { 0 } else { 2 })
                        }
                        _ => (stored, 0),
                    }
                }
            };
            m.count(Namespace::Schedules, code);
            m.schedules.insert(id, end);
        }
        m
    }

    fn check(
        &self,
        what: &str,
        node: Node<'_>,
        layout: Layout,
        prefix: &str,
        report: &MigrationReport,
    ) {
        let d = digest(node, layout, prefix);
        let mut got = BTreeMap::new();
        for (counter, name) in self.counters.keys() {
            let map = match counter {
                Counter::Fence => &d.fences,
                Counter::Term => &d.terms,
                Counter::Cursor => &d.cursors,
            };
            got.insert(
                (*counter, name.clone()),
                map.get(name).cloned().unwrap_or_default(),
            );
        }
        assert_eq!(got, self.counters, "{what}: counters");
        assert_eq!(d.schedules, self.schedules, "{what}: schedules");
        d.assert_indexes_agree();
        assert_eq!(report.namespaces, self.counts, "{what}: {report:#?}");
    }
}

async fn counters_and_tokens_never_go_back<R: Runtime>() {
    let single = Node::shared_single();
    let cluster = Node::shared_cluster();
    let legacy_client = single.client::<R>().await;
    let cluster_client = cluster.client::<R>().await;
    for seed in seeds(SEEDS) {
        let mut rng = Rng::new(seed);
        for overwrite in [false, true] {
            // Forward: legacy on the single node into the cluster.
            let prefix = unique_prefix("mig-ctr");
            let src = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
            let tgt = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
            let model = Model::build(&mut rng, &src, &tgt, overwrite);
            single.run(&model.source);
            cluster.run(&model.target);
            // Copy-only keeps the target's values; the mirror replaces them (counters are
            // still only raised).
            let mut options = MigrateOptions::new(prefix.as_str());
            options.mirror = overwrite;
            let report =
                migrate_to_cluster_layout(&legacy_client, &cluster_client, &options, &mut |_| {})
                    .await
                    .unwrap();
            let what = format!("seed {seed}, forward, overwrite {overwrite}");
            model.check(&what, cluster, Layout::Cluster, &prefix, &report);

            // Rollback: the cluster layout into a legacy prefix that holds values of its own.
            let prefix = unique_prefix("mig-ctr");
            let src = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
            let tgt = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
            let model = Model::build(&mut rng, &src, &tgt, overwrite);
            cluster.run(&model.source);
            // A migrated keyspace carries the marker and its lifecycle records; the bots ran on
            // the cluster side since, so the legacy side's values are a stale copy's.
            cluster.run(&[Cmd::new("SET", src.marker().as_bytes()).arg("cluster:v1")]);
            let records = migrated_records(&tgt, &src, true);
            single.run(&records[..1]);
            cluster.run(&records[1..]);
            single.run(&model.target);
            let mut rollback = RollbackOptions::new(prefix.as_str());
            rollback.mirror = overwrite;
            let report =
                rollback_to_legacy_layout(&cluster_client, &legacy_client, &rollback, &mut |_| {})
                    .await
                    .unwrap();
            let what = format!("seed {seed}, rollback, mirror {overwrite}");
            model.check(&what, single, Layout::Legacy, &prefix, &report);
        }
    }
}

both_drivers!(ttls_within_a_second, counters_and_tokens_never_go_back);
