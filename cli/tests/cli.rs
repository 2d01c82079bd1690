//! The `botmesh-redis` binary run as an operator runs it, against real redis-server processes
//! (the harness's shared single node and 3-master cluster), its output checked line by line.
//!
//! Each test seeds its own prefix (the servers are shared with the other tests of this binary)
//! through a legacy-layout store, as a bot of the old layout wrote it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_harness::{
    shared_cluster, shared_single, unique_prefix, SentinelDeployment, SentinelOptions,
    ServerOptions, SingleNode, TlsFiles,
};
use botmesh_redis_tokio::{Client, ClientOptions, Layout, TlsOptions};
use botmesh_redis_tokio::{Coordinator, Schedules};
use botmesh_redis_tokio::{Store, StoreOptions};

/// What one run of the binary left.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `botmesh-redis ARGS` with `env` and no other password in the environment (stderr is a
/// pipe, so the progress bar is hidden), and expects exit code `code`.
fn run_env<S: AsRef<str>>(code: i32, env: &[(&str, &str)], args: &[S]) -> Run {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_botmesh-redis"))
        .args(&args)
        .env_remove("BOTMESH_REDIS_PASSWORD")
        .env_remove("BOTMESH_REDIS_TARGET_PASSWORD")
        .env_remove("BOTMESH_REDIS_SENTINEL_PASSWORD")
        .envs(env.iter().copied())
        .output()
        .expect("the binary runs");
    let r = Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(
        r.code,
        Some(code),
        "botmesh-redis {}: {r:#?}",
        args.join(" ")
    );
    r
}

/// Whether a line of `stdout` holds exactly these words (a table row or a field, whatever its
/// alignment).
fn has_row(stdout: &str, words: &[&str]) -> bool {
    stdout
        .lines()
        .any(|l| l.split_whitespace().collect::<Vec<_>>() == words)
}

/// [`run_env`] with nothing added to the environment.
fn run_expect<S: AsRef<str>>(code: i32, args: &[S]) -> Run {
    run_env(code, &[], args)
}

/// The stdout without its first line (it names the unique prefix and the server's port) and
/// without the elapsed time (the only line that changes from run to run).
fn body(stdout: &str) -> String {
    stdout
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("elapsed "))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Seeds `prefix` on the shared single node as a legacy-layout bot writes it, plus one key
/// that is no name of either layout:
///
/// - 2 message logs (`chat-1`: m1, m2; `chat-2`: m1) and 3 message items;
/// - 2 chats, 3 contacts, 1 checkpoint (with a TTL), 1 schedule, 2 user-data entries;
/// - 1 lock holder (held for a minute) and its fence;
/// - 1 conversation and 1 cursor (names both layouts share);
/// - `<prefix>:weird` (unknown).
fn seed_legacy(prefix: &str) {
    seed_legacy_at(ClientOptions::url(shared_single().url()), prefix);
    admin_set(&format!("{prefix}:weird"), None);
}

/// [`seed_legacy`]'s keys but the unknown one, through a client of `options`.
fn seed_legacy_at(options: ClientOptions, prefix: &str) {
    block_on(async {
        let client = Client::connect(options).await.unwrap();
        let store = Store::new(
            client.clone(),
            StoreOptions::new(prefix).layout(Layout::Legacy),
        )
        .unwrap();
        store.start().await.unwrap();
        for (chat, id, time) in [
            ("chat-1", "m1", 10),
            ("chat-1", "m2", 20),
            ("chat-2", "m1", 30),
        ] {
            store
                .save_message(chat, id, time, format!("{chat}/{id}").into())
                .await
                .unwrap();
        }
        for chat in ["chat-1", "chat-2"] {
            store.upsert_chat(chat, "chat".into()).await.unwrap();
        }
        for user in ["u1", "u2", "u3"] {
            store.upsert_contact(user, "contact".into()).await.unwrap();
        }
        store
            .set_checkpoint("cp", "offset".into(), Some(Duration::from_secs(600)))
            .await
            .unwrap();
        for user in ["u1", "u2"] {
            store
                .set_user_data(user, "prefs", "lang", "pt".into(), None)
                .await
                .unwrap();
        }
        store.set_cursor("feed", 42).await.unwrap();
        store
            .set_conversation("chat-1", "state".into(), None)
            .await
            .unwrap();
        let coordinator = Coordinator::new(client.clone(), store.keyspace().clone(), "r1").unwrap();
        assert_eq!(
            coordinator
                .lock("job", "o", Duration::from_secs(60))
                .await
                .unwrap(),
            Some(1)
        );
        Schedules::new(client.clone(), store.keyspace().clone())
            .unwrap()
            .put("s1", 7, "h", "every day".into())
            .await
            .unwrap();
        client.close().await;
    });
}

/// `SET key 1`, with a TTL in seconds if given, through the harness's admin connection.
fn admin_set(key: &str, ttl_secs: Option<u64>) {
    let mut conn = shared_single().conn().unwrap();
    let ttl = ttl_secs.map(|t| t.to_string());
    let mut args = vec!["SET", key, "1"];
    if let Some(ttl) = &ttl {
        args.extend(["EX", ttl.as_str()]);
    }
    assert!(conn.cmd(&args).unwrap().is_ok());
}

/// What `inspect` prints for a freshly seeded prefix (after its first line).
const SEEDED_INSPECT: &str = "
  namespace      legacy  cluster  shared
  messages            2        0       0
  items               3        0       0
  chats               2        0       0
  contacts            3        0       0
  checkpoints         1        0       0
  schedules           1        0       0
  user-data           2        0       0
  locks               1        0       0
  fences              1        0       0
  conversations       0        0       1
  cursors             0        0       1
  total              16        0       2

unknown keys   1 (for example PREFIX:weird)
marker         none
nodes scanned  1 (standalone)
keys scanned   19
";

#[test]
fn help_of_each_subcommand_shows_its_examples() {
    let examples = [
        (
            "inspect",
            "  botmesh-redis inspect --url redis://127.0.0.1:6379 --prefix mybot\n",
        ),
        (
            "migrate",
            "  botmesh-redis migrate --url redis://127.0.0.1:6379 --prefix mybot --dry-run\n",
        ),
        (
            "rollback",
            "  botmesh-redis rollback --url redis://127.0.0.1:6379 --prefix mybot --no-mirror\n",
        ),
        (
            "check",
            "  botmesh-redis check --url redis://127.0.0.1:6379 --prefix mybot --layout cluster\n",
        ),
        (
            "cleanup",
            "  botmesh-redis cleanup --url redis://127.0.0.1:6379 --prefix mybot --layout legacy\n",
        ),
        (
            "demo",
            "  botmesh-redis demo --url redis://127.0.0.1:6379 --prefix botmesh-demo\n",
        ),
    ];
    let exit_codes = "Exit codes: 0 success, 1 error, 2 usage (bad flags), 3 refused";
    for (command, example) in examples {
        for flag in ["-h", "--help"] {
            let r = run_expect(0, &[command, flag]);
            assert!(
                r.stdout.contains("\nExamples:\n"),
                "{command} {flag}: {}",
                r.stdout
            );
            assert!(r.stdout.contains(example), "{command} {flag}: {}", r.stdout);
            assert!(
                r.stdout.contains(exit_codes),
                "{command} {flag}: {}",
                r.stdout
            );
        }
    }
    let top = run_expect(0, &["--help"]);
    for command in ["inspect", "migrate", "rollback", "cleanup", "check", "demo"] {
        assert!(
            top.stdout
                .lines()
                .any(|l| l.trim_start().starts_with(command)),
            "{command} in {}",
            top.stdout
        );
    }
    assert!(top.stdout.contains(exit_codes));
}

#[test]
fn bad_flags_exit_with_2() {
    let url = "redis://127.0.0.1:1";
    let cases: &[(&[&str], &str)] = &[
        (&[], "Usage: botmesh-redis"),
        (&["frobnicate"], "unrecognized subcommand 'frobnicate'"),
        (
            &["migrate", "--url", url, "--prefix", "p", "--bogus"],
            "unexpected argument '--bogus'",
        ),
        (
            &["inspect", "--prefix", "p"],
            "--url <URL>|--cluster <HOST:PORT>",
        ),
        (
            &["inspect", "--url", url, "--cluster", "h:1", "--prefix", "p"],
            "cannot be used with",
        ),
        (&["inspect", "--url", url], "--prefix <PREFIX>"),
        (
            &[
                "migrate",
                "--url",
                url,
                "--prefix",
                "p",
                "--include",
                "messages,items",
            ],
            "\"items\" is counted but never copied",
        ),
        (
            &[
                "migrate",
                "--url",
                url,
                "--prefix",
                "p",
                "--include",
                "nope",
            ],
            "unknown namespace \"nope\"",
        ),
        (
            &[
                "inspect",
                "--url",
                url,
                "--prefix",
                "p",
                "--connect-timeout",
                "5parsecs",
            ],
            "\"5parsecs\" is not a duration",
        ),
        (
            &[
                "inspect",
                "--url",
                url,
                "--prefix",
                "p",
                "--map",
                "10.0.0.5:7000",
            ],
            "is not ANNOUNCED=DIAL",
        ),
        (
            &[
                "rollback",
                "--url",
                url,
                "--prefix",
                "p",
                "--target-cluster",
                "h:1",
            ],
            "unexpected argument '--target-cluster'",
        ),
        (
            &[
                "migrate",
                "--url",
                url,
                "--prefix",
                "p",
                "--target-user",
                "u",
            ],
            "--target-url",
        ),
        (
            &[
                "check", "--url", url, "--prefix", "p", "--layout", "sideways",
            ],
            "invalid value 'sideways'",
        ),
        (
            &[
                "inspect",
                "--url",
                url,
                "--prefix",
                "p",
                "--scan-count",
                "0",
            ],
            "invalid value '0'",
        ),
        (
            &["inspect", "--url", url, "--prefix", "p", "--user", "u"],
            "--password <PASSWORD>",
        ),
    ];
    for (args, says) in cases {
        let r = run_expect(2, args);
        assert!(
            r.stderr.contains(says),
            "{args:?} should say {says:?}: {}",
            r.stderr
        );
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
    }
}

#[test]
fn inspect_counts_what_was_seeded() {
    let prefix = unique_prefix("cli-inspect");
    seed_legacy(&prefix);
    let url = shared_single().url();
    let r = run_expect(0, &["inspect", "--url", &url, "--prefix", &prefix]);
    let addr = shared_single().addr();
    assert_eq!(
        r.stdout.lines().next().unwrap(),
        format!("inspect: prefix {prefix:?} on {addr}")
    );
    assert_eq!(body(&r.stdout), SEEDED_INSPECT.replace("PREFIX", &prefix));
    assert_eq!(r.stderr, "");
}

#[test]
fn dry_run_then_in_place_migration_then_check() {
    let prefix = unique_prefix("cli-inplace");
    seed_legacy(&prefix);
    let url = shared_single().url();
    let cli = |code: i32, command: &str, extra: &[&str]| {
        let mut args = vec![command, "--url", url.as_str(), "--prefix", prefix.as_str()];
        args.extend_from_slice(extra);
        run_expect(code, &args)
    };

    // Before: start() on the cluster layout would refuse the legacy data.
    let before = cli(3, "check", &["--layout", "cluster"]);
    assert!(before.stdout.contains(
        "\nverdict: start() with layout cluster would be refused: 16 legacy-layout key(s) and no \
         layout marker (messages 2, items 3, chats 2, contacts 3, checkpoints 1, schedules 1, \
         user-data 2, locks 1, fences 1); migrate them first with `botmesh-redis migrate`\n"
    ));
    assert_eq!(
        before.stderr,
        format!("refused: start() with layout cluster would be refused for prefix {prefix:?}\n")
    );

    let copied = "
  namespace    copied  kept  overwritten  pruned
  messages          3     0            0       0
  chats             2     0            0       0
  contacts          3     0            0       0
  checkpoints       1     0            0       0
  schedules         1     0            0       0
  user-data         2     0            0       0
  fences            1     0            0       0
  total            13     0            0       0

  not copied (by design)  keys
  locks                      1
  conversations              1
  cursors                    1

keys scanned         19
orphans              0
foreign items        0
shared items         0
dangling             0
unreadable           0
unrepresentable      0
unknown              1
target-layout keys   0
source keys deleted  0

examples
  unknown: PREFIX:weird

";
    let dry = cli(0, "migrate", &["--dry-run"]);
    assert_eq!(
        dry.stdout.lines().next().unwrap(),
        format!(
            "migrate: prefix {prefix:?} (legacy) -> prefix {prefix:?} (cluster:v1), in place on \
             {}, mirror, dry run",
            shared_single().addr()
        )
    );
    assert_eq!(
        body(&dry.stdout),
        copied.replace("PREFIX", &prefix)
            + "result   dry run, nothing written: 13 keys would be handled (13 copied, 0 kept, 0 \
               overwritten)\ncopy     a new copy\nmarker   not written (dry run)\n"
    );
    assert!(
        dry.stdout.lines().any(|l| l.starts_with("elapsed  0.")),
        "{}",
        dry.stdout
    );
    // The dry run wrote nothing.
    assert_eq!(
        body(&cli(0, "inspect", &[]).stdout),
        SEEDED_INSPECT.replace("PREFIX", &prefix)
    );

    let done = cli(0, "migrate", &[]);
    assert_eq!(
        body(&done.stdout),
        copied.replace("PREFIX", &prefix)
            + "result   13 keys handled into the cluster:v1 layout (13 copied, 0 kept, 0 \
               overwritten)\ncopy     a new copy\nmarker   written\n"
    );

    let after = cli(0, "check", &["--layout", "cluster"]);
    let tail: Vec<&str> = after.stdout.lines().rev().take(3).collect();
    assert_eq!(
        tail,
        [
            "warning: 16 legacy-layout key(s) remain under the prefix, invisible to the store; \
             once the bots run on the cluster layout, `botmesh-redis cleanup --layout legacy` \
             deletes them",
            "verdict: start() with layout cluster would pass: the layout marker is cluster:v1",
            "",
        ]
    );
    assert!(after
        .stdout
        .contains("\ntopology: standalone (a single node, not a cluster)\n"));
    assert!(after
        .stdout
        .contains("\nmarker               \"cluster:v1\"\n"));
    // The lifecycle records say which copy each side took part in.
    for side in [
        "legacy side          source of the copy of ",
        "cluster side         mirror copy of ",
    ] {
        assert!(
            after.stdout.contains(&format!("\n{side}")),
            "{}",
            after.stdout
        );
    }

    // The bots start on the cluster layout and delete a chat. From then on the copy is live: a
    // migration into it (as `--delete-source` would run) is refused, since it would bring the
    // chat back; the legacy side goes with the cleanup step, which only deletes.
    block_on(async {
        let client = Client::connect(ClientOptions::url(shared_single().url()))
            .await
            .unwrap();
        let store = Store::new(
            client,
            StoreOptions::new(prefix.as_str()).layout(Layout::Cluster),
        )
        .unwrap();
        store.start().await.unwrap();
        store.delete_chat("chat-2").await.unwrap();
    });
    let refused = cli(3, "migrate", &["--delete-source"]);
    assert!(
        refused
            .stderr
            .starts_with("refused: the target is live: bots started on it since the copy"),
        "{}",
        refused.stderr
    );
    assert!(
        refused
            .stderr
            .contains("botmesh-redis cleanup --layout legacy"),
        "{}",
        refused.stderr
    );

    let dry = cli(0, "cleanup", &["--layout", "legacy", "--dry-run"]);
    assert!(
        has_row(&dry.stdout, &["would", "delete", "keys"]),
        "{}",
        dry.stdout
    );
    // Every legacy key but the unknown one: 2 logs and their 3 items, 2 chats, 3 contacts, a
    // checkpoint, a schedule, 2 user-data entries, the lock the old bots left, a fence; in
    // place the conversation and the cursor are the live side's too and stay.
    assert!(has_row(&dry.stdout, &["total", "16"]), "{}", dry.stdout);
    assert!(
        has_row(&dry.stdout, &["unknown", "keys", "left", "1"]),
        "{}",
        dry.stdout
    );
    assert!(
        has_row(
            &dry.stdout,
            &["shared", "names", "kept", "(in", "place)", "2"]
        ),
        "{}",
        dry.stdout
    );
    let deleted = cli(0, "cleanup", &["--layout", "legacy"]);
    assert!(
        has_row(&deleted.stdout, &["deleted", "keys"]),
        "{}",
        deleted.stdout
    );
    assert!(
        has_row(&deleted.stdout, &["total", "16"]),
        "{}",
        deleted.stdout
    );
    let clean = cli(0, "check", &["--layout", "cluster"]);
    assert!(
        clean.stdout.contains("\nlegacy-layout keys   0\n"),
        "{}",
        clean.stdout
    );
    assert!(
        clean
            .stdout
            .contains("\nlegacy side          source of the copy of "),
        "{}",
        clean.stdout
    );
    assert!(
        clean.stdout.ends_with(
            "\nverdict: start() with layout cluster would pass: the layout marker is cluster:v1\n"
        ),
        "{}",
        clean.stdout
    );
    // The chat the bots deleted stayed deleted.
    let inspected = cli(0, "inspect", &[]);
    assert!(
        has_row(&inspected.stdout, &["chats", "0", "1", "0"]),
        "{}",
        inspected.stdout
    );
}

#[test]
fn migrate_into_the_shared_cluster_and_roll_back_to_a_node() {
    let prefix = unique_prefix("cli-tocluster");
    let on_cluster = format!("{prefix}-c");
    let back = format!("{prefix}-back");
    seed_legacy(&prefix);
    let url = shared_single().url();
    let seed = shared_cluster().seeds()[0].clone();

    let to_cluster = run_expect(
        0,
        &[
            "migrate",
            "--url",
            &url,
            "--prefix",
            &prefix,
            "--target-cluster",
            &seed,
            "--target-prefix",
            &on_cluster,
        ],
    );
    assert_eq!(
        to_cluster.stdout.lines().next().unwrap(),
        format!(
            "migrate: prefix {prefix:?} (legacy) -> prefix {on_cluster:?} (cluster:v1), from {} \
             to cluster {seed}, mirror",
            shared_single().addr()
        )
    );
    // Another server: the names both layouts share are copied too.
    assert!(
        to_cluster.stdout.contains(
            "
  namespace      copied  kept  overwritten  pruned
  messages            3     0            0       0
  chats               2     0            0       0
  contacts            3     0            0       0
  checkpoints         1     0            0       0
  schedules           1     0            0       0
  user-data           2     0            0       0
  fences              1     0            0       0
  conversations       1     0            0       0
  cursors             1     0            0       0
  total              15     0            0       0

  not copied (by design)  keys
  locks                      1
"
        ),
        "{}",
        to_cluster.stdout
    );
    assert!(to_cluster.stdout.contains("\nmarker   written\n"));

    let inspected = run_expect(0, &["inspect", "--cluster", &seed, "--prefix", &on_cluster]);
    let counts = "
  namespace      legacy  cluster  shared
  messages            0        2       0
  items               0        3       0
  chats               0        2       0
  contacts            0        3       0
  checkpoints         0        1       0
  schedules           0        1       0
  indexes             0        9       0
  user-data           0        2       0
  fences              0        1       0
  conversations       0        0       1
  cursors             0        0       1
  marker              0        0       1
  total               0       24       3

unknown keys   0
marker         \"cluster:v1\"
";
    assert!(
        body(&inspected.stdout).starts_with(counts),
        "{}",
        inspected.stdout
    );
    assert!(
        inspected.stdout.contains("\nnodes scanned  3 ("),
        "{}",
        inspected.stdout
    );
    assert!(
        inspected.stdout.ends_with("\nkeys scanned   28\n"),
        "{}",
        inspected.stdout
    );

    let checked = run_expect(0, &["check", "--cluster", &seed, "--prefix", &on_cluster]);
    assert!(
        checked
            .stdout
            .contains("\ntopology: cluster, 3 master(s)\n"),
        "{}",
        checked.stdout
    );
    assert!(checked.stdout.contains(
        "\nverdict: start() with layout cluster would pass: the layout marker is cluster:v1\n"
    ));
    // 3 masters, each with one replica, covering the 16384 slots between them.
    let masters: Vec<&str> = checked
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("topology: cluster"))
        .skip(2)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(masters.len(), 3, "{}", checked.stdout);
    let slots: u64 = masters
        .iter()
        .map(|l| l.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(slots, 16384);
    for master in &masters {
        assert_eq!(master.split_whitespace().count(), 4, "{master}");
    }
    // The legacy layout is refused on a cluster client.
    let legacy = run_expect(
        3,
        &[
            "check",
            "--cluster",
            &seed,
            "--prefix",
            &on_cluster,
            "--layout",
            "legacy",
        ],
    );
    assert!(legacy.stdout.contains(
        "\nverdict: start() with layout legacy would be refused: configuration error: the legacy \
         layout runs on a single node only: on a cluster client, store needs the cluster layout \
         (Layout::Cluster, the default with ClientOptions::cluster); data written in the legacy \
         layout on a single node moves to it with the command line `botmesh-redis migrate` \
         (docs/migration.md)\n"
    ));

    let rollback = [
        "rollback",
        "--cluster",
        &seed,
        "--prefix",
        &on_cluster,
        "--target-url",
        &url,
        "--target-prefix",
        &back,
    ];
    // No bot ran on the copy: the data is on the legacy keyspace it came from, which may have
    // changed since, so a rollback into a third keyspace is refused.
    let refused = run_expect(3, &rollback);
    assert!(
        refused
            .stderr
            .starts_with("refused: the source is a copy that no bot started"),
        "{}",
        refused.stderr
    );
    // Once the bots ran on the cluster, it holds the data and the rollback copies it.
    block_on(async {
        let client = Client::connect(ClientOptions::cluster([seed.clone()]))
            .await
            .unwrap();
        let store = Store::new(client, StoreOptions::new(on_cluster.as_str())).unwrap();
        store.start().await.unwrap();
    });
    let rolled = run_expect(0, &rollback);
    assert_eq!(
        rolled.stdout.lines().next().unwrap(),
        format!(
            "rollback: prefix {on_cluster:?} (cluster:v1) -> prefix {back:?} (legacy), from \
             cluster {seed} to {}, mirror",
            shared_single().addr()
        )
    );
    assert!(
        rolled.stdout.contains(
            "
  namespace      copied  kept  overwritten  pruned
  messages            3     0            0       0
  chats               2     0            0       0
  contacts            3     0            0       0
  checkpoints         1     0            0       0
  schedules           1     0            0       0
  user-data           2     0            0       0
  fences              1     0            0       0
  conversations       1     0            0       0
  cursors             1     0            0       0
  total              15     0            0       0
"
        ),
        "{}",
        rolled.stdout
    );
    // What the legacy bots wrote, minus their lock holder and the unknown key.
    // And the record of the rollback, a mirror copy of the cluster keyspace.
    let restored = run_expect(0, &["inspect", "--url", &url, "--prefix", &back]);
    let record = "legacy side    mirror copy of ";
    let restored_body = body(&restored.stdout);
    let (data, lifecycle): (Vec<&str>, Vec<&str>) =
        restored_body.lines().partition(|l| !l.starts_with(record));
    assert_eq!(lifecycle.len(), 1, "{}", restored.stdout);
    assert!(
        lifecycle[0].contains(&format!(
            "from the cluster keyspace {on_cluster:?} on a cluster of 3 masters"
        )),
        "{}",
        restored.stdout
    );
    assert_eq!(
        data.join("\n") + "\n",
        SEEDED_INSPECT
            .replace("  locks               1        0       0\n", "")
            .replace("total              16", "total              15")
            .replace("1 (for example PREFIX:weird)", "0")
            .replace("keys scanned   19", "keys scanned   18")
    );
}

#[test]
fn a_live_heartbeat_refuses_the_migration_and_allow_live_proceeds() {
    let prefix = unique_prefix("cli-live");
    seed_legacy(&prefix);
    let heartbeat = format!("{prefix}:co:rep:r1");
    admin_set(&heartbeat, Some(600));
    let url = shared_single().url();

    let refused = run_expect(3, &["migrate", "--url", &url, "--prefix", &prefix]);
    assert_eq!(
        refused.stderr,
        format!(
            "refused: bots may still be running: 1 heartbeat(s) and 0 pending turn queue(s) \
             found (for example {heartbeat}); stop every bot of the prefix, or pass allow_live\n\
             (on the command line: --allow-live runs anyway; unsafe while bots write)\n"
        )
    );
    // Only the headline: no report, since nothing ran.
    assert_eq!(refused.stdout.lines().count(), 1, "{}", refused.stdout);
    let rolled = run_expect(3, &["rollback", "--url", &url, "--prefix", &prefix]);
    assert!(rolled.stderr.contains(&heartbeat), "{}", rolled.stderr);

    let allowed = run_expect(
        0,
        &[
            "migrate",
            "--url",
            &url,
            "--prefix",
            &prefix,
            "--allow-live",
        ],
    );
    assert!(
        allowed
            .stdout
            .contains("\n  total            13     0            0       0\n"),
        "{}",
        allowed.stdout
    );
    assert!(allowed.stdout.contains("\nmarker   written\n"));
    let checked = run_expect(
        0,
        &[
            "check", "--url", &url, "--prefix", &prefix, "--layout", "cluster",
        ],
    );
    assert!(checked
        .stdout
        .contains("\nnote: 1 replica heartbeat(s) under the prefix: bots are running\n"));
}

#[test]
fn a_braced_prefix_cannot_migrate_in_place() {
    let prefix = format!("{{{}}}", unique_prefix("cli-braced"));
    admin_set(&format!("{prefix}:chat:c1"), None);
    let url = shared_single().url();
    let r = run_expect(3, &["migrate", "--url", &url, "--prefix", &prefix]);
    assert_eq!(
        r.stderr,
        format!(
            "refused: the prefix {prefix:?} contains {{ or }}, which the cluster layout reserves \
             for hash tags: an in-place migration is impossible; migrate to a new target prefix\n"
        )
    );
}

/// A migration that completes without copying every key (here a chat record of the wrong
/// type, unreadable as a record) exits 4, says what is missing, and keeps the source although
/// `--delete-source` was given: a script's `migrate && start-bots` stops there. It exited 0
/// before, printing `source keys deleted 0` and nothing else.
#[test]
fn a_migration_that_leaves_keys_out_exits_4_and_keeps_its_source() {
    let prefix = unique_prefix("cli-incomplete");
    admin_set(&format!("{prefix}:chat:c1"), None);
    let mut conn = shared_single().conn().unwrap();
    let wrong = format!("{prefix}:chat:c2");
    let hset = conn.cmd(&["HSET", wrong.as_str(), "f", "v"]).unwrap();
    assert_eq!(hset.as_int(), Some(1), "{hset:?}");
    let url = shared_single().url();
    let r = run_expect(
        4,
        &[
            "migrate",
            "--url",
            &url,
            "--prefix",
            &prefix,
            "--target-prefix",
            &format!("{prefix}-new"),
            "--delete-source",
        ],
    );
    assert_eq!(
        r.stderr,
        "incomplete: 1 keys were not copied (1 unreadable, 0 unrepresentable; examples above): \
         the target lacks them; --delete-source was not carried out: the source is kept\n"
    );
    assert!(r.stdout.contains(&wrong), "{}", r.stdout);
    let kept = conn
        .cmd(&["EXISTS", format!("{prefix}:chat:c1").as_str()])
        .unwrap();
    assert_eq!(kept.as_int(), Some(1), "{kept:?}");
}

/// The demo on an existing server refuses a prefix that holds keys a demo did not write (a
/// bot's), and writes nothing there: it drained an outbox, campaigned for the scheduler and
/// deleted a chat wherever it was pointed before.
#[test]
fn the_demo_refuses_a_prefix_in_use() {
    let prefix = unique_prefix("cli-demo-in-use");
    let record = format!("{prefix}:chat:c1");
    admin_set(&record, None);
    let url = shared_single().url();
    let r = run_expect(3, &["demo", "--url", &url, "--prefix", &prefix]);
    assert!(
        r.stderr.starts_with(&format!(
            "refused: prefix {prefix:?} holds keys a demo did not write (a bot's data?)"
        )),
        "{}",
        r.stderr
    );
    let mut conn = shared_single().conn().unwrap();
    let pattern = format!("{prefix}:*");
    let keys = conn.cmd(&["KEYS", pattern.as_str()]).unwrap();
    assert_eq!(keys.as_array().map(|k| k.len()), Some(1), "{keys:?}");
}

#[test]
fn an_unreachable_server_is_an_error() {
    // Port 1 on loopback: nothing listens there.
    let r = run_expect(
        1,
        &[
            "inspect",
            "--url",
            "redis://127.0.0.1:1",
            "--prefix",
            "p",
            "--connect-timeout",
            "500ms",
        ],
    );
    assert!(r.stderr.starts_with("error: "), "{}", r.stderr);
}

#[test]
fn credentials_and_the_address_map_reach_a_protected_node() {
    // A password that needs percent-encoding in a URL, and an ACL user.
    let node = SingleNode::try_start(
        ServerOptions::new()
            .password("pa:ss@")
            .acl_user("bot", "botpw"),
    )
    .unwrap();
    let addr = node.addr().to_string();
    let plain = format!("redis://{addr}");
    let prefix = unique_prefix("cli-auth");
    let inspect = |url: &str, extra: &[&str]| -> Vec<String> {
        ["inspect", "-q", "--url", url, "--prefix", &prefix]
            .iter()
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let empty = "\n  (no key of either layout under the prefix)\n";

    let in_url = format!("redis://:pa%3Ass%40@{addr}");
    let r = run_expect(0, &inspect(&in_url, &[]));
    assert!(r.stdout.contains(empty), "{}", r.stdout);
    // The URL's credentials are not echoed.
    assert_eq!(
        r.stdout.lines().next(),
        Some(format!("inspect: prefix {prefix:?} on {addr}").as_str())
    );
    let r = run_expect(0, &inspect(&plain, &["--password", "pa:ss@"]));
    assert!(r.stdout.contains(empty), "{}", r.stdout);
    run_env(
        0,
        &[("BOTMESH_REDIS_PASSWORD", "pa:ss@")],
        &inspect(&plain, &[]),
    );
    run_expect(
        0,
        &inspect(&plain, &["--user", "bot", "--password", "botpw"]),
    );
    let wrong = run_expect(
        1,
        &inspect(&plain, &["--user", "bot", "--password", "nope"]),
    );
    assert!(wrong.stderr.starts_with("error: "), "{}", wrong.stderr);
    assert!(!wrong.stderr.contains("nope"), "{}", wrong.stderr);
    let none = run_expect(1, &inspect(&plain, &[]));
    assert!(none.stderr.starts_with("error: "), "{}", none.stderr);

    // An announced name this machine cannot resolve, dialled at the node's real address.
    let announced = format!("node.invalid:{}", node.addr().port());
    let mapping = format!("{announced}={addr}");
    run_expect(
        0,
        &inspect(
            &format!("redis://{announced}"),
            &["--map", &mapping, "--password", "pa:ss@"],
        ),
    );

    // A migration into the protected node, with the target's own password.
    let source = unique_prefix("cli-auth-src");
    seed_legacy(&source);
    let shared = shared_single().url();
    let mut migrate = vec![
        "migrate",
        "-q",
        "--url",
        &shared,
        "--prefix",
        &source,
        "--target-url",
        &plain,
        "--target-prefix",
        &prefix,
    ];
    let refused = run_expect(1, &migrate);
    assert!(refused.stderr.starts_with("error: "), "{}", refused.stderr);
    migrate.extend(["--target-password", "pa:ss@"]);
    let migrated = run_expect(0, &migrate);
    assert!(
        migrated.stdout.contains("\nmarker   written\n"),
        "{}",
        migrated.stdout
    );
}

#[test]
fn a_unix_socket_url_reaches_the_node_and_never_shows_its_password() {
    let node = SingleNode::try_start(
        ServerOptions::new()
            .unix_socket()
            .acl_user("bot", "sock-secret"),
    )
    .unwrap();
    let path = node.server().unix_socket().unwrap().display().to_string();
    let prefix = unique_prefix("cli-unix");
    let empty = "\n  (no key of either layout under the prefix)\n";
    for url in [
        format!("unix://bot:sock-secret@{path}"),
        format!("redis+unix://{path}?db=0&user=bot&pass=sock-secret"),
    ] {
        let r = run_expect(0, &["inspect", "-q", "--url", &url, "--prefix", &prefix]);
        assert_eq!(
            r.stdout.lines().next(),
            Some(format!("inspect: prefix {prefix:?} on {path}").as_str())
        );
        assert!(r.stdout.contains(empty), "{}", r.stdout);
        assert!(!r.stdout.contains("sock-secret"), "{}", r.stdout);
    }
    // A URL that does not parse, and a password the node refuses: errors without it.
    for (url, says) in [
        (
            format!("unix://{path}?db=2&pass=sock-secret"),
            "only database 0",
        ),
        (format!("unix://bot:wrong-secret@{path}"), "WRONGPASS"),
    ] {
        let r = run_expect(1, &["inspect", "-q", "--url", &url, "--prefix", &prefix]);
        assert!(r.stderr.starts_with("error: "), "{}", r.stderr);
        assert!(r.stderr.contains(says), "{}", r.stderr);
        assert!(!r.stderr.contains("secret"), "{}", r.stderr);
        assert!(!r.stdout.contains("secret"), "{}", r.stdout);
    }
}

/// TLS nodes of a private CA, one of them requiring client certificates: reached with the TLS
/// flags, refused without them with the flag to give, and a migration between them given the
/// files once.
#[test]
fn tls_flags_reach_nodes_of_a_private_ca() {
    let files = Arc::new(TlsFiles::generate().unwrap());
    let optional =
        SingleNode::try_start(ServerOptions::new().tls(files.clone(), "optional")).unwrap();
    let mutual = SingleNode::try_start(ServerOptions::new().tls(files.clone(), "yes")).unwrap();
    let path = |name: &str| files.path(name).display().to_string();
    let (ca, cert, key) = (path("ca.crt"), path("client.crt"), path("client.key"));
    let tls_url = optional.tls_url().unwrap();
    let port = optional.server().tls_port().unwrap();
    let prefix = unique_prefix("cli-tls");
    seed_legacy_at(
        ClientOptions::url(tls_url.clone())
            .tls(TlsOptions::new().root_certificates_pem(files.ca_pem())),
        &prefix,
    );
    let inspect = |url: &str, extra: &[&str]| -> Vec<String> {
        ["inspect", "-q", "--url", url, "--prefix", &prefix]
            .iter()
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let seeded = |r: &Run| {
        assert!(
            has_row(&r.stdout, &["items", "3", "0", "0"]),
            "{}",
            r.stdout
        )
    };

    // The public roots do not know the CA: an error that names the flag.
    let untrusted = run_expect(1, &inspect(&tls_url, &[]));
    assert!(
        untrusted.stderr.starts_with("error: "),
        "{}",
        untrusted.stderr
    );
    assert!(
        untrusted.stderr.contains("not trusted"),
        "{}",
        untrusted.stderr
    );
    assert!(
        untrusted
            .stderr
            .contains("(on the command line: --cacert FILE trusts a private CA"),
        "{}",
        untrusted.stderr
    );
    seeded(&run_expect(0, &inspect(&tls_url, &["--cacert", &ca])));
    seeded(&run_expect(
        0,
        &inspect(&tls_url, &["--cacert", &ca, "--cacert-only"]),
    ));
    // A flag turns TLS on for a redis:// URL; --tls alone trusts the public roots only.
    let plain_scheme = format!("redis://127.0.0.1:{port}");
    seeded(&run_expect(0, &inspect(&plain_scheme, &["--cacert", &ca])));
    let public = run_expect(1, &inspect(&plain_scheme, &["--tls"]));
    assert!(public.stderr.contains("not trusted"), "{}", public.stderr);
    // The certificate names 127.0.0.1 and localhost, not another name.
    let named = ["--cacert", ca.as_str(), "--sni", "localhost"];
    seeded(&run_expect(0, &inspect(&tls_url, &named)));
    let misnamed = run_expect(
        1,
        &inspect(&tls_url, &["--cacert", &ca, "--sni", "db.invalid"]),
    );
    assert!(
        misnamed.stderr.contains("--sni NAME"),
        "{}",
        misnamed.stderr
    );
    // Usage: --cacert-only needs --cacert, --cert needs --key.
    run_expect(2, &inspect(&tls_url, &["--cacert-only"]));
    run_expect(2, &inspect(&tls_url, &["--cacert", &ca, "--cert", &cert]));

    // A node requiring client certificates.
    let mutual_url = mutual.tls_url().unwrap();
    let target = unique_prefix("cli-tls-target");
    let inspect_mutual = |extra: &[&str]| -> Vec<String> {
        [
            "inspect",
            "-q",
            "--url",
            &mutual_url,
            "--prefix",
            &target,
            "--cacert",
            &ca,
        ]
        .iter()
        .chain(extra)
        .map(|s| (*s).to_owned())
        .collect()
    };
    let anonymous = run_expect(1, &inspect_mutual(&[]));
    assert!(
        anonymous.stderr.contains("--cert FILE --key FILE"),
        "{}",
        anonymous.stderr
    );
    run_expect(0, &inspect_mutual(&["--cert", &cert, "--key", &key]));

    // A move between the two: the rediss:// target takes the source's CA and certificate.
    let migrate = |extra: &[&str]| -> Vec<String> {
        [
            "migrate",
            "-q",
            "--url",
            &tls_url,
            "--prefix",
            &prefix,
            "--target-url",
            &mutual_url,
            "--target-prefix",
            &target,
            "--cacert",
            &ca,
        ]
        .iter()
        .chain(extra)
        .map(|s| (*s).to_owned())
        .collect()
    };
    // The target's own flags replace the source's: without a certificate it refuses.
    let own = run_expect(
        1,
        &migrate(&["--cert", &cert, "--key", &key, "--target-cacert", &ca]),
    );
    assert!(own.stderr.contains("client certificate"), "{}", own.stderr);
    let moved = run_expect(0, &migrate(&["--cert", &cert, "--key", &key]));
    assert!(
        moved.stdout.contains("\nmarker   written\n"),
        "{}",
        moved.stdout
    );
    let after = run_expect(0, &inspect_mutual(&["--cert", &cert, "--key", &key]));
    assert!(
        has_row(&after.stdout, &["items", "0", "3", "0"]),
        "{}",
        after.stdout
    );
}

#[test]
fn demo_runs_against_an_existing_cluster() {
    let prefix = unique_prefix("cli-demo");
    let seed = shared_cluster().seeds()[0].clone();
    let r = run_expect(0, &["demo", "--cluster", &seed, "--prefix", &prefix]);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "3 replicas, 50 chats, 40 messages each, on cluster {seed}, prefix {prefix:?}, \
             layout cluster"
        )
    );
    assert_eq!(lines[1], "start(): MarkerWritten { checked: 0 }");
    let exact: Vec<&str> = lines
        .iter()
        .skip_while(|l| **l != "listings exact:")
        .copied()
        .collect();
    assert_eq!(
        exact,
        [
            "listings exact:",
            "  chats        yes (49 listed, 49 expected)",
            "  contacts     yes (61 listed, 61 expected)",
            "  checkpoints  yes (50 listed, 50 expected)",
            "  user data    yes (61 users, one entry each)",
            "  messages     yes (49 chats of 40)",
        ]
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("turns: 2000 served, 0 overlapping holders, ")),
        "{}",
        r.stdout
    );
    assert_eq!(r.stderr, "");
    // The prefix is the demo's own (its mark): a second run is not refused.
    let again = run_expect(0, &["demo", "-q", "--cluster", &seed, "--prefix", &prefix]);
    assert_eq!(again.stderr, "");
}

#[test]
fn every_subcommand_runs_on_the_master_of_a_sentinel_deployment() {
    let d = SentinelDeployment::start(
        SentinelOptions::new()
            .master_name("cli")
            .data_password("data-pw")
            .sentinel_password("watch-pw"),
    );
    let prefix = unique_prefix("cli-sentinel");
    let url = d.url().replacen("://", "://:data-pw@", 1);
    seed_legacy_at(
        ClientOptions::url(url.clone()).sentinel_credentials(None, "watch-pw"),
        &prefix,
    );
    let env = [("BOTMESH_REDIS_SENTINEL_PASSWORD", "watch-pw")];
    let cli = |code: i32, command: &str, extra: &[&str]| {
        let mut args = vec![command, "--url", url.as_str(), "--prefix", prefix.as_str()];
        args.extend_from_slice(extra);
        run_env(code, &env, &args)
    };
    let sentinels: Vec<String> = d.sentinel_addrs().iter().map(|a| a.to_string()).collect();
    let inspect = cli(0, "inspect", &[]);
    assert_eq!(
        inspect.stdout.lines().next().unwrap(),
        format!(
            "inspect: prefix {prefix:?} on master \"cli\" of sentinels {}",
            sentinels.join(",")
        )
    );
    // The seeded keys but the unknown one: the same counts as on a plain node.
    let seeded = SEEDED_INSPECT
        .replace(
            "unknown keys   1 (for example PREFIX:weird)",
            "unknown keys   0",
        )
        .replace("keys scanned   19", "keys scanned   18");
    assert_eq!(body(&inspect.stdout), seeded);
    assert!(!inspect.stdout.contains("data-pw") && !inspect.stderr.contains("watch-pw"));
    cli(3, "check", &["--layout", "cluster"]);
    cli(0, "migrate", &["--dry-run"]);
    cli(0, "migrate", &[]);
    cli(0, "check", &["--layout", "cluster"]);
    cli(0, "rollback", &["--dry-run"]);
    cli(0, "cleanup", &["--layout", "legacy", "--dry-run"]);
    // Without the sentinels' password the sentinels refuse: a clear error, exit 1.
    let refused = run_expect(
        1,
        &[
            "inspect",
            "--url",
            url.as_str(),
            "--prefix",
            prefix.as_str(),
        ],
    );
    assert!(refused.stderr.contains("auth"), "{}", refused.stderr);
}
