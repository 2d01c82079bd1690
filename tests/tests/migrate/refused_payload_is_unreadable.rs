//! A `DUMP` payload the target refuses (a newer server's: its RDB version is past the target's)
//! is that key's problem, not the run's: `migrate_restore` answers `-2` for it and writes the
//! other keys of its call, and a migration counts the key `unreadable`, copies the rest, writes
//! the marker, and ends the same way when run again.
//!
//! The end-to-end test reads from a newer server than the shared one: Valkey 8.1, whose
//! payloads carry RDB version 11, which Redis 7.0 (Debian's `redis-server`, the suites'
//! default) does not know. Its binary comes from `scripts/servers path 8.1` (fetched into
//! `.cache/servers/` once); without it the test fails, saying so. The harness starts that
//! node from that binary (`ServerOptions::binary`), beside the suites' own servers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use botmesh_redis_core::driver::scripts::MIGRATE_RESTORE;
use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::migrate::lifecycle::Unsafe;
use botmesh_redis_core::migrate::{
    delete_abandoned_side, migrate_to_cluster_layout, CleanupOptions, Counts, MarkerOutcome,
    MigrateOptions, MigrationReport, Namespace, Refusal,
};
use botmesh_redis_core::{Access, Bytes, Error, Executor, Key, Request, Value};
use botmesh_redis_core::{Keyspace, Layout};
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::keyspace::{digest, Cmd, Node};
use botmesh_redis_tests::{both_drivers, parse_info, unique_prefix, ServerOptions, SingleNode};

/// The last 10 bytes of a `DUMP` payload: the RDB version (2 bytes, little-endian), then the
/// CRC64 (8 bytes). A server checks the version first.
const FOOTER: usize = 10;

/// An RDB version no server knows.
const UNKNOWN_RDB_VERSION: u16 = 99;

fn dump(node: Node<'_>, key: &str) -> Vec<u8> {
    node.call(&Cmd::new("DUMP", key))
        .as_bytes()
        .unwrap_or_else(|| panic!("DUMP {key} answered no payload"))
        .to_vec()
}

fn get(node: Node<'_>, key: &[u8]) -> Option<Vec<u8>> {
    node.call(&Cmd::new("GET", key))
        .as_bytes()
        .map(<[u8]>::to_vec)
}

fn exists(node: Node<'_>, key: &[u8]) -> bool {
    node.call(&Cmd::new("EXISTS", key)).as_int() == Some(1)
}

/// One `migrate_restore` call restoring three keys, the middle one from a payload whose RDB
/// version was raised past the server's: the call answers `[1, -2, 1]`, the first and third
/// keys are written with their values, the middle one is not (the call is not failed whole).
async fn one_refused_payload_spoils_only_its_key<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    // One hash tag: the call's keys share a slot.
    let tag = format!("{{{}}}", unique_prefix("restore-refused"));
    let values = ["first value", "second value", "third value"];
    let sources: Vec<String> = (0..3).map(|i| format!("{tag}:src{i}")).collect();
    let targets: Vec<String> = (0..3).map(|i| format!("{tag}:dst{i}")).collect();
    for (key, value) in sources.iter().zip(values) {
        node.run(&[Cmd::new("SET", key).arg(value)]);
    }
    let mut payloads: Vec<Vec<u8>> = sources.iter().map(|k| dump(node, k)).collect();
    let version = payloads[1].len() - FOOTER;
    payloads[1][version..version + 2].copy_from_slice(&UNKNOWN_RDB_VERSION.to_le_bytes());
    // The server itself refuses the raised payload (so the script's -2 is its refusal).
    let refused = node.call(
        &Cmd::new("RESTORE", format!("{tag}:probe"))
            .arg("0")
            .arg(&payloads[1]),
    );
    assert!(
        refused
            .as_error()
            .is_some_and(|e| e.contains("payload version or checksum")),
        "RESTORE of the raised payload: {refused:?}"
    );

    let keys: Vec<Key> = targets.iter().map(|k| Key::new(k.clone())).collect();
    let mut args = vec![Bytes::from_static(b"0"), Bytes::from_static(b"0")];
    for payload in &payloads {
        args.push(Bytes::from(payload.clone()));
        args.push(Bytes::from_static(b"0"));
    }
    let call = Request::script(&MIGRATE_RESTORE, Access::Write, keys, args).unwrap();
    let reply = client.call(call).await;
    assert_eq!(
        reply,
        Ok(Value::Array(vec![
            Value::Int(1),
            Value::Int(-2),
            Value::Int(1)
        ]))
    );
    assert_eq!(
        targets
            .iter()
            .map(|k| get(node, k.as_bytes()))
            .collect::<Vec<_>>(),
        vec![
            Some(values[0].as_bytes().to_vec()),
            None,
            Some(values[2].as_bytes().to_vec())
        ]
    );
    assert!(!exists(node, targets[1].as_bytes()));
    client.close().await;
}

/// An overwriting `migrate_restore` that meets the value it would write keeps the key, even
/// when the payload came from another server version: the footer (RDB version and CRC64) names
/// the writer, not the value. Two keys: one whose payload differs only in its footer (code 0,
/// the value and its new TTL in place), one whose body differs (code 2, replaced).
async fn another_versions_payload_of_the_same_value_is_kept<R: Runtime>() {
    let node = Node::shared_single();
    let client = node.client::<R>().await;
    let tag = format!("{{{}}}", unique_prefix("restore-footer"));
    let (same, changed) = (format!("{tag}:same"), format!("{tag}:changed"));
    node.run(&[
        Cmd::new("SET", &same).arg("the value"),
        Cmd::new("SET", &changed).arg("the old value"),
        Cmd::new("SET", format!("{tag}:scratch")).arg("the new value"),
    ]);
    let mut other_version = dump(node, &same);
    let footer = other_version.len() - FOOTER;
    let version = u16::from_le_bytes([other_version[footer], other_version[footer + 1]]);
    other_version[footer..footer + 2].copy_from_slice(&(version - 1).to_le_bytes());
    other_version[footer + 2..].fill(0xA5);
    let new_value = dump(node, &format!("{tag}:scratch"));

    let keys = vec![Key::new(same.clone()), Key::new(changed.clone())];
    let args = vec![
        Bytes::from_static(b"1"),
        Bytes::from_static(b"0"),
        Bytes::from(other_version),
        Bytes::from_static(b"600000"),
        Bytes::from(new_value),
        Bytes::from_static(b"0"),
    ];
    let call = Request::script(&MIGRATE_RESTORE, Access::Write, keys, args).unwrap();
    assert_eq!(
        client.call(call).await,
        Ok(Value::Array(vec![Value::Int(0), Value::Int(2)]))
    );
    assert_eq!(get(node, same.as_bytes()), Some(b"the value".to_vec()));
    assert_eq!(
        get(node, changed.as_bytes()),
        Some(b"the new value".to_vec())
    );
    let ttl = node.call(&Cmd::new("PTTL", &same)).as_int();
    assert!(
        ttl.is_some_and(|ms| ms > 0 && ms <= 600_000),
        "the kept key's TTL: {ttl:?}"
    );
    client.close().await;
}

// ---------------------------------------------------------------------------------------------
// A Valkey 8.1 node, started by this file
// ---------------------------------------------------------------------------------------------

/// The Valkey 8.1 server binary, from `scripts/servers path 8.1` (run from the repository
/// root); panics, naming that command, when it cannot be had.
fn valkey_binary() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new(root.join("scripts/servers"))
        .args(["path", "8.1"])
        .current_dir(&root)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("this test needs Valkey 8.1: `scripts/servers path 8.1` could not run: {e}")
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let path = stdout.lines().last().map(str::trim).unwrap_or_default();
    assert!(
        output.status.success() && Path::new(path).is_file(),
        "this test needs Valkey 8.1, from `scripts/servers path 8.1` (run in {}), which failed \
         ({}):\n{stdout}{}",
        root.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(path)
}

/// The Valkey 8.1 node of this process, started by the harness from that binary.
fn valkey() -> Node<'static> {
    static NODE: OnceLock<SingleNode> = OnceLock::new();
    let node = NODE.get_or_init(|| SingleNode::start(ServerOptions::new().binary(valkey_binary())));
    let info = node.conn().unwrap().cmd(&["INFO", "server"]).unwrap();
    let info = parse_info(info.as_str().unwrap_or_default());
    assert!(
        info.get("valkey_version")
            .is_some_and(|v| v.starts_with("8.1.")),
        "`scripts/servers path 8.1` gave no Valkey 8.1: {info:?}"
    );
    Node::Single(node)
}

// ---------------------------------------------------------------------------------------------
// The migration
// ---------------------------------------------------------------------------------------------

fn counts(copied: u64, kept: u64) -> Counts {
    Counts {
        copied,
        kept,
        ..Counts::default()
    }
}

/// Whether `host` refuses the payloads of the Valkey node (asked with one `RESTORE` of a
/// scratch key).
fn refuses_valkey_payloads(host: Node<'_>) -> bool {
    let probe = unique_prefix("valkey-probe");
    valkey().run(&[Cmd::new("SET", &probe).arg("v")]);
    let payload = valkey().call(&Cmd::new("DUMP", &probe));
    let payload = payload.as_bytes().unwrap().to_vec();
    let reply = host.call(&Cmd::new("RESTORE", &probe).arg("0").arg(payload));
    host.run(&[Cmd::new("DEL", &probe)]);
    reply.as_error().is_some()
}

/// A legacy keyspace on Valkey 8.1 (two conversations, a chat record, a message) migrated into
/// a fresh prefix on the shared server (`host`), which refuses Valkey's payloads: each
/// conversation is counted `unreadable` and named, nothing of it is written, the rest is
/// copied and the marker written; a rerun ends the same way instead of failing at the same
/// key. (On a shared server that takes the payloads, Redis 7.4 or Valkey, the conversations
/// are copied instead.)
async fn newer_payloads_are_unreadable<R: Runtime>(host: Node<'static>) {
    let source = valkey();
    let prefix = unique_prefix("mig-refused");
    let target = unique_prefix("mig-refused-tgt");
    let src = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    let tgt = Keyspace::new(Layout::Cluster, target.as_str()).unwrap();
    source.run(&[
        Cmd::new("SET", src.conversation("chat-a").as_bytes()).arg("state of a"),
        Cmd::new("SET", src.conversation("chat-b").as_bytes())
            .arg("state of b")
            .arg("PX")
            .arg("600000"),
        Cmd::new("SET", src.record(RecordKind::Chat, "chat-a").as_bytes()).arg("record of a"),
        Cmd::new("ZADD", src.message_log("chat-a").as_bytes())
            .arg("5")
            .arg("m1"),
        Cmd::new("SET", src.message_item("chat-a", "m1").as_bytes()).arg("hello"),
    ]);
    let refuses = refuses_valkey_payloads(host);
    if !refuses {
        eprintln!(
            "the shared server takes Valkey 8.1's payloads: the conversations must be copied"
        );
    }
    let from = source.client::<R>().await;
    let to = host.client::<R>().await;
    let mut options = MigrateOptions::new(prefix.as_str());
    options.target_prefix = Some(target.clone());
    let conversations = vec![
        src.conversation("chat-a").to_string(),
        src.conversation("chat-b").to_string(),
    ];
    let check = |report: &MigrationReport, run: u64| {
        // The first run copies, the rerun finds everything there.
        let (copied, kept) = if run == 1 { (1, 0) } else { (0, 1) };
        let mut namespaces: BTreeMap<Namespace, Counts> = [
            (Namespace::Chats, counts(copied, kept)),
            (Namespace::Messages, counts(copied, kept)),
        ]
        .into_iter()
        .collect();
        if refuses {
            let mut named = report
                .examples
                .get("unreadable")
                .cloned()
                .unwrap_or_default();
            named.sort();
            assert_eq!(
                (report.unreadable, named),
                (2, conversations.clone()),
                "run {run}: {report:#?}"
            );
        } else {
            namespaces.insert(Namespace::Conversations, counts(2 * copied, 2 * kept));
            assert_eq!(report.unreadable, 0, "run {run}: {report:#?}");
        }
        assert_eq!(report.namespaces, namespaces, "run {run}: {report:#?}");
        assert_eq!(
            report.marker,
            if run == 1 {
                MarkerOutcome::Written
            } else {
                MarkerOutcome::AlreadySet
            },
            "run {run}: {report:#?}"
        );
    };
    let first = migrate_to_cluster_layout(&from, &to, &options, &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("the first run failed: {e}"));
    check(&first, 1);
    let second = migrate_to_cluster_layout(&from, &to, &options, &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("the rerun failed: {e}"));
    check(&second, 2);

    assert_eq!(
        get(host, tgt.marker().as_bytes()),
        Some(b"cluster:v1".to_vec())
    );
    let copy = digest(host, Layout::Cluster, &target);
    assert_eq!(
        copy.records
            .get(&(RecordKind::Chat, "chat-a".to_owned()))
            .map(|r| r.value.0.clone()),
        Some(b"record of a".to_vec()),
        "{copy:#?}"
    );
    let messages: Vec<(&str, &[u8])> = copy
        .messages
        .get("chat-a")
        .into_iter()
        .flatten()
        .map(|m| (m.id.as_str(), m.value.0.as_slice()))
        .collect();
    assert_eq!(messages, vec![("m1", &b"hello"[..])], "{copy:#?}");
    for chat in ["chat-a", "chat-b"] {
        let key = tgt.conversation(chat);
        if refuses {
            assert!(!exists(host, key.as_bytes()), "{key} was written");
        } else {
            assert!(exists(host, key.as_bytes()), "{key} was not copied");
        }
    }
    from.close().await;
    to.close().await;
}

/// A one-run move (`delete_source`) from Valkey 8.1 into a server that refuses its payloads:
/// the conversations stay on the source alone, so the run completes (the marker is written)
/// but deletes nothing, its copy is recorded inexact, and a cleanup of the source is refused
/// until bots ran on the target. Where the server takes the payloads, the copy is exact and
/// the source goes.
async fn a_move_with_refused_payloads_keeps_its_source<R: Runtime>(host: Node<'static>) {
    let source = valkey();
    let prefix = unique_prefix("mig-refused-move");
    let target = unique_prefix("mig-refused-move-tgt");
    let src = Keyspace::new(Layout::Legacy, prefix.as_str()).unwrap();
    let conversation = src.conversation("chat-a");
    let record = src.record(RecordKind::Chat, "chat-a");
    source.run(&[
        Cmd::new("SET", conversation.as_bytes()).arg("state of a"),
        Cmd::new("SET", record.as_bytes()).arg("record of a"),
    ]);
    let refuses = refuses_valkey_payloads(host);
    let from = source.client::<R>().await;
    let to = host.client::<R>().await;
    let mut options = MigrateOptions::new(prefix.as_str());
    options.target_prefix = Some(target.clone());
    options.delete_source = true;
    let report = migrate_to_cluster_layout(&from, &to, &options, &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("the move failed: {e}"));
    assert_eq!(report.marker, MarkerOutcome::Written, "{report:#?}");
    let left = [&conversation, &record].map(|key| exists(source, key.as_bytes()));
    let mut cleanup = CleanupOptions::new(prefix.as_str(), Layout::Legacy);
    cleanup.other_prefix = Some(target.clone());
    let cleaned = delete_abandoned_side(&from, &to, &cleanup, &mut |_| {}).await;
    if refuses {
        assert_eq!(
            (report.unreadable, report.source_deleted),
            (1, 0),
            "{report:#?}"
        );
        assert_eq!(left, [true, true], "the source was deleted");
        match cleaned {
            Err(Error::Refused(Refusal::Lifecycle {
                reason: Unsafe::CopyInexact,
                ..
            })) => {}
            other => panic!("the cleanup of the source: {other:?}"),
        }
        assert!(
            exists(source, conversation.as_bytes()),
            "the cleanup deleted"
        );
    } else {
        assert_eq!(report.unreadable, 0, "{report:#?}");
        assert!(report.source_deleted > 0, "{report:#?}");
        assert_eq!(left, [false, false], "the source was kept");
        assert!(cleaned.is_ok(), "the cleanup of a moved side: {cleaned:?}");
    }
    from.close().await;
    to.close().await;
}

both_drivers!(one_refused_payload_spoils_only_its_key);
both_drivers!(another_versions_payload_of_the_same_value_is_kept);
both_drivers!(newer_payloads_are_unreadable {
    into_the_single_node => Node::shared_single(),
    into_the_cluster => Node::shared_cluster(),
});
both_drivers!(a_move_with_refused_payloads_keeps_its_source {
    moved_to_the_single_node => Node::shared_single(),
    moved_to_the_cluster => Node::shared_cluster(),
});
