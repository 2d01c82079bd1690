//! The bot a new user writes from the README and `docs/` alone, run unchanged on one node and on
//! a cluster: messages listed page by page, a chat record, user data with a TTL, a typed
//! record, turns across two replicas, a lock whose fence guards a write, a leadership writing
//! schedules with its term, the outbox, and a graceful close. Every step checks its outcome.
//!
//! ```text
//! cargo run -p botmesh-redis-tokio --features json --example first_bot
//! BOTMESH_URL=redis://127.0.0.1:6379  or  BOTMESH_CLUSTER=127.0.0.1:7000,127.0.0.1:7001
//! BOTMESH_PREFIX=mybot   (default botmesh-example-first-bot)
//! ```
mod common;

use std::time::Duration;

use botmesh_redis_tokio::codec::Json;
use botmesh_redis_tokio::{Error, Limit, Released, Store, StoreOptions};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Profile {
    name: String,
    language: String,
}

fn check(ok: bool, what: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(format!("expected {what}").into())
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let client = common::connect().await?;
    let prefix =
        std::env::var("BOTMESH_PREFIX").unwrap_or_else(|_| "botmesh-example-first-bot".into());
    let store = Store::open(client, StoreOptions::new(&prefix)).await?;

    // Messages, listed two per page.
    for (n, text) in ["hi", "how are you", "fine", "bye", "see you"]
        .iter()
        .enumerate()
    {
        let time = 1_700_000_000_000 + n as i64;
        store
            .save_message("chat-1", &format!("m{n}"), time, text.to_string().into())
            .await?;
    }
    let (mut after, mut ids) = (None, Vec::new());
    loop {
        let page = store
            .list_messages("chat-1", .., after.as_ref(), Limit::new(2)?)
            .await?;
        ids.extend(page.items.iter().map(|m| m.id.clone()));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    check(
        ids == ["m0", "m1", "m2", "m3", "m4"],
        "five messages in order",
    )?;

    // A chat record, user data that expires, a typed record.
    store
        .upsert_chat("chat-1", "{\"title\":\"support\"}".into())
        .await?;
    check(store.get_chat("chat-1").await?.is_some(), "the chat record")?;
    let hour = Some(Duration::from_secs(3600));
    store
        .set_user_data("u-1", "prefs", "theme", "dark".into(), hour)
        .await?;
    let typed = store.typed(Json);
    let profile = Profile {
        name: "Ada".into(),
        language: "en".into(),
    };
    typed.upsert_contact("u-1", &profile).await?;
    check(
        typed.get_contact::<Profile>("u-1").await? == Some(profile),
        "the typed contact read back",
    )?;

    // Two replicas take turns on one chat; each heartbeat is kept by the store's keeper.
    let a = store.coordinator(format!("first-bot-a-{}", std::process::id()))?;
    let b = store.coordinator(format!("first-bot-b-{}", std::process::id()))?;
    a.keep_alive(Duration::from_secs(5)).await?;
    b.keep_alive(Duration::from_secs(5)).await?;
    let first = a.turn("chat-1").await?;
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.turn("chat-1").await.map(|turn| turn.fence()) }
    });
    first.renew().await?; // the fenced check before acting on the chat
    let first_fence = first.fence();
    drop(first); // given back as it drops: the waiter is served now, not a TTL later
    check(waiter.await?? > first_fence, "the next turn's higher fence")?;

    // A lock whose fence guards a schedule write: a lower fence is refused.
    let lock = a
        .hold_lock("invoice:42", "a#1", Duration::from_secs(10))
        .await?
        .ok_or("the lock was free")?;
    let schedules = store.schedules()?;
    schedules
        .put("invoice:42", lock.fence(), "a#1", "paid".into())
        .await?;
    check(
        lock.release().await? == Released::Held,
        "the lock still held",
    )?;
    let stale = schedules
        .put("invoice:42", 0, "late", "unpaid".into())
        .await;
    check(
        matches!(stale, Err(Error::Stale { .. })),
        "a stale write refused",
    )?;

    // A leadership that writes schedules with its term, kept renewed while it leads.
    let lead = a
        .lead("scheduler", Duration::from_secs(3))
        .await?
        .ok_or("nobody led")?
        .keep_renewed();
    schedules
        .put("digest", lead.term(), a.replica(), "09:00".into())
        .await?;
    check(
        b.lead("scheduler", Duration::from_secs(3)).await?.is_none(),
        "one leader at a time",
    )?;
    lead.release().await?;

    // The outbox: queued once, claimed, acked.
    let outbox = store.durability("outbox")?;
    let window = Duration::from_secs(3600);
    check(
        outbox.enqueue("reply:m4", "bye!".into(), window).await?,
        "a new send",
    )?;
    check(
        !outbox.enqueue("reply:m4", "bye!".into(), window).await?,
        "the duplicate dropped",
    )?;
    let claimed = outbox
        .claim(a.replica(), Limit::DEFAULT, Duration::from_secs(30))
        .await?;
    check(claimed.len() == 1, "one send claimed")?;
    for send in &claimed {
        outbox.ack(&send.key, a.replica()).await?;
    }

    println!(
        "summary: {} messages, {} send, layout {}",
        ids.len(),
        claimed.len(),
        store.layout().name()
    );
    // Heartbeats removed, calls in flight finished, connections closed.
    store.close().await;
    Ok(())
}
