//! A scheduler that only the leader runs: two replicas campaign for the leadership
//! `scheduler`; the leader writes schedules with its term as the fencing token. When the leader
//! resigns, or stalls until its leadership expires, the other replica takes over with a higher
//! term, and a write of the old leader is refused with `Error::Stale`: a leader that wakes up
//! from a long pause believing it still leads can do no harm.
//!
//! ```text
//! cargo run -p botmesh-redis-tokio --example scheduler
//! BOTMESH_URL=redis://127.0.0.1:6379  or  BOTMESH_CLUSTER=127.0.0.1:7000,127.0.0.1:7001
//! BOTMESH_PREFIX=mybot   (default botmesh-example-scheduler)
//! ```
mod common;

use std::time::{Duration, Instant};

use botmesh_redis_tokio::{Client, Error};
use botmesh_redis_tokio::{Coordinator, Schedules};
use botmesh_redis_tokio::{Store, StoreOptions};

const LEADERSHIP: &str = "scheduler";
/// The leadership's TTL: a leader renews well within it, and a leader that stops renewing is
/// replaced once it has passed.
const TTL: Duration = Duration::from_secs(2);
const SCHEDULE: &str = "daily-digest";

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[tokio::main]
async fn main() -> Result<()> {
    let client = common::connect().await?;
    let prefix =
        std::env::var("BOTMESH_PREFIX").unwrap_or_else(|_| "botmesh-example-scheduler".into());
    let store = Store::new(client.clone(), StoreOptions::new(&prefix))?;
    store.start().await?;
    println!("prefix {prefix}, layout {:?}", store.layout());
    // Replica ids must be unique among live processes: the process id is part of them.
    let a = store.coordinator(format!("scheduler-a-{}", std::process::id()))?;
    let b = store.coordinator(format!("scheduler-b-{}", std::process::id()))?;
    let schedules = store.schedules()?;

    // 1. A wins; while it leads, B's campaign is refused.
    let term_a = campaign(&a).await?;
    println!("{} leads with term {term_a}", a.replica());
    if b.campaign(LEADERSHIP, TTL).await?.is_some() {
        return Err("two leaders at once".into());
    }
    a.renew(LEADERSHIP, TTL).await?; // what a leader does every TTL / 3 or so
    put(&schedules, &a, term_a, "every day at 09:00").await?;

    // 2. A resigns (a clean shutdown, a deploy): B takes over at once, with a higher term.
    a.resign(LEADERSHIP).await?;
    let term_b = b
        .campaign(LEADERSHIP, TTL)
        .await?
        .ok_or("B did not win after A resigned")?;
    println!(
        "{} resigned; {} leads with term {term_b}",
        a.replica(),
        b.replica()
    );
    put(&schedules, &b, term_b, "every day at 10:00").await?;
    // A, late, still writes with its old term: the schedule holds a newer token.
    expect_stale(
        put(&schedules, &a, term_a, "every day at 09:00").await,
        a.replica(),
    )?;

    // 3. B stalls (a GC pause, a stopped VM) and does not renew: its leadership expires, and A
    //    wins a new term.
    println!(
        "{} stalls for {:?} without renewing",
        b.replica(),
        TTL + Duration::from_millis(500)
    );
    tokio::time::sleep(TTL + Duration::from_millis(500)).await;
    let term_a2 = campaign(&a).await?;
    println!("{} leads again with term {term_a2}", a.replica());
    put(&schedules, &a, term_a2, "every day at 11:00").await?;
    // B wakes up: renewing tells it that it lost the leadership, and its write is refused anyway.
    match b.renew(LEADERSHIP, TTL).await {
        Err(Error::NotHolder { what }) => {
            println!("{} renews: refused, {what} is no longer held", b.replica())
        }
        other => return Err(format!("the stalled leader renewed: {other:?}").into()),
    }
    expect_stale(
        put(&schedules, &b, term_b, "every day at 10:00").await,
        b.replica(),
    )?;

    // The stored schedule is the current leader's.
    let stored = schedules
        .get(SCHEDULE)
        .await?
        .ok_or("the schedule is missing")?;
    if stored.token != term_a2 || stored.data != "every day at 11:00" {
        return Err(format!("stored {stored:?}, expected term {term_a2}").into());
    }
    a.resign(LEADERSHIP).await?;
    println!("summary: terms {term_a} < {term_b} < {term_a2}, stale writes refused, schedule at term {term_a2}");
    client.close().await;
    Ok(())
}

/// Campaigns until this replica leads (a leader of an earlier run may hold the leadership until
/// its TTL runs out); yields the term.
async fn campaign(coord: &Coordinator<Client>) -> Result<u64> {
    let deadline = Instant::now() + 3 * TTL;
    loop {
        if let Some(term) = coord.campaign(LEADERSHIP, TTL).await? {
            return Ok(term);
        }
        if Instant::now() > deadline {
            return Err(format!("{} never won the leadership", coord.replica()).into());
        }
        tokio::time::sleep(TTL / 10).await;
    }
}

/// Writes the schedule with the term as fencing token, held by the leader that got the term.
async fn put(
    schedules: &Schedules<Client>,
    leader: &Coordinator<Client>,
    term: u64,
    data: &'static str,
) -> std::result::Result<(), Error> {
    // The term is the fencing token as it is: every token is a u64.
    schedules
        .put(SCHEDULE, term, leader.replica(), data.into())
        .await?;
    println!(
        "{} wrote {SCHEDULE} = {data:?} with token {term}",
        leader.replica()
    );
    Ok(())
}

fn expect_stale(result: std::result::Result<(), Error>, replica: &str) -> Result<()> {
    match result {
        Err(Error::Stale { token, stored, .. }) => {
            println!("{replica} writes with token {token}: refused, Stale (stored {stored})");
            Ok(())
        }
        other => Err(format!("a stale leader's write was not refused: {other:?}").into()),
    }
}
