//! A TCP connect that never completes ends at the session's connect timeout, the only connect
//! timeout there is, and the driver cancels the connect task when the session closes the
//! connection: nothing is left running.
//!
//! The node is a listener that never accepts, with its accept queue full: the kernel drops
//! further SYNs, so a connect to it neither succeeds nor fails (it retransmits its SYN).

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use botmesh_redis_core::{Access, ClientOptions, Error, Executor, Request};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{both_drivers, eventually};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);

/// A listener whose accept queue is full, and the connections that fill it.
fn black_hole() -> (tokio::net::TcpListener, Vec<TcpStream>, SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let fillers = (0..4)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok())
        .collect();
    (listener, fillers, addr)
}

async fn a_hanging_connect_ends_at_the_connect_timeout_and_leaves_no_task<R: Runtime>() {
    let (_listener, _fillers, addr) = black_hole();
    // The premise: a plain connect to it hangs. Without it the test would prove nothing.
    let probe = tokio::time::timeout(
        Duration::from_millis(500),
        tokio::net::TcpStream::connect(addr),
    )
    .await;
    assert!(
        probe.is_err(),
        "a connect to a listener with a full accept queue completed on this machine; the test \
         needs a connect that hangs"
    );

    let options = ClientOptions::url(format!("redis://{addr}")).connect_timeout(CONNECT_TIMEOUT);
    let client = Client::<R>::start(options.clone()).unwrap();
    let started = Instant::now();
    let ping = Request::cmd(Access::Read, "PING").build().unwrap();
    let error = client.call(ping).await.unwrap_err();
    let elapsed = started.elapsed();
    let Error::Connect { addr: node, reason } = &error else {
        panic!("not a connect error: {error:?}");
    };
    assert_eq!(node.to_string(), addr.to_string());
    assert_eq!(reason, &format!("no connection within {CONNECT_TIMEOUT:?}"));
    assert!(
        elapsed >= CONNECT_TIMEOUT && elapsed < CONNECT_TIMEOUT + Duration::from_secs(1),
        "ended after {elapsed:?}"
    );
    // The connect task was cancelled with the connection: only the lanes' session tasks and
    // line keepers (one each, on one node) are left (the other lanes dialled nothing).
    let lanes = 2 * client.lanes() as u64;
    eventually(
        Duration::from_secs(5),
        "the connect task to end with its connection",
        || {
            let stats = client.stats();
            std::future::ready((stats.tasks == lanes && stats.connections == 0).then_some(()))
        },
    )
    .await;
    assert_eq!(client.stats().dials, 1);
    client.close().await;
}

both_drivers!(a_hanging_connect_ends_at_the_connect_timeout_and_leaves_no_task);
