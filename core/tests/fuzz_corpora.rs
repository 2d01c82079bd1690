//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) through the fuzz targets'
//! bodies (`testing::fuzz`) on every `cargo test`, so an input the fuzzer once found
//! interesting keeps being checked without cargo-fuzz, a nightly compiler or a sanitizer.
//!
//! Each fuzz target in `fuzz/fuzz_targets/` only hands its input to the function of the same
//! name in `testing::fuzz`; this test checks that too, so the replay runs exactly the code that
//! was fuzzed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use botmesh_redis_core::testing::fuzz::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The names of the entries of `dir` (files or folders), sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Runs every file of the target's corpus through its body; names the file that fails.
fn replay(target: &str) {
    let (_, body) = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no fuzz body named {target}"));
    let dir = fuzz_dir().join("corpus").join(target);
    let files = names(&dir);
    assert!(!files.is_empty(), "the corpus {} is empty", dir.display());
    for file in &files {
        let input = fs::read(dir.join(file)).unwrap();
        if catch_unwind(AssertUnwindSafe(|| body(&input))).is_err() {
            panic!(
                "fuzz target {target} fails on {} (replay it with `cargo fuzz run {target} \
                 corpus/{target}/{file}` from fuzz/)",
                dir.join(file).display()
            );
        }
    }
}

#[test]
fn enc() {
    replay("enc");
}

#[test]
fn redirect() {
    replay("redirect");
}

#[test]
fn resp_reply() {
    replay("resp_reply");
}

#[test]
fn session() {
    replay("session");
}

#[test]
fn session_model() {
    replay("session_model");
}

#[test]
fn slot_map() {
    replay("slot_map");
}

/// Every fuzz target has a body here and a committed corpus, and calls that body: none is left
/// out of the replay, and none carries a copy of its body that could drift from what is
/// replayed.
#[test]
fn every_target_is_replayed_through_its_shared_body() {
    let mut bodies: Vec<String> = TARGETS.iter().map(|(name, _)| (*name).to_owned()).collect();
    bodies.sort();
    let targets: Vec<String> = names(&fuzz_dir().join("fuzz_targets"))
        .into_iter()
        .map(|file| file.strip_suffix(".rs").unwrap().to_owned())
        .collect();
    assert_eq!(targets, bodies);
    assert_eq!(names(&fuzz_dir().join("corpus")), bodies);
    for name in &bodies {
        let source =
            fs::read_to_string(fuzz_dir().join(format!("fuzz_targets/{name}.rs"))).unwrap();
        let call =
            format!("fuzz_target!(|data: &[u8]| botmesh_redis_core::testing::fuzz::{name}(data));");
        assert!(
            source.contains(&call),
            "fuzz_targets/{name}.rs does not call {call}"
        );
        assert_eq!(
            source.matches("fuzz_target!").count(),
            1,
            "fuzz_targets/{name}.rs"
        );
    }
}
