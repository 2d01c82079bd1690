//! Keys a migration cannot read as their namespace's type (a wrong type, a counter that is no
//! integer, a schedule token that is not canonical) are counted unreadable, named, and left
//! alone; every other key is still copied. A target key in the way (a fence or a schedule token
//! there that is no canonical integer) spoils only its own datum.

use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::migrate::{migrate_to_cluster_layout, Counts, MigrateOptions, Namespace};
use botmesh_redis_core::{Keyspace, Layout};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{digest, Cmd, Node};
use botmesh_redis_tests::{both_drivers, unique_prefix};

fn copied(n: u64) -> Counts {
    Counts {
        copied: n,
        ..Counts::default()
    }
}

async fn wrong_types_at_the_source<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let prefix = unique_prefix("mig-unreadable");
    let ks = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    let bad = [
        Cmd::new("HSET", ks.record(RecordKind::Chat, "hash").as_bytes())
            .arg("f")
            .arg("v"),
        Cmd::new("RPUSH", ks.user_entry("u", "ns", "list").as_bytes()).arg("v"),
        Cmd::new("SET", ks.record(RecordKind::Schedule, "string").as_bytes()).arg("v"),
        Cmd::new("HSET", ks.record(RecordKind::Schedule, "padded").as_bytes())
            .arg("token")
            .arg("007")
            .arg("deleted")
            .arg("0"),
        Cmd::new("SET", ks.lock_fence("text").as_bytes()).arg("abc"),
        Cmd::new("SET", ks.message_log("string-log").as_bytes()).arg("v"),
    ];
    let good = [
        Cmd::new("SET", ks.record(RecordKind::Chat, "ok").as_bytes()).arg("v"),
        Cmd::new("SET", ks.user_entry("u", "ns", "ok").as_bytes()).arg("v"),
        Cmd::new("HSET", ks.record(RecordKind::Schedule, "ok").as_bytes())
            .arg("token")
            .arg("7")
            .arg("deleted")
            .arg("0")
            .arg("data")
            .arg("d"),
        Cmd::new("SET", ks.lock_fence("ok").as_bytes()).arg("3"),
    ];
    node.run(&bad);
    node.run(&good);
    let report = migrate_to_cluster_layout(
        &client,
        &client,
        &MigrateOptions::new(prefix.as_str()),
        &mut |_| {},
    )
    .await
    .unwrap();
    assert_eq!(report.unreadable, bad.len() as u64, "{report:#?}");
    let mut named = report.examples["unreadable"].clone();
    named.sort();
    let mut wanted: Vec<String> = bad
        .iter()
        .map(|c| String::from_utf8(c.0[1].clone()).unwrap())
        .collect();
    wanted.sort();
    assert_eq!(named, wanted);
    for ns in [
        Namespace::Chats,
        Namespace::UserData,
        Namespace::Schedules,
        Namespace::Fences,
    ] {
        assert_eq!(
            report.namespaces.get(&ns),
            Some(&copied(1)),
            "{ns}: {report:#?}"
        );
    }
    let copy = digest(node, Layout::Cluster, &prefix);
    assert_eq!(copy.records.len(), 1);
    assert_eq!(copy.user_data.len(), 1);
    assert_eq!(copy.schedules.len(), 1);
    assert_eq!(copy.fences.len(), 1);
}

async fn target_keys_in_the_way<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let prefix = unique_prefix("mig-in-the-way");
    let target = unique_prefix("mig-in-the-way-tgt");
    let src = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    let tgt = Keyspace::new(Layout::Cluster, target.as_str()).unwrap();
    let mut commands = Vec::new();
    for i in 0..5 {
        commands.push(Cmd::new("SET", src.lock_fence(&format!("f{i}")).as_bytes()).arg("10"));
        commands.push(
            Cmd::new(
                "HSET",
                src.record(RecordKind::Schedule, &format!("s{i}"))
                    .as_bytes(),
            )
            .arg("token")
            .arg("10")
            .arg("deleted")
            .arg("0")
            .arg("data")
            .arg("d"),
        );
    }
    // At the target, one fence and one schedule that no run can compare with.
    commands.push(Cmd::new("SET", tgt.lock_fence("f2").as_bytes()).arg("not a number"));
    commands.push(
        Cmd::new("HSET", tgt.record(RecordKind::Schedule, "s2").as_bytes())
            .arg("token")
            .arg("x")
            .arg("deleted")
            .arg("0"),
    );
    node.run(&commands);
    let mut options = MigrateOptions::new(prefix.as_str());
    options.target_prefix = Some(target.clone());
    let report = migrate_to_cluster_layout(&client, &client, &options, &mut |_| {})
        .await
        .unwrap();
    let copy = digest(node, Layout::Cluster, &target);
    let fences: Vec<(&String, &String)> = copy.fences.iter().collect();
    assert_eq!(
        (
            report.namespaces.get(&Namespace::Fences),
            report.namespaces.get(&Namespace::Schedules),
            report.unreadable
        ),
        (Some(&copied(4)), Some(&copied(4)), 2),
        "fences at the target {fences:?}, schedules {:?}; {report:#?}",
        copy.schedules.keys().collect::<Vec<_>>()
    );
}

both_drivers!(wrong_types_at_the_source, target_keys_in_the_way);
