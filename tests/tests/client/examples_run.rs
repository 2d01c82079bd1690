//! The examples of `botmesh-redis-tokio` (`drivers/tokio/examples/`) run against real servers:
//! `bot_loop`, `scheduler` and `first_bot` on the shared single node and on the shared cluster, `migration`
//! from the shared single node into the shared cluster and into another prefix on the node.
//! Each example checks its own outcome and exits non-zero when it is wrong; here the exit status
//! and its summary line are asserted.
//!
//! The binaries are the ones `cargo test --workspace` (or `cargo build -p botmesh-redis-tokio
//! --examples`) built into `<target>/debug/examples/`, beside this test's `deps/` directory.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use botmesh_redis_tests::harness::example_binary;
use botmesh_redis_tests::{shared_cluster, shared_single, unique_prefix};

/// Far above what an example takes (the scheduler waits out a 2 s leadership once).
const TIMEOUT: Duration = Duration::from_secs(120);

/// The example binary `name`: `<target>/<profile>/examples/<name>`, this test being
/// `<target>/<profile>/deps/examples_run-<hash>`.
fn example(name: &str) -> PathBuf {
    example_binary(
        name,
        "cargo test --workspace` or `cargo build -p botmesh-redis-tokio --examples",
    )
}

/// Where an example connects.
enum Target {
    Single,
    Cluster,
    /// Legacy data on the single node, migrated into the cluster (for `migration`).
    SingleThenCluster,
}

/// Runs example `name` against `target` under a fresh prefix; asserts exit status 0 and a
/// `summary:` line; yields its standard output.
fn run(name: &str, target: Target) -> String {
    let binary = example(name);
    let mut command = Command::new(&binary);
    for var in ["BOTMESH_URL", "BOTMESH_CLUSTER", "BOTMESH_PREFIX"] {
        command.env_remove(var);
    }
    command.env("BOTMESH_PREFIX", unique_prefix(&format!("example-{name}")));
    if matches!(target, Target::Single | Target::SingleThenCluster) {
        command.env("BOTMESH_URL", shared_single().url());
    }
    if matches!(target, Target::Cluster | Target::SingleThenCluster) {
        command.env("BOTMESH_CLUSTER", shared_cluster().seeds().join(","));
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let started = Instant::now();
    while child.try_wait().expect("waiting for the example").is_none() {
        if started.elapsed() > TIMEOUT {
            child.kill().expect("killing the example");
            let output = child.wait_with_output().expect("the example's output");
            panic!(
                "{name} ran past {TIMEOUT:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().expect("the example's output");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{name} failed ({}); stdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(
        stdout.lines().any(|line| line.starts_with("summary: ")),
        "{name} printed no summary; stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

#[test]
fn bot_loop_on_single_node() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let out = run("bot_loop", Target::Single);
    assert!(out.contains("layout Legacy"), "{out}");
    assert!(
        out.contains("40 messages saved once and 40 replies sent once"),
        "{out}"
    );
}

#[test]
fn bot_loop_on_cluster() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let out = run("bot_loop", Target::Cluster);
    assert!(out.contains("layout Cluster"), "{out}");
    assert!(
        out.contains("40 messages saved once and 40 replies sent once"),
        "{out}"
    );
}

#[test]
fn scheduler_on_single_node() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let out = run("scheduler", Target::Single);
    assert!(out.contains("stale writes refused"), "{out}");
    assert_eq!(out.matches(": refused, Stale").count(), 2, "{out}");
}

#[test]
fn scheduler_on_cluster() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let out = run("scheduler", Target::Cluster);
    assert!(out.contains("layout Cluster"), "{out}");
    assert_eq!(out.matches(": refused, Stale").count(), 2, "{out}");
}

#[test]
fn migration_from_single_node_to_cluster() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let out = run("migration", Target::SingleThenCluster);
    assert!(
        out.contains("target: the cluster of BOTMESH_CLUSTER"),
        "{out}"
    );
    assert!(out.contains("marker written"), "{out}");
    assert!(out.contains("messages: 6 copied, 0 kept"), "{out}");
}

#[test]
fn migration_into_another_prefix_on_the_node() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let out = run("migration", Target::Single);
    assert!(out.contains("BOTMESH_CLUSTER unset"), "{out}");
    assert!(out.contains("marker written"), "{out}");
    assert!(out.contains("messages: 6 copied, 0 kept"), "{out}");
}

/// The bot of the issue that asked for it (README and docs alone: paging, records, user data,
/// a typed record, turns, a fenced lock, a leadership, the outbox, a close), unchanged on both.
#[test]
fn first_bot_on_single_node() {
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let out = run("first_bot", Target::Single);
    assert!(
        out.contains("summary: 5 messages, 1 send, layout legacy\n"),
        "{out}"
    );
}

#[test]
fn first_bot_on_cluster() {
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let out = run("first_bot", Target::Cluster);
    assert!(
        out.contains("summary: 5 messages, 1 send, layout cluster\n"),
        "{out}"
    );
}

#[test]
fn quick_start_on_cluster() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let out = run("quick_start", Target::Cluster);
    assert_eq!(
        out, "b\"hello\"\nsummary: 1 message(s) listed, layout cluster\n",
        "{out}"
    );
}

/// The README's quick start and `examples/quick_start.rs` are the same program: every line of
/// the README's block is in the example, in order, except the `connect` line, whose seed and
/// prefix the example takes from the environment. Whitespace is ignored: rustfmt breaks long
/// chains in the example that the README keeps on one line.
#[test]
fn readme_quick_start_is_the_example() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let example = std::fs::read_to_string(format!("{root}/drivers/tokio/examples/quick_start.rs"))
        .expect("the quick_start example");
    let block = readme
        .split("```rust,no_run\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README's first Rust block is its quick start");
    let lines: Vec<&str> = block
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    assert_eq!(
        lines.len(),
        10,
        "the quick start is 11 lines with `cargo add`, ending with the store's close:\n{block}"
    );
    let squeeze = |text: &str| text.split_whitespace().collect::<String>();
    let example = squeeze(&example);
    let mut rest = example.as_str();
    for line in lines {
        if line.contains("connect(ClientOptions::cluster([\"127.0.0.1:7000\"]), \"mybot\")") {
            continue;
        }
        let wanted = squeeze(line);
        let at = rest
            .find(&wanted)
            .unwrap_or_else(|| panic!("the example lacks, in order, the README's line {line:?}"));
        rest = &rest[at + wanted.len()..];
    }
}
