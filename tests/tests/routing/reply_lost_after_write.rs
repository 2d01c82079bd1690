//! A write whose connection dies after the write was sent ends as `Error::ReplyLost` (outcome
//! unknown) and is never re-sent, whether the server had run it or not; a read in the same
//! situation is retried.
//!
//! Making the connection die at exactly that point is deterministic, with no timing:
//! - *sent, not run*: `CLIENT PAUSE ... WRITE` holds every write the server receives; the test
//!   waits until `CLIENT LIST` shows the client blocked on the command, then `CLIENT KILL ID`.
//! - *run, reply dropped*: with `client-output-buffer-limit normal 64kb 0 0`, a script that
//!   increments a counter and then returns 200 kB makes the server close the connection after
//!   running it and before sending a byte of the reply.
//!
//! Each test (on each driver) starts its own single node: pausing and output limits affect
//! every client.

use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_core::Script;
use botmesh_redis_core::{Access, ClientOptions, Error, Executor, Key, Request, Value};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::counters::client_list;
use botmesh_redis_tests::{both_drivers, AdminConn, ServerOptions, SingleNode};
use bytes::Bytes;

/// Increments a counter, then returns a reply as long as asked.
static INCR_THEN_BIG_REPLY: Script = Script::new(
    "incr_then_big_reply",
    "-- KEYS[1] a counter\n\
     -- ARGV[1] the length of the reply\n\
     -- Returns ARGV[1] times 'x'.\n\
     redis.call('INCR', KEYS[1])\n\
     return string.rep('x', tonumber(ARGV[1]))\n",
);

/// Reads a string: a read, but sent as `EVALSHA`, which a write pause holds like any script.
static READ_VIA_SCRIPT: Script = Script::new(
    "read_via_script",
    "-- KEYS[1] a string\n\
     -- Returns its value.\n\
     return redis.call('GET', KEYS[1])\n",
);

fn incr(key: &Key) -> Request {
    Request::cmd(Access::Write, "INCR")
        .key(key)
        .build()
        .unwrap()
}

fn get(key: &Key) -> Request {
    Request::cmd(Access::Read, "GET").key(key).build().unwrap()
}

/// Waits until exactly one client is blocked (flag `b`) on `command`, other than those in
/// `except`, and returns its id.
async fn blocked_client(node: &Arc<SingleNode>, command: &'static str, except: Vec<u64>) -> u64 {
    let node = Arc::clone(node);
    tokio::task::spawn_blocking(move || {
        let mut admin = node.conn().unwrap();
        botmesh_redis_tests::poll_until(
            std::time::Instant::now() + Duration::from_secs(10),
            "a client blocked on the command",
            || {
                let blocked: Vec<u64> = client_list(&mut admin)
                    .into_iter()
                    .filter(|(id, c)| {
                        !except.contains(id) && c["cmd"] == command && c["flags"].contains('b')
                    })
                    .map(|(id, _)| id)
                    .collect();
                match blocked[..] {
                    [id] => Ok(id),
                    _ => Err(format!("blocked on {command}: {blocked:?}")),
                }
            },
        )
        .unwrap()
    })
    .await
    .unwrap()
}

fn kill(admin: &mut AdminConn, id: u64) {
    let killed = admin
        .cmd(&["CLIENT", "KILL", "ID", id.to_string().as_str()])
        .unwrap();
    assert_eq!(killed.as_int(), Some(1));
}

/// Shared with the blocking helpers that poll it from another thread.
fn node(options: ServerOptions) -> Arc<SingleNode> {
    Arc::new(SingleNode::start(options))
}

async fn write_killed_while_in_flight_is_reply_lost_and_never_resent<R: Runtime>() {
    let node = node(ServerOptions::new());
    let client = Client::<R>::connect(ClientOptions::url(node.url()))
        .await
        .unwrap();
    let counter = Key::new("counter");
    let mut admin = node.conn().unwrap();
    assert!(admin
        .cmd(&["CLIENT", "PAUSE", "20000", "WRITE"])
        .unwrap()
        .is_ok());

    let in_flight = tokio::spawn({
        let client = client.clone();
        let request = incr(&counter);
        async move { client.call(request).await }
    });
    let id = blocked_client(&node, "incr", Vec::new()).await;
    kill(&mut admin, id);
    let error = in_flight.await.unwrap().unwrap_err();
    assert!(matches!(error, Error::ReplyLost { .. }), "{error:?}");
    assert!(error.outcome_unknown());
    assert!(admin.cmd(&["CLIENT", "UNPAUSE"]).unwrap().is_ok());

    // Had the client re-sent the INCR on its new connection, this GET (on that connection,
    // after it) would see 1.
    assert_eq!(client.call(get(&counter)).await, Ok(Value::Nil));
    assert_eq!(client.call(incr(&counter)).await, Ok(Value::Int(1)));
    assert_eq!(admin.cmd(&["GET", "counter"]).unwrap().as_str(), Some("1"));
    client.close().await;
}

async fn write_that_ran_but_lost_its_reply_is_reply_lost_and_ran_once<R: Runtime>() {
    let node = node(ServerOptions::new().config("client-output-buffer-limit normal 64kb 0 0"));
    let client = Client::<R>::connect(ClientOptions::url(node.url()))
        .await
        .unwrap();
    let counter = Key::new("counter");
    let request = Request::script(
        &INCR_THEN_BIG_REPLY,
        Access::Write,
        vec![counter.clone()],
        vec![Bytes::from_static(b"200000")],
    )
    .unwrap();
    let error = client.call(request).await.unwrap_err();
    assert!(matches!(error, Error::ReplyLost { .. }), "{error:?}");
    assert!(error.outcome_unknown());

    let mut admin = node.conn().unwrap();
    assert_eq!(admin.cmd(&["GET", "counter"]).unwrap().as_str(), Some("1"));
    // The client carries on, on a new connection, and nothing was re-sent meanwhile.
    assert_eq!(client.call(get(&counter)).await, Ok(Value::from("1")));
    let small = Request::script(
        &INCR_THEN_BIG_REPLY,
        Access::Write,
        vec![counter.clone()],
        vec![Bytes::from_static(b"3")],
    )
    .unwrap();
    assert_eq!(client.call(small).await, Ok(Value::from("xxx")));
    assert_eq!(admin.cmd(&["GET", "counter"]).unwrap().as_str(), Some("2"));
    client.close().await;
}

async fn read_killed_while_in_flight_is_retried_on_a_new_connection<R: Runtime>() {
    let node = node(ServerOptions::new());
    let mut admin = node.conn().unwrap();
    assert!(admin.cmd(&["SET", "greeting", "hello"]).unwrap().is_ok());
    let client = Client::<R>::connect(ClientOptions::url(node.url()))
        .await
        .unwrap();
    assert!(admin
        .cmd(&["CLIENT", "PAUSE", "20000", "WRITE"])
        .unwrap()
        .is_ok());

    let request = Request::script(
        &READ_VIA_SCRIPT,
        Access::Read,
        vec![Key::new("greeting")],
        Vec::new(),
    )
    .unwrap();
    let in_flight = tokio::spawn({
        let client = client.clone();
        async move { client.call(request).await }
    });
    let first = blocked_client(&node, "evalsha", Vec::new()).await;
    kill(&mut admin, first);
    // The read is sent again, on a new connection, where the pause holds it again.
    let second = blocked_client(&node, "evalsha", vec![first]).await;
    assert_ne!(first, second);
    assert!(admin.cmd(&["CLIENT", "UNPAUSE"]).unwrap().is_ok());
    assert_eq!(in_flight.await.unwrap(), Ok(Value::from("hello")));
    client.close().await;
}

both_drivers!(
    write_killed_while_in_flight_is_reply_lost_and_never_resent,
    write_that_ran_but_lost_its_reply_is_reply_lost_and_ran_once,
    read_killed_while_in_flight_is_retried_on_a_new_connection,
);
