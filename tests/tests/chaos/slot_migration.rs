//! Live slot migrations under open-loop load (`tests/src/chaos.rs`):
//!
//! 1. the slot of a chat that is being written, listed and deleted (`delete_chat` runs while
//!    the slot's keys move, batch after batch): no error surfaces; a listing of another chat of
//!    the same slot is exact every time; afterwards every message acknowledged before the
//!    delete began is gone, every one saved after it returned is there, and every message is
//!    whole (item and log entry together, no item without its entry);
//! 2. the slot of a chat-record bucket index, during full listings of the chat records: every
//!    listing is exact.
//!
//! Multi-key scripts on a slot whose keys are split between two masters get `TRYAGAIN` until
//! the move ends (Redis answers them while a slot's keys sit on two nodes), so the client's retry budget (40 attempts, about 18 s) is set
//! above the time one migration takes here; the migration is paced by the load's progress.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_core::keys::bucket;
use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::{ClientOptions, Error, Keyspace};
use botmesh_redis_core::{Limit, Store};
use botmesh_redis_tests::chaos::{
    assert_no_failures, assign_slot, migrate_batch, open_loop, pipeline_at, start_cluster,
    started_store, Call, Clock, Fault, Kind, Losses, Outcome, Recorder, Report, Scale,
};
use botmesh_redis_tests::conformance::{driver_name, Client, Runtime};
use botmesh_redis_tests::{both_drivers, ClusterOptions};

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const BUSY: &str = "busy-chat";
const OLD_MESSAGES: u64 = 2_500;
const STABLE_MESSAGES: u64 = 300;
const RECORDS: u64 = 200;

/// A chat id whose log shares the slot of `BUSY`'s.
fn stable_chat(ks: &Keyspace) -> String {
    let slot = ks.message_log(BUSY).slot();
    (0..)
        .map(|i| format!("stable-{i}"))
        .find(|c| ks.message_log(c).slot() == slot)
        .unwrap()
}

async fn all_messages<R: Runtime>(
    store: &Store<Client<R>>,
    chat: &str,
) -> Result<Vec<String>, Error> {
    let mut after = None;
    let mut ids = Vec::new();
    loop {
        let page = store
            .list_messages(chat, .., after.as_ref(), Limit::of::<128>())
            .await?;
        ids.extend(page.items.into_iter().map(|m| m.id));
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(ids),
        }
    }
}

async fn all_chats<R: Runtime>(store: &Store<Client<R>>) -> Result<Vec<String>, Error> {
    let mut after = None;
    let mut ids = Vec::new();
    loop {
        let page = store.list_chats(after.as_ref(), Limit::of::<90>()).await?;
        ids.extend(page.items.into_iter().map(|r| r.id));
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(ids),
        }
    }
}

/// A listing that differs from what it must be, as an error the recorder keeps.
fn exact(got: Vec<String>, expected: &[String], what: &str) -> Result<(), Error> {
    if got == expected {
        Ok(())
    } else {
        Err(Error::UnexpectedReply {
            detail: format!(
                "{what} not exact: {} ids, {} expected",
                got.len(),
                expected.len()
            ),
        })
    }
}

async fn live_migration_keeps_listings_exact_and_surfaces_no_error<R: Runtime>() {
    let _turn = TURN.lock().await;
    let scale = Scale::from_env();
    let cluster = start_cluster(ClusterOptions::new()).await;
    let request_timeout = Duration::from_secs(30);
    let retry =
        ClientOptions::cluster(cluster.seeds()).cluster_retry(40, Duration::from_millis(10));
    let store = started_store::<R>(retry, request_timeout, "migrate").await;
    let ks = store.keyspace().clone();
    let stable = stable_chat(&ks);

    // The busy chat's history, a stable chat in its slot, and the chat records.
    let mut saves = Vec::new();
    for n in 0..OLD_MESSAGES {
        let s = store.clone();
        saves.push(tokio::spawn(async move {
            s.save_message(BUSY, &format!("old{n}"), n as i64, "x".into())
                .await
        }));
    }
    let mut stable_ids: Vec<String> = (0..STABLE_MESSAGES).map(|n| format!("s{n:04}")).collect();
    for (n, id) in stable_ids.iter().enumerate() {
        let (s, id, chat) = (store.clone(), id.clone(), stable.clone());
        saves.push(tokio::spawn(async move {
            s.save_message(&chat, &id, n as i64, "y".into()).await
        }));
    }
    let mut records: Vec<String> = (0..RECORDS).map(|n| format!("rec{n}")).collect();
    for id in &records {
        let (s, id) = (store.clone(), id.clone());
        saves.push(tokio::spawn(async move {
            s.upsert_chat(&id, "z".into()).await.map(|()| true)
        }));
    }
    for s in saves {
        assert!(s.await.unwrap().unwrap());
    }
    stable_ids.sort();
    records.sort();
    let stable_ids = Arc::new(stable_ids);
    let records = Arc::new(records);

    let clock = Clock::new();
    let recorder = Recorder::new(clock);
    let busy_slot = ks.message_log(BUSY).slot();
    let limit = request_timeout * 4 + Duration::from_secs(1);
    let load = {
        let (store, recorder, stable, stable_ids, records) = (
            store.clone(),
            recorder.clone(),
            stable.clone(),
            Arc::clone(&stable_ids),
            Arc::clone(&records),
        );
        open_loop(scale, move |n| {
            let (store, recorder, stable, stable_ids, records) = (
                store.clone(),
                recorder.clone(),
                stable.clone(),
                Arc::clone(&stable_ids),
                Arc::clone(&records),
            );
            async move {
                let call = |op, target: &str, slot, write| Call {
                    op,
                    target: target.to_owned(),
                    n,
                    slot,
                    write,
                    limit,
                };
                // Mostly saves; a full listing of the stable chat and of the chat records
                // each once every 16 requests (each listing is a dozen requests or more).
                match n % 16 {
                    3 => {
                        recorder
                            .record(
                                call("list_stable", &stable, Some(busy_slot), false),
                                |_| None,
                                async {
                                    exact(
                                        all_messages(&store, &stable).await?,
                                        &stable_ids,
                                        "stable chat",
                                    )
                                },
                            )
                            .await;
                    }
                    11 => {
                        recorder
                            .record(call("list_chats", "chats", None, false), |_| None, async {
                                exact(all_chats(&store).await?, &records, "chat records")
                            })
                            .await;
                    }
                    _ => {
                        recorder
                            .record(
                                call("save", BUSY, Some(busy_slot), true),
                                |_| None,
                                store.save_message(BUSY, &format!("m{n}"), n as i64, "new".into()),
                            )
                            .await;
                    }
                }
            }
        })
    };
    tokio::time::sleep(scale.settle).await;

    let mut faults = Vec::new();
    let mut delete = None;
    let index_slot = ks
        .record_index(RecordKind::Chat, bucket("rec0"))
        .unwrap()
        .slot();
    // The index slot holds few keys: they move two at a time, so listings meet it half moved.
    for (what, slot, batch) in [("chat", busy_slot, 100), ("bucket index", index_slot, 2)] {
        let c = Arc::clone(&cluster);
        let (source, target) = tokio::task::spawn_blocking(move || {
            let source = c.master_for_slot(slot).unwrap();
            let target = c
                .masters()
                .unwrap()
                .into_iter()
                .find(|m| *m != source)
                .unwrap();
            (source, target)
        })
        .await
        .unwrap();
        let at = clock.now();
        let c = Arc::clone(&cluster);
        tokio::task::spawn_blocking(move || c.begin_migration(slot, target).map(|_| ()))
            .await
            .unwrap()
            .unwrap();
        if what == "chat" {
            let (store, recorder) = (store.clone(), recorder.clone());
            let started = clock.now();
            delete = Some((
                started,
                tokio::spawn(async move {
                    let call = Call {
                        op: "delete_chat",
                        target: BUSY.into(),
                        n: u64::MAX,
                        slot: Some(busy_slot),
                        write: true,
                        limit: Duration::from_secs(120),
                    };
                    recorder
                        .record(call, |d| Some(d.messages), store.delete_chat(BUSY))
                        .await
                }),
            ));
        }
        // Keys move 100 at a time, each batch after the load has made some progress, so that
        // requests meet the slot with its keys on both sides.
        loop {
            let c = Arc::clone(&cluster);
            let moved = tokio::task::spawn_blocking(move || {
                migrate_batch(&mut c.conn(source)?, slot, batch, target)
            })
            .await
            .unwrap()
            .unwrap();
            if moved == 0 {
                break;
            }
            load.advance(load.spawned(), 20, Duration::from_secs(10))
                .await;
        }
        let c = Arc::clone(&cluster);
        tokio::task::spawn_blocking(move || assign_slot(&c, slot, source, target))
            .await
            .unwrap()
            .unwrap();
        faults.push(Fault {
            what: format!("migration of the {what} slot {slot} from {source} to {target}"),
            at,
            healed: Some(clock.now()),
            // The index slot is read by listings, which span slots: those stand for it.
            slots: if what == "chat" {
                BTreeSet::from([slot])
            } else {
                BTreeSet::new()
            },
        });
    }
    let (delete_started, delete) = delete.unwrap();
    let deleted = delete.await.unwrap();
    let delete_ended = recorder
        .outcomes()
        .iter()
        .find(|o| o.op == "delete_chat")
        .map(|o| o.ended)
        .unwrap();
    tokio::time::sleep(scale.settle).await;
    let summary = load.stop().await;
    let outcomes = recorder.outcomes();

    // Every acknowledged message of the busy chat: gone if acknowledged before the delete
    // began, there if sent after it returned, whole either way.
    let owner = cluster.master_for_slot(busy_slot).unwrap();
    let acked: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.op == "save" && o.ok())
        .collect();
    let log = ks.message_log(BUSY);
    let mut probes = Vec::new();
    for o in &acked {
        let id = format!("m{}", o.n);
        probes.push(vec![
            b"ZSCORE".to_vec(),
            log.as_bytes().to_vec(),
            id.clone().into_bytes(),
        ]);
        probes.push(vec![
            b"EXISTS".to_vec(),
            ks.message_item(BUSY, &id).as_bytes().to_vec(),
        ]);
    }
    probes.push(vec![b"ZCARD".to_vec(), log.as_bytes().to_vec()]);
    probes.push(vec![
        b"EXISTS".to_vec(),
        ks.message_drain(BUSY).as_bytes().to_vec(),
    ]);
    let replies = tokio::task::block_in_place(|| pipeline_at(owner, &probes)).unwrap();
    let mut losses = Losses {
        checked: acked.len(),
        ..Losses::default()
    };
    let mut failures = Vec::new();
    let mut survivors = 0;
    for (i, o) in acked.iter().enumerate() {
        let in_log = !replies[2 * i].is_nil();
        let item = replies[2 * i + 1].as_int() == Some(1);
        if in_log != item {
            failures.push(format!(
                "message m{} is not whole: log {in_log}, item {item}",
                o.n
            ));
        }
        if in_log {
            survivors += 1;
        }
        if o.ended < delete_started && in_log {
            failures.push(format!(
                "m{} acknowledged before the delete began survived it",
                o.n
            ));
        }
        if o.sent > delete_ended && !in_log {
            losses
                .unexplained
                .push(format!("m{} saved after the delete returned is gone", o.n));
        }
    }
    let log_size = replies[2 * acked.len()].as_int().unwrap();
    let drain_left = replies[2 * acked.len() + 1].as_int() != Some(0);
    // No item without its log entry: the slot holds exactly the log's items plus the log.
    let c = Arc::clone(&cluster);
    let prefix = format!("{}:{{m:{BUSY}}}:i:*", ks.prefix());
    let items = tokio::task::spawn_blocking(move || {
        let mut conn = c.conn(owner).unwrap();
        let mut cursor = "0".to_owned();
        let mut n = 0;
        loop {
            let reply = conn
                .cmd(&["SCAN", &cursor, "MATCH", &prefix, "COUNT", "1000"])
                .unwrap();
            let parts = reply.as_array().unwrap();
            n += parts[1].as_array().unwrap().len();
            cursor = parts[0].as_str().unwrap().to_owned();
            if cursor == "0" {
                return n as i64;
            }
        }
    })
    .await
    .unwrap();
    if items != log_size {
        failures.push(format!(
            "{items} items of the busy chat for {log_size} log entries: items without their entry"
        ));
    }
    if drain_left {
        failures.push("the drain still exists after delete_chat returned".into());
    }

    let report = Report {
        title: format!("live slot migrations, {}", driver_name::<R>()),
        scale,
        load: summary,
        outcomes: &outcomes,
        faults: &faults,
        affected: &|o: &Outcome| o.slot == Some(busy_slot) || o.slot.is_none(),
        losses: &losses,
    };
    report.print();
    eprintln!(
        "delete_chat: {:?}, began at {:.3} s, returned at {:.3} s; {survivors} messages saved during or after it survive",
        deleted.as_ref().map(|r| r.as_ref().map(|d| (d.messages, d.chunks))),
        delete_started.as_secs_f64(),
        delete_ended.as_secs_f64()
    );

    for o in outcomes.iter().filter(|o| o.kind != Kind::Ok) {
        failures.push(format!("an error surfaced: {o:?}"));
    }
    failures.extend(losses.unexplained.iter().cloned());
    let deleted = deleted.unwrap().unwrap();
    assert!(deleted.messages >= OLD_MESSAGES, "{deleted:?}");
    assert!(deleted.chunks >= 3, "{deleted:?}");
    let listings: BTreeSet<&str> = outcomes.iter().filter(|o| o.ok()).map(|o| o.op).collect();
    assert!(listings.contains("list_stable") && listings.contains("list_chats"));
    assert_no_failures(&failures);
    store.executor().close().await;
}

both_drivers!(live_migration_keeps_listings_exact_and_surfaces_no_error);
