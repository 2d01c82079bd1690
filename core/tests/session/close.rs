//! `close()` completes every plan, whatever state it is in, and closes every connection; a
//! closed session refuses new plans and ignores late events.

use std::time::Duration;

use botmesh_redis_core::driver::session::{Config, ConnId, Output, Session};
use botmesh_redis_core::driver::Reply;
use botmesh_redis_core::testing::sim::{ConnectMode, Harness, Rule};
use botmesh_redis_core::testing::{get, incr, set, start, Batch};
use botmesh_redis_core::testing::{Ticket, Tickets, Token};
use botmesh_redis_core::Error;

#[test]
fn close_completes_every_plan() {
    let mut h = Harness::cluster(3, 0);
    let (a, b, c) = (h.sim.master(0), h.sim.master(1), h.sim.master(2));
    let ka = h.sim.keys_on(&a, 1).remove(0);
    let kb = h.sim.keys_on(&b, 1).remove(0);
    let kc = h.sim.keys_on(&c, 1).remove(0);
    h.run_batch(vec![set(&ka, "a"), set(&kb, "b")]);
    h.sim.stall(&a);
    h.sim
        .add_rule(Rule::error("TRYAGAIN x").on(&b).commands(&["GET"]));
    h.sim.drop_connections(h.now(), &c, "restart");
    h.sim.set_connect_mode(&c, ConnectMode::Hang);
    h.run_for(Duration::from_millis(1));

    let write_in_flight = h.submit_batch(vec![incr(&ka)]);
    let read_in_flight = h.submit_batch(vec![get(&ka)]);
    let backing_off = h.submit_batch(vec![get(&kb)]);
    let connecting = h.submit_batch(vec![incr(&kc)]);
    let done = h.submit_batch(vec![get(&kb), set(&kb, "b2")]);
    h.run_for(Duration::from_millis(5));
    assert_eq!(h.session.in_flight(), 5);

    h.close();
    assert!(h.session.is_closed());
    assert_eq!(h.session.in_flight(), 0);
    let lost = Error::ReplyLost {
        addr: a.clone(),
        reason: "the client was closed before the reply came".into(),
    };
    assert_eq!(h.take::<Vec<Reply>>(&write_in_flight), Some(Err(lost)));
    for token in [read_in_flight, backing_off, connecting, done] {
        assert_eq!(
            h.take::<Vec<Reply>>(&token),
            Some(Err(Error::Closed)),
            "{token:?}"
        );
    }
    // Every connection the session had is closed.
    assert!(h.wires().values().all(|w| w.closed), "{:#?}", h.wires());

    // A closed session refuses new plans, at once.
    let late = h.submit_batch(vec![get(&kb)]);
    assert_eq!(h.take::<Vec<Reply>>(&late), Some(Err(Error::Closed)));
}

#[test]
fn a_closed_session_ignores_late_events_and_stays_idle() {
    let now = start();
    let mut session = Session::<Tickets>::new(
        Config::single(botmesh_redis_core::NodeAddr::new("h", 1)),
        now,
    );
    let ticket = Ticket::new(Token(1));
    session.submit(now, ticket.clone(), Batch::new(vec![get("k")]));
    let conn = match session.poll() {
        Output::Connect { conn, .. } => conn,
        other => panic!("{other:?}"),
    };
    assert!(matches!(session.poll(), Output::Wait { .. }));
    session.close(now);
    assert!(matches!(session.poll(), Output::Close { conn: c } if c == conn));
    match session.poll() {
        Output::Complete(completion) => {
            assert_eq!(completion.deliver(), Token(1));
            assert_eq!(ticket.take(), Some(Err(Error::Closed)));
        }
        other => panic!("{other:?}"),
    }
    let later = now + Duration::from_secs(1);
    session.handle_connected(later, conn);
    session.handle_read(later, conn, b"+OK\r\n");
    session.handle_closed(later, conn, "x");
    session.handle_connect_failed(later, ConnId(99), "x");
    session.handle_timeout(later + Duration::from_secs(100));
    session.close(later);
    assert!(matches!(session.poll(), Output::Wait { until: None, .. }));
}

/// Drives a single-node session until its connection is ready (the handshake answered), and
/// returns the connection.
fn ready_single(session: &mut Session<Tickets>, now: std::time::Instant) -> ConnId {
    let conn = match session.poll() {
        Output::Connect { conn, .. } => conn,
        other => panic!("{other:?}"),
    };
    while !matches!(session.poll(), Output::Wait { .. }) {}
    session.handle_connected(now, conn);
    while !matches!(session.poll(), Output::Wait { .. }) {}
    session.handle_read(now, conn, b"+PONG\r\n");
    conn
}

/// Drains after `close` and returns the one plan's result.
fn closed_result(
    session: &mut Session<Tickets>,
    ticket: &Ticket<Vec<Reply>>,
) -> Result<Vec<Reply>, Error> {
    loop {
        match session.poll() {
            Output::Complete(completion) => {
                completion.deliver();
            }
            Output::Wait { .. } => break,
            _ => {}
        }
    }
    ticket.take().expect("the plan completed")
}

#[test]
fn a_granted_write_whose_wait_is_not_written_yet_is_reply_lost_at_close() {
    let now = start();
    let node = botmesh_redis_core::NodeAddr::new("h", 1);
    let mut session = Session::<Tickets>::new(Config::single(node.clone()), now);
    let ticket = Ticket::new(Token(1));
    session.submit(
        now,
        ticket.clone(),
        Batch::new(vec![set("k", "v").then_wait(1, 100)]),
    );
    let conn = ready_single(&mut session, now);
    while !matches!(session.poll(), Output::Wait { .. }) {}
    // The grant is answered; the client closes before the next drain writes the WAIT.
    let t = now + Duration::from_millis(1);
    session.handle_read(t, conn, b"+OK\r\n");
    session.close(t);
    assert_eq!(
        closed_result(&mut session, &ticket),
        Err(Error::ReplyLost {
            addr: node,
            reason: "the client was closed before the reply came".into(),
        }),
        "the SET ran: Closed would say it did not"
    );
}

#[test]
fn a_write_lost_with_its_connection_is_not_hidden_by_a_later_close() {
    let now = start();
    let node = botmesh_redis_core::NodeAddr::new("h", 1);
    let mut session = Session::<Tickets>::new(Config::single(node.clone()), now);
    let ticket = Ticket::new(Token(1));
    session.submit(
        now,
        ticket.clone(),
        Batch::new(vec![set("k", "v"), get("j")]),
    );
    let conn = ready_single(&mut session, now);
    while !matches!(session.poll(), Output::Wait { .. }) {}
    // The connection dies with both unanswered: the SET ends ReplyLost, the GET backs off;
    // then the client closes.
    let t = now + Duration::from_millis(1);
    session.handle_closed(t, conn, "connection reset by peer");
    while !matches!(session.poll(), Output::Wait { .. }) {}
    session.close(t);
    assert_eq!(
        closed_result(&mut session, &ticket),
        Err(Error::ReplyLost {
            addr: node,
            reason: "connection reset by peer".into(),
        })
    );
}

/// A plan that waits between its steps, as a turn waiter or a keeper does.
struct Parked(Duration);

impl botmesh_redis_core::driver::Plan for Parked {
    type Output = ();

    fn operation(&self) -> &'static str {
        "parked"
    }

    fn start(&mut self) -> botmesh_redis_core::driver::Step<()> {
        botmesh_redis_core::driver::Step::Wait(self.0)
    }

    fn resume(&mut self, _: Vec<Reply>) -> botmesh_redis_core::driver::Step<()> {
        botmesh_redis_core::driver::Step::Done(Ok(()))
    }
}

#[test]
fn a_graceful_close_refuses_new_plans_and_waits_only_for_requests_out() {
    let mut h = Harness::cluster(3, 0);
    let a = h.sim.master(0);
    let ka = h.sim.keys_on(&a, 1).remove(0);
    h.run_batch(vec![set(&ka, "1")]);
    h.sim.stall(&a);
    let out = h.submit_batch(vec![incr(&ka)]);
    let parked = h.submit(Parked(Duration::from_secs(60)));
    h.run_for(Duration::from_millis(1));
    assert_eq!(h.session.in_flight(), 2);
    // Only the stalled write has a request out; the parked plan has nothing to wait for.
    assert_eq!(h.session.sending(), 1);
    assert!(!h.session.sending_at_most(0));
    assert!(h.session.sending_at_most(1));

    h.session.stop_accepting();
    let late = h.submit_batch(vec![get(&ka)]);
    assert_eq!(h.take::<Vec<Reply>>(&late), Some(Err(Error::Closed)));

    // The write in progress goes on, and is answered: not lost at the close.
    let now = h.now();
    h.sim.unstall(now, &a);
    assert_eq!(
        h.wait_for::<Vec<Reply>>(&out),
        Ok(vec![Ok(botmesh_redis_core::Value::Int(2))])
    );
    assert_eq!(h.session.sending(), 0);
    assert!(h.session.sending_at_most(0));
    h.close();
    assert_eq!(h.take::<()>(&parked), Some(Err(Error::Closed)));
}
