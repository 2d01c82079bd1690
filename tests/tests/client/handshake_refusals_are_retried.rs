//! A node that refuses the handshake for a while (too many clients, a long script) is a
//! connect that failed and backs off, not an authentication error: the call succeeds once the
//! node serves again, within the retry budget.

use std::time::{Duration, Instant};

use botmesh_redis_core::{Access, ClientOptions, Executor, Request, Value};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{both_drivers, poll_until, ServerOptions, SingleNode};

fn get() -> Request {
    Request::cmd(Access::Read, "GET").arg("k").build().unwrap()
}

async fn a_full_server_is_dialled_again_until_it_takes_the_client<R: Runtime>() {
    let node = SingleNode::start(ServerOptions::new());
    // The admin connection is the one client the server takes.
    let mut admin = node.conn().unwrap();
    admin.cmd(&["CONFIG", "SET", "maxclients", "1"]).unwrap();
    let client = Client::<R>::start(ClientOptions::url(node.url())).unwrap();
    let call = {
        let client = client.clone();
        tokio::spawn(async move { client.call(get()).await })
    };
    // The client was refused at least once before the server takes it.
    poll_until(
        Instant::now() + Duration::from_secs(5),
        "a refused client",
        || {
            let stats = admin.cmd(&["INFO", "stats"])?;
            let rejected = botmesh_redis_tests::parse_info(stats.as_str().unwrap_or(""))
                .get("rejected_connections")
                .cloned()
                .unwrap_or_default();
            match rejected.as_str() {
                "" | "0" => Err(format!("rejected_connections: {rejected:?}")),
                _ => Ok(()),
            }
        },
    )
    .unwrap();
    admin.cmd(&["CONFIG", "SET", "maxclients", "100"]).unwrap();
    assert_eq!(call.await.unwrap(), Ok(Value::Nil));
    let stats = client.stats();
    assert!(stats.dials >= 2, "{stats:?}");
    client.close().await;
}

async fn a_busy_script_delays_the_handshake_without_failing_the_call<R: Runtime>() {
    // `lua-time-limit` is 6.2's name for it, kept as an alias of `busy-reply-threshold`.
    let node = SingleNode::start(ServerOptions::new().config("lua-time-limit 50"));
    // A script that keeps the server busy for 1.5 s, on its own connection.
    let mut script_conn = node.conn().unwrap();
    script_conn.set_timeout(Duration::from_secs(10)).unwrap();
    let busy = std::thread::spawn(move || {
        let script = "local t = redis.call('TIME') \
                      local until_us = (t[1] * 1000000 + t[2]) + 1500000 \
                      while true do \
                        local n = redis.call('TIME') \
                        if n[1] * 1000000 + n[2] >= until_us then return 1 end \
                      end";
        script_conn.cmd(&["EVAL", script, "0"]).unwrap()
    });
    let mut probe = node.conn().unwrap();
    poll_until(
        Instant::now() + Duration::from_secs(5),
        "the server busy",
        || {
            let reply = probe.call(&["PING"])?;
            match reply.as_error() {
                Some(e) if e.starts_with("BUSY") => Ok(()),
                _ => Err(format!("{reply:?}")),
            }
        },
    )
    .unwrap();
    let started = Instant::now();
    let client = Client::<R>::start(ClientOptions::url(node.url())).unwrap();
    assert_eq!(client.call(get()).await, Ok(Value::Nil));
    assert_eq!(busy.join().unwrap().as_int(), Some(1));
    // The call waited for the script (about 1.5 s), within the retry budget (about 2.6 s).
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(client.stats().dials >= 2, "{:?}", client.stats());
    client.close().await;
}

both_drivers!(
    a_full_server_is_dialled_again_until_it_takes_the_client,
    a_busy_script_delays_the_handshake_without_failing_the_call
);
