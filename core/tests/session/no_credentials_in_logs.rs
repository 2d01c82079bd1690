//! Credentials given in a URL reach the wire (`AUTH`) and nothing else: not the session's
//! `tracing` events (connecting, a refused connect, a refused `AUTH`), nor its errors, nor the
//! `Debug` of its configuration, over TCP and over a Unix socket.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use botmesh_redis_core::driver::session::{ConnId, Output, Session};
use botmesh_redis_core::driver::Reply;
use botmesh_redis_core::testing::{get, start, Batch};
use botmesh_redis_core::testing::{Ticket, Tickets, Token};
use botmesh_redis_core::{ClientOptions, Error};

const PASSWORD: &str = "pa55-in-url";

/// A subscriber that keeps every event of every level with all its fields, as a log would.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut line = String::new();
        span.record(&mut Fields(&mut line));
        self.0.lock().unwrap().push(line);
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = format!("{}", event.metadata().level());
        event.record(&mut Fields(&mut line));
        self.0.lock().unwrap().push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The next `Connect` of the session, after draining what comes before it.
fn next_connect(session: &mut Session<Tickets>) -> ConnId {
    loop {
        match session.poll() {
            Output::Connect { conn, .. } => return conn,
            Output::Wait { .. } => panic!("no connect"),
            _ => {}
        }
    }
}

/// The errors of completed plans, and whether `AUTH` with the password was written.
fn drain(session: &mut Session<Tickets>, ticket: &Ticket<Vec<Reply>>) -> (Vec<Error>, bool) {
    let mut auth_sent = false;
    loop {
        match session.poll() {
            Output::Transmit { bytes, .. } => {
                auth_sent |= String::from_utf8_lossy(&bytes).contains(PASSWORD);
            }
            Output::Complete(completion) => {
                completion.deliver();
            }
            Output::Wait { .. } => break,
            _ => {}
        }
    }
    let errors = match ticket.take() {
        Some(Ok(replies)) => replies.into_iter().filter_map(Result::err).collect(),
        Some(Err(e)) => vec![e],
        None => Vec::new(),
    };
    (errors, auth_sent)
}

#[test]
fn a_urls_password_reaches_the_wire_only() {
    for url in [
        format!("redis://bot:{PASSWORD}@10.0.0.1:7000"),
        format!("unix://bot:{PASSWORD}@/run/redis.sock"),
        format!("redis+unix:///run/redis.sock?user=bot&pass={PASSWORD}"),
    ] {
        let recorder = Recorder::default();
        let (errors, auth_sent, shown) =
            tracing::subscriber::with_default(recorder.clone(), || {
                let now: Instant = start();
                let config = ClientOptions::url(url.as_str()).to_config(1).unwrap();
                let shown = format!("{config:?}");
                let mut session = Session::<Tickets>::new(config, now);
                // A refused connect, then a connect whose AUTH the server refuses.
                let first = Ticket::new(Token(1));
                session.submit(now, first.clone(), Batch::new(vec![get("k")]));
                let conn = next_connect(&mut session);
                session.handle_connect_failed(now, conn, "connection refused");
                let (mut errors, _) = drain(&mut session, &first);
                let later = now + std::time::Duration::from_secs(5);
                session.handle_timeout(later);
                let second = Ticket::new(Token(2));
                session.submit(later, second.clone(), Batch::new(vec![get("k")]));
                let conn = next_connect(&mut session);
                session.handle_connected(later, conn);
                let (_, auth_sent) = drain(&mut session, &second);
                session.handle_read(
                    later,
                    conn,
                    b"-WRONGPASS invalid username-password pair\r\n",
                );
                let (more, _) = drain(&mut session, &second);
                errors.extend(more);
                (errors, auth_sent, shown)
            });
        assert!(auth_sent, "{url}: AUTH never carried the password");
        assert!(
            matches!(
                errors.as_slice(),
                [Error::Connect { .. }, Error::Auth { .. }]
            ),
            "{url}: {errors:?}"
        );
        let logged = recorder.0.lock().unwrap().clone();
        assert!(
            logged.iter().any(|line| line.contains("connect failed")),
            "{url}: {logged:?}"
        );
        for text in logged
            .iter()
            .cloned()
            .chain(
                errors
                    .iter()
                    .flat_map(|e| [e.to_string(), format!("{e:?}")]),
            )
            .chain([shown])
        {
            assert!(!text.contains(PASSWORD), "{url}: {text}");
        }
    }
}
