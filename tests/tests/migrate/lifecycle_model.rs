//! The migration's lifecycle against a model: random sequences of steps (migrate in place, into
//! another node or into the cluster, with or without `delete_source`; rollbacks mirroring or
//! copy-only, with or without `delete_source`; cleanups; bots starting, writing and deleting
//! between the steps), some of them killed at a random batch and run again, checked after every
//! step against what the live side must hold.
//!
//! The model knows which side the bots run on (the live side) and what they wrote; after every
//! step, taken or refused, killed or not, the live side reads back exactly that through a store
//! (I1: nothing it deleted came back; I2: nothing it wrote was lost). It also knows what each
//! other side holds when a step made it exactly (a mirror of a side it knows, or a cleanup), so
//! that the bots move only to a side that holds their data, as an operator moves them after a
//! copy; and a few outcomes every correct lifecycle must have: a copy from the live side into a
//! side no bot ever used, or into a deleted one, is taken; a copy into the live side after its
//! bots wrote is refused; the side the bots left, once they run on its exact copy, may be
//! deleted; the live side may not.
//!
//! Each run prints its seed; `BOTMESH_LIFECYCLE_SEED=<seed>` replays one.

use std::collections::{BTreeMap, BTreeSet};

use botmesh_redis_core::migrate::{
    delete_abandoned_side, migrate_to_cluster_layout, rollback_to_legacy_layout, CleanupOptions,
    MigrateOptions, MigrationReport, RollbackOptions,
};
use botmesh_redis_core::{Error, Executor, Layout};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::keyspace::{Budget, Cut, Node, Rng};
use botmesh_redis_tests::lifecycle::{assert_holds, read, Data, Op, Side};
use botmesh_redis_tests::{both_drivers, unique_prefix};

/// The variable that replays one seed.
const SEED_VAR: &str = "BOTMESH_LIFECYCLE_SEED";
/// Seeds run every time, besides one drawn from the clock.
const FIXED: &[u64] = &[1, 2, 3];
/// Actions per run.
const ACTIONS: usize = 24;

/// The keyspaces a run moves between. `L0` and `Cin` are the two layouts of one prefix on one
/// node (an in-place migration); `Cb` is the cluster layout on another node, `Cc` on the
/// cluster; `L1` is a legacy keyspace on the other node (a rollback into another node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Id {
    L0,
    Cin,
    Cb,
    Cc,
    L1,
}

const LEGACY: [Id; 2] = [Id::L0, Id::L1];
const CLUSTER: [Id; 3] = [Id::Cin, Id::Cb, Id::Cc];

/// Where the names both layouts share live: one set of keys per server and prefix.
fn place(id: Id) -> u8 {
    match id {
        Id::L0 | Id::Cin => 0,
        Id::Cb => 1,
        Id::Cc => 2,
        Id::L1 => 3,
    }
}

/// The layout part of a bot's data (records, messages, checkpoints, user data) and the part
/// that lives in the names both layouts share (conversations, the cursor, the outbox).
fn split(d: &Data) -> (Data, Data) {
    let shared = Data {
        conversations: d.conversations.clone(),
        cursor: d.cursor,
        outbox: d.outbox.clone(),
        ..Data::default()
    };
    let layout = Data {
        chats: d.chats.clone(),
        messages: d.messages.clone(),
        checkpoints: d.checkpoints.clone(),
        user: d.user.clone(),
        ..Data::default()
    };
    (layout, shared)
}

fn join(layout: &Data, shared: &Data) -> Data {
    Data {
        conversations: shared.conversations.clone(),
        cursor: shared.cursor,
        outbox: shared.outbox.clone(),
        ..layout.clone()
    }
}

/// The model of a run: what each side's layout part and each place's shared names hold (`None`
/// when unknown: a copy-only run over older keys, a killed run), which sides have a lifecycle
/// record and which a cleanup deleted, and where the bots run.
struct World {
    sides: BTreeMap<Id, Side>,
    layout: BTreeMap<Id, Option<Data>>,
    shared: BTreeMap<u8, Option<Data>>,
    recorded: BTreeSet<Id>,
    /// Sides a killed step may have given a record (or not).
    maybe_recorded: BTreeSet<Id>,
    deleted: BTreeSet<Id>,
    untouched: BTreeSet<Id>,
    live: Id,
    /// The live side's bots wrote since the last step that copied from or into it.
    written: bool,
    /// Bots started on the live side since the last step that copied from or into it.
    started: bool,
    /// The side the bots left for the live side, whose exact copy the live side was, until a
    /// step changes either.
    left: Option<Id>,
    /// The target of the last copy from the live side while it is an exact copy of the bots'
    /// data (no write since): where an operator moves the bots.
    fresh: Option<Id>,
    /// Numbers values and outbox keys.
    n: u64,
}

impl World {
    fn new(prefix: &str) -> World {
        let single = Node::shared_single();
        let other = Node::other_single();
        let side = |node, layout, prefix: &str| Side {
            node,
            layout,
            prefix: prefix.to_owned(),
        };
        let back = format!("{prefix}-r");
        let sides = BTreeMap::from([
            (Id::L0, side(single, Layout::Legacy, prefix)),
            (Id::Cin, side(single, Layout::Cluster, prefix)),
            (Id::Cb, side(other, Layout::Cluster, prefix)),
            (
                Id::Cc,
                side(Node::shared_cluster(), Layout::Cluster, prefix),
            ),
            (Id::L1, side(other, Layout::Legacy, &back)),
        ]);
        World {
            layout: sides
                .keys()
                .map(|id| (*id, Some(Data::default())))
                .collect(),
            shared: sides
                .keys()
                .map(|id| (place(*id), Some(Data::default())))
                .collect(),
            recorded: BTreeSet::new(),
            maybe_recorded: BTreeSet::new(),
            deleted: BTreeSet::new(),
            untouched: sides.keys().copied().filter(|id| *id != Id::L0).collect(),
            sides,
            live: Id::L0,
            written: false,
            started: true,
            left: None,
            fresh: None,
            n: 0,
        }
    }

    fn side(&self, id: Id) -> &Side {
        &self.sides[&id]
    }

    /// What a bot reading `id` sees, when known.
    fn content(&self, id: Id) -> Option<Data> {
        Some(join(
            self.layout[&id].as_ref()?,
            self.shared[&place(id)].as_ref()?,
        ))
    }

    /// What the bots wrote: the live side's content.
    fn data(&self) -> Data {
        self.content(self.live)
            .expect("the live side's content is always known")
    }

    fn set(&mut self, id: Id, d: Option<Data>, shared_too: bool) {
        match d {
            Some(d) => {
                let (layout, shared) = split(&d);
                self.layout.insert(id, Some(layout));
                if shared_too {
                    self.shared.insert(place(id), Some(shared));
                }
            }
            None => {
                self.layout.insert(id, None);
                if shared_too {
                    self.shared.insert(place(id), None);
                }
            }
        }
    }

    /// The other layout of `id`'s prefix on its server, if the run has one.
    fn sibling(&self, id: Id) -> Option<Id> {
        self.sides
            .keys()
            .copied()
            .find(|o| *o != id && place(*o) == place(id))
    }

    /// Whether the model cannot tell if `id`'s sibling has a record (a killed step).
    fn sibling_uncertain(&self, id: Id) -> bool {
        self.sibling(id)
            .is_some_and(|s| self.maybe_recorded.contains(&s) && !self.recorded.contains(&s))
    }

    /// Whether the names both layouts share at `id`'s place are its sibling's too: the sibling
    /// has a record no cleanup deleted, or legacy data.
    fn sibling_in_use(&self, id: Id) -> bool {
        self.sibling(id).is_some_and(|s| {
            (self.recorded.contains(&s) && !self.deleted.contains(&s))
                || (self.side(s).layout == Layout::Legacy
                    && !self.recorded.contains(&s)
                    && self.layout[&s].as_ref() != Some(&Data::default()))
        })
    }
}

/// One action of a run.
#[derive(Clone, Debug)]
enum Action {
    /// The bots (restarted on the live side) write and delete.
    Bots(Vec<Op>),
    /// The bots move to this side (stopped on the live one, started here).
    Switch(Id),
    /// `migrate_to_cluster_layout` from a legacy side into a cluster side.
    Migrate {
        from: Id,
        to: Id,
        delete_source: bool,
    },
    /// `rollback_to_legacy_layout` from a cluster side into a legacy side.
    Rollback {
        from: Id,
        to: Id,
        mirror: bool,
        delete_source: bool,
    },
    /// `delete_abandoned_side` of `side`, the other side being `other`.
    Cleanup { side: Id, other: Id },
}

fn draw(rng: &mut Rng, w: &mut World) -> Action {
    let pick = |rng: &mut Rng, ids: &[Id]| *rng.pick(ids);
    match rng.range(0, 10) {
        0..=2 => {
            let ops = (0..rng.range(1, 6))
                .map(|_| Op::random(rng, &mut w.n))
                .collect();
            Action::Bots(ops)
        }
        3 => {
            // Mostly the fresh copy (the operator's move); sometimes another side, which the
            // operator does not move to.
            let all: Vec<Id> = w.sides.keys().copied().filter(|id| *id != w.live).collect();
            Action::Switch(match w.fresh {
                Some(fresh) if rng.chance(90) => fresh,
                _ => pick(rng, &all),
            })
        }
        4..=5 => {
            // Mostly from the live side.
            let from = if LEGACY.contains(&w.live) && rng.chance(80) {
                w.live
            } else {
                pick(rng, &LEGACY)
            };
            Action::Migrate {
                from,
                to: pick(rng, &CLUSTER),
                delete_source: rng.chance(25),
            }
        }
        6..=7 => {
            let from = if CLUSTER.contains(&w.live) && rng.chance(80) {
                w.live
            } else {
                pick(rng, &CLUSTER)
            };
            let to = pick(rng, &LEGACY);
            // In place from the live side, always a mirror: the rollback removes the cluster
            // side's marker, so the bots go to the legacy side next, and the model follows them
            // only onto a side whose content it knows.
            let mirror = (from == w.live && place(from) == place(to)) || rng.chance(80);
            Action::Rollback {
                from,
                to,
                mirror,
                delete_source: mirror && rng.chance(25),
            }
        }
        _ => {
            let side = match w.left {
                Some(left) if rng.chance(60) => left,
                _ => pick(rng, &[Id::L0, Id::Cin, Id::Cb, Id::Cc, Id::L1]),
            };
            let others: Vec<Id> = if LEGACY.contains(&side) {
                CLUSTER.to_vec()
            } else {
                LEGACY.to_vec()
            };
            let other = if others.contains(&w.live) && rng.chance(70) {
                w.live
            } else {
                pick(rng, &others)
            };
            Action::Cleanup { side, other }
        }
    }
}

/// How a step ended.
#[derive(Debug)]
enum Outcome {
    Taken(String),
    Refused(String),
}

fn outcome<T: std::fmt::Debug>(result: Result<T, Error>) -> Outcome {
    match result {
        Ok(report) => Outcome::Taken(format!("{report:?}")),
        Err(Error::Refused(refusal)) => Outcome::Refused(format!("{refusal:?}")),
        Err(e) => panic!("a step failed otherwise: {e}"),
    }
}

/// Runs a step on `source` and `target` clients, wrapped by `budget` when killed.
async fn step<S: Executor, T: Executor>(
    source: &S,
    target: &T,
    action: &Action,
    w: &World,
) -> Result<String, Error> {
    let prefix = |id: Id| w.side(id).prefix.clone();
    let quiet = &mut |_: &botmesh_redis_core::migrate::Progress| {};
    match action {
        Action::Migrate {
            from,
            to,
            delete_source,
        } => {
            let mut o = MigrateOptions::new(prefix(*from));
            o.target_prefix = Some(prefix(*to));
            o.delete_source = *delete_source;
            o.scan_count = 20;
            migrate_to_cluster_layout(source, target, &o, quiet)
                .await
                .map(|r: MigrationReport| format!("{:?}", r.copy))
        }
        Action::Rollback {
            from,
            to,
            mirror,
            delete_source,
        } => {
            let mut o = RollbackOptions::new(prefix(*from));
            o.target_prefix = Some(prefix(*to));
            o.mirror = *mirror;
            o.delete_source = *delete_source;
            o.scan_count = 20;
            rollback_to_legacy_layout(source, target, &o, quiet)
                .await
                .map(|r| format!("{:?}", r.copy))
        }
        Action::Cleanup { side, other } => {
            let mut o = CleanupOptions::new(prefix(*side), w.side(*side).layout);
            o.other_prefix = Some(prefix(*other));
            o.scan_count = 20;
            delete_abandoned_side(source, target, &o, quiet)
                .await
                .map(|r| format!("{} deleted", r.total()))
        }
        _ => unreachable!("not a step"),
    }
}

/// The two sides a step runs between: (source or side to delete, target or other side).
fn ends(action: &Action) -> (Id, Id) {
    match action {
        Action::Migrate { from, to, .. } | Action::Rollback { from, to, .. } => (*from, *to),
        Action::Cleanup { side, other } => (*side, *other),
        _ => unreachable!("not a step"),
    }
}

async fn run_seed<R: Runtime>(seed: u64) {
    let mut rng = Rng::new(seed);
    let mut w = World::new(&unique_prefix("lc-model"));
    let mut log: Vec<String> = Vec::new();
    let mut clients: BTreeMap<Id, Client<R>> = BTreeMap::new();
    for (id, side) in &w.sides {
        clients.insert(*id, side.client::<R>().await);
    }
    // The bots run on the legacy keyspace first.
    let first: Vec<Op> = (0..8).map(|_| Op::random(&mut rng, &mut w.n)).collect();
    let mut next = Some(Action::Bots(first));
    for at in 0..ACTIONS {
        let action = next.take().unwrap_or_else(|| draw(&mut rng, &mut w));
        let context = |log: &[String]| format!("seed {seed}, action {at}:\n{}", log.join("\n"));
        match &action {
            Action::Bots(ops) => {
                // The bots restart on the live side (every step needs them stopped) and write.
                let store = match w.side(w.live).start::<R>().await {
                    Ok(store) => store,
                    Err(e) => panic!("{}\nbots cannot start on {:?}: {e}", context(&log), w.live),
                };
                if w.side(w.live).layout == Layout::Cluster {
                    w.recorded.insert(w.live);
                }
                let mut d = w.data();
                for op in ops {
                    op.apply(&store).await.unwrap();
                    op.model(&mut d);
                }
                w.set(w.live, Some(d), true);
                w.written = true;
                w.started = true;
                w.fresh = None;
                w.untouched.remove(&w.live);
                log.push(format!("bots on {:?}: {} writes", w.live, ops.len()));
            }
            Action::Switch(to) => {
                let to = *to;
                if w.fresh != Some(to) || w.content(to) != Some(w.data()) {
                    // An operator moves the bots to a side only after a copy of their data.
                    log.push(format!(
                        "(no move to {to:?}: it is no fresh copy of the data)"
                    ));
                    continue;
                }
                match w.side(to).start::<R>().await {
                    Ok(_) => {
                        log.push(format!("bots move {:?} -> {to:?}", w.live));
                        if w.side(to).layout == Layout::Cluster {
                            w.recorded.insert(to);
                        }
                        w.left = Some(w.live);
                        w.live = to;
                        w.written = false;
                        w.started = true;
                        w.fresh = None;
                        w.untouched.remove(&to);
                    }
                    Err(e) => log.push(format!("bots refused on {to:?}: {e}")),
                }
            }
            step_action => {
                let (a, b) = ends(step_action);
                let (ca, cb) = (clients[&a].clone(), clients[&b].clone());
                // Sometimes killed at a random batch first, then run again.
                if rng.chance(25) {
                    let cut = if rng.chance(50) {
                        Cut::BeforeSend
                    } else {
                        Cut::AfterReply
                    };
                    let budget = Budget::new(rng.range(0, 40) as usize, cut);
                    let killed = step(
                        &budget.wrap(ca.clone()),
                        &budget.wrap(cb.clone()),
                        step_action,
                        &w,
                    )
                    .await;
                    let note = match &killed {
                        Ok(_) => {
                            apply_step(&mut w, step_action, &context(&log));
                            "taken before the cut".to_owned()
                        }
                        Err(Error::NotSent { .. } | Error::ReplyLost { .. }) => {
                            killed_step(&mut w, step_action);
                            format!("killed ({cut:?})")
                        }
                        Err(Error::Refused(r)) => format!("refused before the cut: {r:?}"),
                        Err(e) => panic!("{}\na cut step failed otherwise: {e}", context(&log)),
                    };
                    log.push(format!("{step_action:?}: {note}"));
                    assert_live_or_moved::<R>(&w, step_action, &context(&log)).await;
                }
                let result = step(&ca, &cb, step_action, &w).await;
                let got = outcome(result);
                log.push(match &got {
                    Outcome::Taken(report) => format!("{step_action:?}: taken ({report})"),
                    Outcome::Refused(why) => format!("{step_action:?}: refused ({why})"),
                });
                check_expected(&w, step_action, &got, &context(&log));
                if let Outcome::Taken(_) = got {
                    apply_step(&mut w, step_action, &context(&log));
                }
            }
        }
        // I1 and I2: the live side holds exactly what the bots wrote.
        assert_holds::<R>(&context(&log), w.side(w.live), &w.data()).await;
        // A side a step made exactly holds what the model says.
        if let Action::Migrate { to, .. } | Action::Rollback { to, .. } = &action {
            if let Some(expected) = w.content(*to) {
                let what = format!("{}\n(the target {to:?})", context(&log));
                assert_holds::<R>(&what, w.side(*to), &expected).await;
            }
        }
    }
    eprintln!("seed {seed}: {}", log.join("; "));
}

/// What every correct lifecycle must do with this step (the rest only has to keep the live
/// side whole, which the caller checks after every step).
fn check_expected(w: &World, action: &Action, got: &Outcome, context: &str) {
    let taken = matches!(got, Outcome::Taken(_));
    match action {
        Action::Migrate { from, to, .. } | Action::Rollback { from, to, .. } => {
            if *to == w.live && w.written {
                assert!(
                    !taken,
                    "{context}\na copy into the live side after its bots wrote"
                );
            }
            // From the live side into a side no step or bot touched (or a cleanup deleted):
            // taken, unless the target's place holds a sibling in use.
            let in_place = place(*from) == place(*to);
            let open = w.untouched.contains(to) || w.deleted.contains(to);
            let sibling_free = !w.sibling_in_use(*to) && !w.sibling_uncertain(*to);
            if *from == w.live && w.started && open && (in_place || sibling_free) {
                assert!(
                    taken,
                    "{context}\na copy from the live side into an unused side"
                );
            }
        }
        Action::Cleanup { side, other } => {
            if *side == w.live && w.written {
                assert!(
                    !taken,
                    "{context}\nthe live side was deleted after its bots wrote"
                );
            }
            if w.left == Some(*side) && *other == w.live {
                assert!(
                    taken,
                    "{context}\nthe side the bots left could not be deleted"
                );
            }
        }
        _ => {}
    }
}

/// What a taken step did to the model.
fn apply_step(w: &mut World, action: &Action, context: &str) {
    match action {
        Action::Migrate {
            from,
            to,
            delete_source,
        } => copied(w, *from, *to, true, *delete_source, context),
        Action::Rollback {
            from,
            to,
            mirror,
            delete_source,
        } => {
            copied(w, *from, *to, *mirror, *delete_source, context);
            // In place, a complete rollback removes the cluster side's marker: its store no
            // longer starts over the restored legacy data, and the bots go to the legacy side,
            // which holds their data.
            if place(*from) == place(*to) && *from == w.live && w.content(*to) == Some(w.data()) {
                w.live = *to;
                w.left = None;
                w.fresh = None;
                w.written = false;
                w.started = false;
            }
        }
        Action::Cleanup { side, other } => deleted(w, *side, *other, context),
        _ => {}
    }
}

/// What a killed step may have left: its target (or the side it was deleting) unknown.
/// After a step cut short: the live side holds what the bots wrote, or, for a copy out of it
/// with `delete_source` cut while it deleted the source (the copy complete, the marker written
/// first), the target does; the rerun that follows finishes the deletion
/// (`docs/migration.md`).
async fn assert_live_or_moved<R: Runtime>(w: &World, action: &Action, context: &str) {
    let moving = match action {
        Action::Migrate {
            from,
            to,
            delete_source: true,
        }
        | Action::Rollback {
            from,
            to,
            delete_source: true,
            ..
        } if *from == w.live => Some(*to),
        _ => None,
    };
    if let Some(to) = moving {
        let on_source = read(&w.side(w.live).store::<R>().await).await;
        if on_source != w.data() {
            let what = format!(
                "{context}
(the source partly deleted: the target holds it all)"
            );
            assert_holds::<R>(&what, w.side(to), &w.data()).await;
            return;
        }
    }
    assert_holds::<R>(context, w.side(w.live), &w.data()).await;
}

fn killed_step(w: &mut World, action: &Action) {
    let (a, b) = ends(action);
    let separate = place(a) != place(b);
    let touched = match action {
        Action::Cleanup { side, .. } => *side,
        _ => b,
    };
    for id in [a, b] {
        if !w.recorded.contains(&id) {
            w.maybe_recorded.insert(id);
        }
    }
    w.untouched.remove(&a);
    w.untouched.remove(&b);
    // Its records name a new copy: the bots have not started since on either side.
    if a == w.live || b == w.live {
        w.started = false;
    }
    w.fresh = None;
    if touched != w.live {
        let shared_too = separate && (!w.sibling_in_use(touched) || w.sibling_uncertain(touched));
        w.set(touched, None, shared_too);
    }
    if w.left.is_some_and(|l| l == a || l == b) {
        w.left = None;
    }
}

fn copied(w: &mut World, from: Id, to: Id, mirror: bool, delete_source: bool, context: &str) {
    let separate = place(from) != place(to);
    let source = w.content(from);
    let empty = w.layout[&to].as_ref() == Some(&Data::default())
        && (!separate || w.shared[&place(to)].as_ref() == Some(&Data::default()));
    // A mirror makes the target hold the source's data; copy-only only when it held nothing.
    let result = source.filter(|_| mirror || empty);
    let exact_copy_of_live = from == w.live && result.as_ref() == Some(&w.data());
    if to == w.live {
        // Only from an exact copy of the live side, before its bots wrote again: the same data
        // (the caller checks the live side holds it still).
        assert!(
            !w.written,
            "{context}\na copy into the live side after its bots wrote"
        );
    } else {
        // In place the names both layouts share are one set of keys: only the layout part
        // moves.
        w.set(to, result, separate);
    }
    if from == w.live || to == w.live {
        w.written = false;
        w.started = false;
    }
    w.fresh = exact_copy_of_live.then_some(to);
    for id in [from, to] {
        w.recorded.insert(id);
        w.untouched.remove(&id);
        w.deleted.remove(&id);
    }
    if w.left.is_some_and(|l| l == from || l == to) {
        w.left = None;
    }
    if delete_source {
        deleted(w, from, to, context);
    }
}

fn deleted(w: &mut World, side: Id, other: Id, context: &str) {
    if side == w.live {
        // Only a move (`delete_source` right after its copy, no bot having written since):
        // the data is on the copy, where the bots start next.
        assert!(
            !w.written,
            "{context}\nthe live side was deleted after its bots wrote"
        );
        let data = w.data();
        if w.content(other).is_none() {
            // A killed step left the other side unknown to the model (a step the lifecycle
            // refused at its first check, before it wrote, leaves it as it was), and the
            // lifecycle judged it a complete copy of this one: the caller checks right after
            // this step that it holds the data, on the servers.
            let shared_unknown = w.shared[&place(other)].is_none();
            w.set(other, Some(data.clone()), shared_unknown);
        }
        assert_eq!(
            w.content(other),
            Some(data),
            "{context}\nthe live side deleted without a copy"
        );
        w.live = other;
        w.written = false;
        w.started = false;
        w.fresh = None;
    }
    let keep_shared = place(side) == place(other) || w.sibling_in_use(side);
    w.layout.insert(side, Some(Data::default()));
    if w.sibling_uncertain(side) && place(side) != place(other) {
        w.shared.insert(place(side), None);
    } else if !keep_shared {
        w.shared.insert(place(side), Some(Data::default()));
    }
    w.deleted.insert(side);
    if w.left == Some(side) {
        w.left = None;
    }
}

async fn lifecycle_against_the_model<R: Runtime>() {
    let seeds: Vec<u64> = match std::env::var(SEED_VAR) {
        Ok(seed) => vec![seed.parse().expect("BOTMESH_LIFECYCLE_SEED is a number")],
        Err(_) => {
            let drawn = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
            FIXED.iter().copied().chain([drawn]).collect()
        }
    };
    for seed in seeds {
        eprintln!("lifecycle seed {seed} (replay: {SEED_VAR}={seed})");
        run_seed::<R>(seed).await;
    }
}

both_drivers!(lifecycle_against_the_model);
