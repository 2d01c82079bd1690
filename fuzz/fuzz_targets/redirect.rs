//! Fuzzes redirect and endpoint parsing: `MOVED`/`ASK` texts, `host:port` endpoints and
//! `redis://` URLs. Nothing panics; whatever is accepted is usable (a slot below 16384, a
//! non-empty host, a non-zero port).
#![no_main]

use botmesh_redis_core::keys::SLOT_COUNT;
use botmesh_redis_core::options::parse_url;
use botmesh_redis_core::retry::{classify, Decision};
use botmesh_redis_core::topology::{parse_redirect, NodeAddr, Redirect};
use botmesh_redis_core::ServerError;
use libfuzzer_sys::fuzz_target;

fn usable(addr: &NodeAddr) {
    assert!(!addr.host.is_empty() && addr.host != "?");
    assert_ne!(addr.port, 0);
    // The printed form parses back to the same address.
    assert_eq!(NodeAddr::parse(&addr.to_string(), "x").as_ref(), Some(addr));
}

fuzz_target!(|input: (String, String, u16)| {
    let (text, host, slot) = input;
    for candidate in [
        text.clone(),
        format!("MOVED {slot} {text}"),
        format!("ASK {} {text}", slot % SLOT_COUNT),
    ] {
        let error = ServerError::new(candidate);
        match parse_redirect(&error, &host) {
            Some(Redirect::Moved { slot, addr } | Redirect::Ask { slot, addr }) => {
                assert!(slot < SLOT_COUNT);
                if !host.is_empty() && host != "?" && !host.contains(['[', ']']) {
                    usable(&addr);
                }
            }
            None => {}
        }
        match classify(&error, &host) {
            Decision::Moved { slot, .. } => assert!(slot < SLOT_COUNT),
            _ => {}
        }
    }
    if let Some(addr) = NodeAddr::parse(&text, "fallback") {
        assert!(!addr.host.is_empty());
        assert_ne!(addr.port, 0);
    }
    if let Ok(url) = parse_url(&text) {
        assert!(!url.addr.host.is_empty());
        assert_ne!(url.addr.port, 0);
    }
});
