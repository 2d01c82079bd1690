//! The example `replicas` runs to a clean summary: on the throwaway cluster it starts itself
//! (restart and failover), and on the shared cluster through `BOTMESH_CLUSTER` (restart only).
//! The example checks every dialogue itself and exits non-zero when one lost an update; here its
//! exit status and summary line are asserted.
//!
//! The binary is the one `cargo test` built into `<target>/<profile>/examples/`, beside this
//! test's `deps/` directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use botmesh_redis_harness::{example_binary, shared_cluster, unique_prefix};

fn example(name: &str) -> PathBuf {
    example_binary(name, "cargo test -p botmesh-redis-teloxide")
}

fn run(cluster: Option<String>) -> String {
    let mut command = Command::new(example("replicas"));
    command.env_remove("BOTMESH_CLUSTER");
    command.env("BOTMESH_PREFIX", unique_prefix("teloxide-example"));
    if let Some(seeds) = cluster {
        command.env("BOTMESH_CLUSTER", seeds);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the example failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = stdout
        .lines()
        .find(|line| line.starts_with("summary:"))
        .unwrap_or_else(|| panic!("no summary line in:\n{stdout}"));
    assert!(summary.ends_with(", 0 dialogues lost"), "{summary}");
    stdout
}

#[test]
fn replicas_survive_a_restart_and_a_failover_on_their_own_cluster() {
    let stdout = run(None);
    assert!(stdout.contains("3. failover: master"), "{stdout}");
    assert!(stdout.contains("a restart, a failover"), "{stdout}");
}

#[test]
fn replicas_run_on_a_given_cluster() {
    let stdout = run(Some(shared_cluster().seeds().join(",")));
    assert!(stdout.contains("3. failover skipped"), "{stdout}");
}
