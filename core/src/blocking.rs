//! Which commands the server answers only when something happens (or a timeout passes): what
//! [`Request::blocks`](crate::Request::blocks) reads, so that a client's room for calls on one
//! node does not count them (`docs/operations.md`, "One node's room for calls").

use bytes::Bytes;

/// The commands that always block until served or timed out.
const BLOCKING: [&[u8]; 10] = [
    b"BLPOP",
    b"BRPOP",
    b"BRPOPLPUSH",
    b"BLMOVE",
    b"BLMPOP",
    b"BZPOPMIN",
    b"BZPOPMAX",
    b"BZMPOP",
    b"WAIT",
    b"WAITAOF",
];

/// Whether the command `name` blocks on the server, given its arguments after the name.
pub(crate) fn blocks(name: &str, args: &[Bytes]) -> bool {
    let named = |n: &[u8]| name.as_bytes().eq_ignore_ascii_case(n);
    if BLOCKING.iter().any(|n| named(n)) {
        return true;
    }
    // A stream read blocks only when told to; `BLOCK` comes before `STREAMS`, after which
    // every argument is a stream's key or id (one may be named `BLOCK`).
    (named(b"XREAD") || named(b"XREADGROUP"))
        && args
            .iter()
            .take_while(|a| !a.eq_ignore_ascii_case(b"STREAMS"))
            .any(|a| a.eq_ignore_ascii_case(b"BLOCK"))
}

#[cfg(test)]
mod tests {
    use crate::keys::Key;
    use crate::request::{Access, Request};

    #[test]
    fn blocking_commands_and_waits_are_told_apart() {
        let key = Key::new("k");
        let cmd = |name: &'static str, args: &[&str]| {
            args.iter()
                .fold(Request::cmd(Access::Write, name).key(&key), |b, a| {
                    b.arg(*a)
                })
                .build()
                .unwrap()
        };
        for name in [
            "BLPOP", "blpop", "BRPOP", "BLMOVE", "BZPOPMIN", "WAIT", "WAITAOF",
        ] {
            assert!(cmd(name, &["0"]).blocks(), "{name}");
        }
        assert!(cmd("XREAD", &["COUNT", "1", "block", "0", "STREAMS", "s", "$"]).blocks());
        assert!(cmd(
            "XREADGROUP",
            &["GROUP", "g", "c", "BLOCK", "5", "STREAMS", "s", ">"]
        )
        .blocks());
        // A stream named `BLOCK` after `STREAMS` does not make a read block.
        assert!(!cmd("XREAD", &["STREAMS", "BLOCK", "0"]).blocks());
        assert!(!cmd("GET", &[]).blocks());
        assert!(!cmd("LPOP", &[]).blocks());
        assert!(cmd("SET", &["v"]).then_wait(1, 100).blocks());
        let script = Request::script(
            &crate::scripts::SAVE_MESSAGE,
            Access::Write,
            vec![key],
            vec![],
        );
        assert!(!script.unwrap().blocks());
    }

    #[test]
    fn plans_holding_a_blocking_request_say_they_may_wait() {
        use crate::batch::Batch;
        use crate::plan::{single, Plan};
        let key = Key::new("k");
        let blpop = || {
            Request::cmd(Access::Write, "BLPOP")
                .key(&key)
                .arg("0")
                .build()
                .unwrap()
        };
        let get = || Request::cmd(Access::Read, "GET").key(&key).build().unwrap();
        assert!(single("call", blpop(), Ok).may_wait());
        assert!(!single("call", get(), Ok).may_wait());
        assert!(Batch::new(vec![get(), blpop()]).may_wait());
        assert!(!Batch::new(vec![get(), get()]).may_wait());
    }
}
