//! A migration walkthrough: a bot that ran on one Redis node kept its data in the legacy layout.
//! To move it to a Redis Cluster, its keyspace is copied into the cluster:v1 layout, offline
//! (every bot of the prefix stopped). This example writes a little legacy data, inspects the
//! keyspace, migrates it (a dry run first), then opens a cluster-layout store on the target and
//! reads the data back. See docs/migration.md; the `botmesh-redis` CLI does the same for an
//! operator.
//!
//! ```text
//! cargo run -p botmesh-redis-tokio --example migration
//! BOTMESH_URL=redis://127.0.0.1:6379    the single node holding the legacy data
//! BOTMESH_CLUSTER=127.0.0.1:7000,...    the target cluster; unset: another prefix on the same node
//! BOTMESH_PREFIX=mybot   (default botmesh-example-migration)
//! ```
use botmesh_redis_tokio::migrate::{inspect_keyspace, migrate_to_cluster_layout, MigrateOptions};
use botmesh_redis_tokio::{Client, ClientOptions, Layout};
use botmesh_redis_tokio::{Limit, Store, StoreOptions};

const CHATS: [&str; 2] = ["alice", "bob"];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("BOTMESH_URL").unwrap_or_else(|_| {
        println!("BOTMESH_URL unset: the legacy data goes to redis://127.0.0.1:6379");
        "redis://127.0.0.1:6379".into()
    });
    let prefix =
        std::env::var("BOTMESH_PREFIX").unwrap_or_else(|_| "botmesh-example-migration".into());
    let source = Client::connect(ClientOptions::url(url)).await?;

    // 1. The bot of old: a store on a single node, which defaults to the legacy layout.
    let legacy = Store::new(source.clone(), StoreOptions::new(&prefix))?;
    legacy.start().await?;
    for chat in CHATS {
        legacy
            .upsert_chat(chat, format!("{{\"title\":\"{chat}\"}}").into())
            .await?;
        for n in 1..=3 {
            legacy
                .save_message(chat, &format!("m{n}"), n, format!("{chat} says {n}").into())
                .await?;
        }
    }
    legacy.set_cursor("updates", 42).await?;
    legacy
        .schedules()?
        .put("daily-digest", 7, "scheduler", "every day at 09:00".into())
        .await?;
    println!(
        "wrote {} chats, 3 messages each, a cursor and a schedule under {prefix:?} (legacy)",
        CHATS.len()
    );

    // 2. Inspect: what is under the prefix, per layout and namespace. Reads only.
    let found = inspect_keyspace(&source, &prefix, 2000, &mut |_| {}).await?;
    println!(
        "inspect: {} keys, legacy {:?}, marker {:?}",
        found.scanned, found.legacy, found.marker
    );

    // 3. The target: a cluster, or the same node under another prefix. Either way the migration
    //    writes the cluster:v1 layout, and its layout marker last.
    let (target, mut options) = match std::env::var("BOTMESH_CLUSTER") {
        Ok(seeds) => {
            println!("target: the cluster of BOTMESH_CLUSTER, prefix {prefix:?}");
            let seeds = seeds.split(',').map(str::trim).filter(|s| !s.is_empty());
            let options = MigrateOptions::new(&prefix);
            (
                Client::connect(ClientOptions::cluster(seeds)).await?,
                options,
            )
        }
        Err(_) => {
            let mut options = MigrateOptions::new(&prefix);
            options.target_prefix = Some(format!("{prefix}-cluster"));
            println!(
                "BOTMESH_CLUSTER unset: target is the same node, prefix {:?}",
                options.target_prefix()
            );
            (source.clone(), options)
        }
    };

    // 4. A dry run reads everything, writes nothing, and reports what the real run would do.
    options.dry_run = true;
    let dry = migrate_to_cluster_layout(&source, &target, &options, &mut |_| {}).await?;
    println!("dry run: would move {} keys", dry.moved());
    options.dry_run = false;
    let report = migrate_to_cluster_layout(&source, &target, &options, &mut |p| {
        println!("  {}: {} / {} keys scanned", p.phase, p.scanned, p.total);
    })
    .await?;
    for (namespace, counts) in &report.namespaces {
        println!(
            "  {namespace}: {} copied, {} kept, {} overwritten",
            counts.copied, counts.kept, counts.overwritten
        );
    }
    println!(
        "migrated: {} keys scanned, orphans {}, unknown {}, unreadable {}, marker {}, in {:?}",
        report.scanned,
        report.orphans,
        report.unknown,
        report.unreadable,
        report.marker,
        report.elapsed
    );

    // 5. The bots start on the cluster layout: a cluster client picks it; on a single node it is
    //    chosen. `start` passes because the complete run wrote the layout marker.
    let store = Store::new(
        target.clone(),
        StoreOptions::new(options.target_prefix()).layout(Layout::Cluster),
    )?;
    store.start().await?;
    for chat in CHATS {
        let page = store
            .list_messages(chat, .., None, Limit::of::<10>())
            .await?;
        let ids: Vec<&str> = page.items.iter().map(|m| m.id.as_str()).collect();
        if ids != ["m1", "m2", "m3"] || store.get_chat(chat).await?.is_none() {
            return Err(format!("chat {chat:?} after the migration: messages {ids:?}").into());
        }
    }
    let cursor = store.get_cursor("updates").await?;
    let schedule = store.schedules()?.get("daily-digest").await?;
    if cursor != Some(42) || schedule.as_ref().map(|s| s.token) != Some(7) {
        return Err(
            format!("after the migration: cursor {cursor:?}, schedule {schedule:?}").into(),
        );
    }
    println!("summary: read back {} chats, their messages, the cursor and the schedule in the {:?} layout", CHATS.len(), store.layout());
    target.close().await;
    source.close().await;
    Ok(())
}
