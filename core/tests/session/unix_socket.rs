//! A single node on a Unix socket: the session hands the driver the socket's path to dial,
//! names the node by that path (`/run/redis.sock:0`, as Redis names Unix-socket peers) in its
//! errors, and never takes the address map to it.

use std::path::PathBuf;
use std::sync::Arc;

use botmesh_redis_core::driver::session::{Config, DialTarget, Output, Session};
use botmesh_redis_core::testing::{get, start, Batch};
use botmesh_redis_core::testing::{Ticket, Tickets, Token};
use botmesh_redis_core::{Deployment, Error, NodeAddr};

#[test]
fn the_socket_path_is_dialled_and_names_the_node_in_a_connect_error() {
    let now = start();
    let path = PathBuf::from("/run/redis/redis.sock");
    let mut config = Config::unix_socket(&path);
    // A cluster's address map has nothing to say about a local socket.
    config.address_map = Some(Arc::new(|_: &NodeAddr| NodeAddr::new("elsewhere", 1)));
    assert_eq!(config.endpoints.deployment(), Deployment::Single);
    let mut session = Session::<Tickets>::new(config, now);
    let ticket = Ticket::new(Token(1));
    session.submit(now, ticket.clone(), Batch::new(vec![get("k")]));
    let conn = match session.poll() {
        Output::Connect { conn, node, dial } => {
            assert_eq!(node, NodeAddr::unix_socket(&path));
            assert_eq!(dial, DialTarget::Unix(path.clone()));
            conn
        }
        other => panic!("not a connect: {other:?}"),
    };
    session.handle_connect_failed(now, conn, "No such file or directory (os error 2)");
    let completion = loop {
        match session.poll() {
            Output::Complete(completion) => break completion,
            Output::Wait { .. } => panic!("the single node's failed connect ended nothing"),
            _ => {}
        }
    };
    assert_eq!(completion.deliver(), Token(1));
    let replies = ticket.take().unwrap().unwrap();
    let [Err(error)] = replies.as_slice() else {
        panic!("not one error: {replies:?}");
    };
    assert_eq!(
        error,
        &Error::Connect {
            addr: NodeAddr::unix_socket(&path),
            reason: "No such file or directory (os error 2)".into(),
        }
    );
    assert_eq!(
        error.to_string(),
        "could not connect to /run/redis/redis.sock:0: No such file or directory (os error 2)"
    );
}
