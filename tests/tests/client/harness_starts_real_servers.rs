//! Tests of the real-server harness itself: it must start what it claims, and its topology
//! helpers must do what they claim, before any suite relies on them.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Instant;

use botmesh_redis_tests::{
    server_version, shared_cluster, shared_single, unique_prefix, ClusterOptions, RedisCluster,
    ServerOptions, SingleNode, Value, SLOT_COUNT,
};

fn role(cluster: &RedisCluster, addr: std::net::SocketAddr) -> String {
    let reply = cluster.conn(addr).unwrap().cmd(&["ROLE"]).unwrap();
    reply.as_array().unwrap()[0].as_str().unwrap().to_owned()
}

#[test]
fn single_node_with_password_and_acl_user_checks_auth() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let node = SingleNode::start(
        ServerOptions::new()
            .password("admin-secret")
            .acl_user("bot", "bot-secret")
            .config("maxmemory-policy noeviction"),
    );

    let mut anonymous = node.conn_unauthenticated().unwrap();
    let refused = anonymous.call(&["PING"]).unwrap();
    assert!(
        refused.as_error().unwrap().starts_with("NOAUTH"),
        "{refused:?}"
    );
    let wrong = anonymous.call(&["AUTH", "nope"]).unwrap();
    assert!(
        wrong.as_error().unwrap().starts_with("WRONGPASS"),
        "{wrong:?}"
    );

    anonymous.auth(None, "admin-secret").unwrap();
    assert_eq!(
        anonymous.cmd(&["PING"]).unwrap(),
        Value::Simple("PONG".into())
    );
    assert_eq!(
        anonymous.cmd(&["ACL", "WHOAMI"]).unwrap().as_str(),
        Some("default")
    );

    let mut user = node.conn_unauthenticated().unwrap();
    assert!(user.auth(Some("bot"), "wrong").is_err());
    user.auth(Some("bot"), "bot-secret").unwrap();
    assert_eq!(user.cmd(&["ACL", "WHOAMI"]).unwrap().as_str(), Some("bot"));
    let key = unique_prefix("selftest-single");
    assert!(user.cmd(&["SET", key.as_str(), "v"]).unwrap().is_ok());
    assert_eq!(
        user.cmd(&["GET", key.as_str()]).unwrap().as_str(),
        Some("v")
    );

    let mut admin = node.conn().unwrap();
    let policy = admin.cmd(&["CONFIG", "GET", "maxmemory-policy"]).unwrap();
    assert_eq!(policy.as_array().unwrap()[1].as_str(), Some("noeviction"));
    let replies = admin
        .pipeline(&[vec!["PING"], vec!["NOSUCHCOMMAND"], vec!["ECHO", "x"]])
        .unwrap();
    assert_eq!(replies[0].as_str(), Some("PONG"));
    assert!(replies[1].as_error().unwrap().starts_with("ERR"));
    assert_eq!(replies[2].as_str(), Some("x"));

    let pid = node.server().pid();
    let dir = node.server().dir().to_owned();
    drop(node);
    assert!(!dir.exists(), "the temp dir of a dropped node is deleted");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the dropped node is dead"
    );

    let shared = shared_single();
    assert_eq!(
        shared.conn().unwrap().cmd(&["PING"]).unwrap().as_str(),
        Some("PONG")
    );
}

#[test]
fn a_standalone_cluster_node_gets_a_bus_port_fit_for_its_version() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let node = SingleNode::start(
        ServerOptions::new()
            .config("cluster-enabled yes")
            .config("cluster-config-file nodes.conf")
            .cluster_bus(),
    );
    let port = node.server().port();
    let bus = node.server().cluster_port().unwrap();
    let expected = if server_version().unwrap().has_cluster_port() {
        port - 10000
    } else {
        port + 10000
    };
    assert_eq!(bus, expected);
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let bounds: Vec<u16> = range
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(!(bounds[0]..=bounds[1]).contains(&bus), "bus port {bus}");
    // The node listens on that bus port.
    std::net::TcpStream::connect(("127.0.0.1", bus)).unwrap();
    let info = node.conn().unwrap().cmd(&["CLUSTER", "INFO"]).unwrap();
    assert!(
        info.as_str().unwrap().contains("cluster_known_nodes:1"),
        "{info:?}"
    );
}

#[test]
fn shared_cluster_is_ok_with_three_masters_and_their_replicas() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let started = Instant::now();
    let cluster = shared_cluster();
    eprintln!("shared cluster ready in {:?}", started.elapsed());

    assert_eq!(cluster.nodes().len(), 6);
    let masters = cluster.masters().unwrap();
    assert_eq!(masters.len(), 3);
    assert_eq!(cluster.replicas().unwrap().len(), 3);

    for node in cluster.nodes() {
        let mut conn = cluster.conn(node).unwrap();
        let info = conn.cmd(&["CLUSTER", "INFO"]).unwrap();
        assert!(
            info.as_str().unwrap().contains("cluster_state:ok"),
            "{node}: {info:?}"
        );
        let ranges =
            botmesh_redis_tests::parse_cluster_slots(&conn.cmd(&["CLUSTER", "SLOTS"]).unwrap())
                .unwrap();
        let covered: usize = ranges
            .iter()
            .map(|r| usize::from(r.end - r.start) + 1)
            .sum();
        assert_eq!(covered, usize::from(SLOT_COUNT));
        for range in &ranges {
            assert_eq!(range.replicas.len(), 1, "{node} lists {range:?}");
            assert_eq!(cluster.replicas_of(range.master).unwrap(), range.replicas);
        }
    }

    assert_eq!(cluster.key_slot("foo").unwrap(), 12182);
    assert_eq!(
        cluster.key_slot("{user1000}.following").unwrap(),
        cluster.key_slot("user1000").unwrap()
    );

    let key = format!("{}:k", unique_prefix("selftest-cluster"));
    let mut owner = cluster.conn_for_key(&key).unwrap();
    assert!(owner.cmd(&["SET", key.as_str(), "v"]).unwrap().is_ok());
    assert_eq!(
        owner.cmd(&["GET", key.as_str()]).unwrap().as_str(),
        Some("v")
    );
    let other = masters.into_iter().find(|m| *m != owner.addr()).unwrap();
    let moved = cluster
        .conn(other)
        .unwrap()
        .call(&["GET", key.as_str()])
        .unwrap();
    assert!(moved.as_error().unwrap().starts_with("MOVED"), "{moved:?}");
    cluster.check_ok().unwrap();
}

#[test]
fn moving_a_slot_moves_its_keys() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    // With a password: MIGRATE must authenticate to the target, replicas need masterauth.
    let cluster = RedisCluster::start(ClusterOptions::new().password("cluster-secret"));
    let anonymous = botmesh_redis_tests::AdminConn::connect(cluster.nodes()[0])
        .unwrap()
        .call(&["GET", "x"])
        .unwrap();
    assert!(
        anonymous.as_error().unwrap().starts_with("NOAUTH"),
        "{anonymous:?}"
    );
    let keys: Vec<String> = (0..5).map(|i| format!("{{moving}}:k{i}")).collect();
    let slot = cluster.key_slot(&keys[0]).unwrap();
    let source = cluster.master_for_slot(slot).unwrap();
    let target = cluster
        .masters()
        .unwrap()
        .into_iter()
        .find(|m| *m != source)
        .unwrap();
    let mut on_source = cluster.conn(source).unwrap();
    for key in &keys {
        assert!(on_source
            .cmd(&["SET", key.as_str(), key.as_str()])
            .unwrap()
            .is_ok());
    }

    // Half-way: one key moved, the rest still on the source.
    let migration = cluster.begin_migration(slot, target).unwrap();
    migration.migrate_keys(&keys[..1]).unwrap();
    let ask = on_source.call(&["GET", keys[0].as_str()]).unwrap();
    assert_eq!(
        ask.as_error(),
        Some(format!("ASK {slot} {target}").as_str())
    );
    assert_eq!(
        on_source.cmd(&["GET", keys[1].as_str()]).unwrap().as_str(),
        Some(keys[1].as_str())
    );
    let mut on_target = cluster.conn(target).unwrap();
    let not_asking = on_target.call(&["GET", keys[0].as_str()]).unwrap();
    assert!(
        not_asking.as_error().unwrap().starts_with("MOVED"),
        "{not_asking:?}"
    );
    let asked = on_target
        .pipeline(&[vec!["ASKING"], vec!["GET", keys[0].as_str()]])
        .unwrap();
    assert_eq!(asked[1].as_str(), Some(keys[0].as_str()));
    let split = on_source
        .call(&["MGET", keys[0].as_str(), keys[1].as_str()])
        .unwrap();
    if server_version().unwrap().asks_on_split_keys() {
        // Before 7.0 the source sends a split request on with ASK, and the target refuses it.
        assert_eq!(
            split.as_error(),
            Some(format!("ASK {slot} {target}").as_str())
        );
        let refused = on_target
            .pipeline(&[
                vec!["ASKING"],
                vec!["MGET", keys[0].as_str(), keys[1].as_str()],
            ])
            .unwrap();
        assert!(
            refused[1].as_error().unwrap().starts_with("TRYAGAIN"),
            "{refused:?}"
        );
    } else {
        assert!(
            split.as_error().unwrap().starts_with("TRYAGAIN"),
            "{split:?}"
        );
    }

    assert_eq!(migration.finish().unwrap(), 4);
    assert_eq!(cluster.master_for_slot(slot).unwrap(), target);
    for key in &keys {
        assert_eq!(
            on_target.cmd(&["GET", key.as_str()]).unwrap().as_str(),
            Some(key.as_str())
        );
        let moved = on_source.call(&["GET", key.as_str()]).unwrap();
        assert_eq!(
            moved.as_error(),
            Some(format!("MOVED {slot} {target}").as_str())
        );
    }

    // The one-call form, back to where it came from.
    assert_eq!(cluster.move_slot(slot, source).unwrap(), keys.len());
    assert_eq!(
        on_source.cmd(&["GET", keys[4].as_str()]).unwrap().as_str(),
        Some(keys[4].as_str())
    );
    cluster.check_ok().unwrap();
}

#[test]
fn failover_promotes_the_replica() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let cluster = RedisCluster::start(ClusterOptions::new());
    let slot = cluster.key_slot("failover").unwrap();
    let old = cluster.master_for_slot(slot).unwrap();
    let mut conn = cluster.conn(old).unwrap();
    assert!(conn.cmd(&["SET", "failover", "kept"]).unwrap().is_ok());
    conn.cmd(&["WAIT", "1", "2000"]).unwrap();

    let started = Instant::now();
    let new = cluster.failover(old).unwrap();
    eprintln!("failover settled in {:?}", started.elapsed());
    assert_ne!(new, old);
    assert_eq!(role(&cluster, new), "master");
    assert_eq!(role(&cluster, old), "slave");
    assert_eq!(cluster.replicas_of(new).unwrap(), vec![old]);
    for node in cluster.nodes() {
        let mut conn = cluster.conn(node).unwrap();
        let ranges =
            botmesh_redis_tests::parse_cluster_slots(&conn.cmd(&["CLUSTER", "SLOTS"]).unwrap())
                .unwrap();
        let owner = ranges
            .iter()
            .find(|r| (r.start..=r.end).contains(&slot))
            .unwrap()
            .master;
        assert_eq!(owner, new, "{node} agrees");
    }
    assert_eq!(
        cluster
            .conn(new)
            .unwrap()
            .cmd(&["GET", "failover"])
            .unwrap()
            .as_str(),
        Some("kept")
    );
}

#[test]
fn killing_a_master_promotes_its_replica() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let cluster = RedisCluster::start(ClusterOptions::new());
    let slot = cluster.key_slot("killed").unwrap();
    let old = cluster.master_for_slot(slot).unwrap();
    let replica = cluster.replicas_of(old).unwrap()[0];
    let mut conn = cluster.conn(old).unwrap();
    assert!(conn.cmd(&["SET", "killed", "kept"]).unwrap().is_ok());
    conn.cmd(&["WAIT", "1", "2000"]).unwrap();
    let pid = cluster.server(old).unwrap().pid();

    let started = Instant::now();
    let promoted = cluster.kill_master(old).unwrap();
    eprintln!(
        "kill -9 to promotion and cluster ok in {:?}",
        started.elapsed()
    );
    assert_eq!(promoted, replica);
    assert!(!cluster.server(old).unwrap().is_alive());
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    assert_eq!(role(&cluster, promoted), "master");
    assert_eq!(cluster.nodes().len(), 5);
    assert_eq!(cluster.master_for_slot(slot).unwrap(), promoted);
    assert_eq!(
        cluster
            .conn(promoted)
            .unwrap()
            .cmd(&["GET", "killed"])
            .unwrap()
            .as_str(),
        Some("kept")
    );
    cluster.check_ok().unwrap();
}

#[test]
fn a_sentinel_deployment_replicates_and_fails_over_keeping_its_data() {
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let d = botmesh_redis_tests::SentinelDeployment::start(
        botmesh_redis_tests::SentinelOptions::new().master_name("harness"),
    );
    let old = d.master_addr().unwrap();
    assert_eq!(old, d.data_nodes()[0].addr());
    let mut master = d.node(old).unwrap().connect().unwrap();
    assert!(master.cmd(&["SET", "before", "1"]).unwrap().is_ok());
    // WAIT: the replica has it before the failover.
    assert_eq!(
        master.cmd(&["WAIT", "1", "2000"]).unwrap().as_int(),
        Some(1)
    );
    let new = d.failover(std::time::Duration::from_secs(20)).unwrap();
    assert_ne!(new, old);
    assert_eq!(new, d.data_nodes()[1].addr());
    let mut promoted = d.node(new).unwrap().connect().unwrap();
    assert_eq!(
        promoted.cmd(&["GET", "before"]).unwrap().as_str(),
        Some("1")
    );
    // The old master follows the new one once the sentinels convert it.
    botmesh_redis_tests::poll_until(
        Instant::now() + std::time::Duration::from_secs(30),
        "the old master to replicate the new one",
        || {
            let role = d.node(old).unwrap().connect()?.cmd(&["ROLE"])?;
            match role
                .as_array()
                .and_then(|r| r.first())
                .and_then(Value::as_str)
            {
                Some("slave") => Ok(()),
                other => Err(format!("ROLE {other:?}")),
            }
        },
    )
    .unwrap();
}
