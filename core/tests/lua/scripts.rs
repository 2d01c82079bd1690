//! The real scripts of `lua/`.

use crate::body::*;
use crate::header::*;

pub(crate) fn lua_files() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "lua"))
        .map(|path| {
            let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
            (stem, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
pub(crate) fn every_lua_script_has_a_header_and_builds_no_key() {
    let files = lua_files();
    assert!(
        files.iter().any(|(stem, _)| stem == "save_message"),
        "lua/ was not found or is missing save_message.lua: {:?}",
        files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    let mut failures = Vec::new();
    for (stem, src) in &files {
        if let Err(problems) = check_script(stem, src) {
            failures.push(format!("lua/{stem}.lua:\n  {}", problems.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
pub(crate) fn save_message_header_matches_its_call() {
    use botmesh_redis_core::driver::{store::messages, Plan, Step};
    use botmesh_redis_core::{Keyspace, Layout};
    let src = include_str!("../../lua/save_message.lua");
    let header = check_script("save_message", src).unwrap();
    assert_eq!(
        header.keys,
        Declared {
            count: 2,
            tail_from: None
        }
    );
    assert_eq!(
        header.argv,
        Declared {
            count: 3,
            tail_from: None
        }
    );
    let ks = Keyspace::new(Layout::Cluster, "bot").unwrap();
    let mut plan =
        messages::save_message(&ks, "c", "m", 1, bytes::Bytes::from_static(b"p")).unwrap();
    let Step::Send(batch) = plan.start() else {
        panic!("save_message must start by sending")
    };
    let wire = batch[0].wire_args(false);
    // EVALSHA sha numkeys keys... args...
    assert_eq!(&wire[0][..], b"EVALSHA");
    assert_eq!(&wire[2][..], b"2", "numkeys");
    assert_eq!(wire.len(), 3 + header.keys.count + header.argv.count);
    assert_eq!(batch[0].script_ref().unwrap().name(), "save_message");
}
