//! One node behind a name that a failover moves to the new master (a managed service's primary
//! endpoint, a Kubernetes Service): the old master, demoted, answers the next write
//! `READONLY`, and the client dials the name again, reaching the new master. It stayed on the
//! demoted node's open connection before, every write refused until the process restarted.
//!
//! The name's move is the address map's: the client dials `db.invalid`, mapped to whichever
//! node the test says.

use std::sync::{Arc, Mutex};

use botmesh_redis_core::{Access, ClientOptions, Executor, Key, NodeAddr, Request, Value};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{both_drivers, unique_prefix, ServerOptions, SingleNode};

fn incr(key: &Key) -> Request {
    Request::cmd(Access::Write, "INCR")
        .key(key)
        .build()
        .unwrap()
}

async fn a_name_moved_to_the_new_master_is_followed<R: Runtime>() {
    let old = SingleNode::start(ServerOptions::new());
    let new = SingleNode::start(ServerOptions::new());
    let addr = |node: &SingleNode| NodeAddr::new("127.0.0.1", node.addr().port());
    let target = Arc::new(Mutex::new(addr(&old)));
    let options = ClientOptions::url("redis://db.invalid:6379").node_address_map({
        let target = Arc::clone(&target);
        move |_| target.lock().unwrap().clone()
    });
    let client = Client::<R>::connect(options.lanes(1)).await.unwrap();
    let key = Key::new(unique_prefix("name-moved"));
    assert_eq!(client.call(incr(&key)).await, Ok(Value::Int(1)));

    // The failover: the old master follows the new one, and the name moves.
    let port = new.addr().port().to_string();
    let mut admin = old.conn().unwrap();
    assert!(admin
        .cmd(&["REPLICAOF", "127.0.0.1", port.as_str()])
        .unwrap()
        .is_ok());
    *target.lock().unwrap() = addr(&new);

    assert_eq!(client.call(incr(&key)).await, Ok(Value::Int(1)));
    assert_eq!(client.call(incr(&key)).await, Ok(Value::Int(2)));
    let mut on_new = new.conn().unwrap();
    assert_eq!(
        on_new
            .cmd(&["GET", key.to_string().as_str()])
            .unwrap()
            .as_str(),
        Some("2")
    );
    client.close().await;
}

both_drivers!(a_name_moved_to_the_new_master_is_followed);
