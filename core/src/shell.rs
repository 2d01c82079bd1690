//! The bookkeeping every driver needs around a [`Session`], written once.
//!
//! A driver owns sockets, tasks and timers; the session owns every decision. Between the two
//! sits some plain bookkeeping: which connection handle belongs to which [`ConnId`], which
//! caller waits for which plan, and which late events of a dropped connection to ignore. That
//! bookkeeping is the same for every runtime, so it lives here, generic over the driver's
//! writer handle `W` and completion handle `C`, and the drivers keep only their runtime calls.
//!
//! The contract is the session's: after every input, drain [`Shell::poll`] until it returns
//! [`Action::Wait`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::plan::Plan;
use crate::session::{BoxedPlan, Completion, Config, ConnId, Output, Session, Token};
use crate::topology::NodeAddr;

/// An event the driver observed.
#[derive(Debug)]
pub enum Event<W> {
    /// A connection the shell asked for is open; `writer` sends bytes to it.
    Connected {
        /// The connection.
        conn: ConnId,
        /// The driver's handle for writing to it.
        writer: W,
    },
    /// A connection could not be opened.
    ConnectFailed {
        /// The connection.
        conn: ConnId,
        /// The I/O error or timeout.
        reason: String,
    },
    /// Bytes arrived.
    Read {
        /// The connection.
        conn: ConnId,
        /// The bytes; splits of one read buffer are decoded without a copy.
        bytes: BytesMut,
    },
    /// The connection ended (peer closed, or a read or write failed).
    Closed {
        /// The connection.
        conn: ConnId,
        /// How.
        reason: String,
    },
}

/// What the driver must do next.
#[derive(Debug)]
pub enum Action<W, C> {
    /// Open a TCP connection to `dial` within `timeout`, then report [`Event::Connected`] or
    /// [`Event::ConnectFailed`].
    Connect {
        /// The connection.
        conn: ConnId,
        /// The address to dial.
        dial: NodeAddr,
        /// The connect timeout.
        timeout: Duration,
    },
    /// Write `bytes` with the connection's writer ([`Shell::writer`]), after earlier writes
    /// of that connection.
    Write {
        /// The connection.
        conn: ConnId,
        /// The bytes.
        bytes: Bytes,
    },
    /// The connection is done: stop its tasks. Its writer, if it was open, is handed back.
    Drop {
        /// The connection.
        conn: ConnId,
        /// Its writer, if it was connected.
        writer: Option<W>,
    },
    /// Hand a plan's result to the caller that waits for it.
    Complete {
        /// The caller's completion handle.
        waiter: C,
        /// The result.
        completion: Completion,
    },
    /// Nothing to do until `until` (then call [`Shell::handle_timeout`]) or the next event.
    Wait {
        /// The next deadline.
        until: Option<Instant>,
    },
}

/// The callers waiting for their plans, by token: a slab, in and out at the request rate.
///
/// A token holds the waiter's place in its low 32 bits and a submission count in its high 32
/// bits, so a token that was already answered never reaches a later waiter in the same place.
struct Waiters<C> {
    table: slab::Slab<(u32, C)>,
    count: u32,
}

impl<C> Default for Waiters<C> {
    fn default() -> Self {
        Waiters {
            table: slab::Slab::new(),
            count: 0,
        }
    }
}

impl<C> Waiters<C> {
    fn insert(&mut self, waiter: C) -> Token {
        self.count = self.count.wrapping_add(1);
        let index = self.table.insert((self.count, waiter));
        // An index stays below 2^32: four billion callers waiting at once cannot fit in memory.
        Token(u64::from(self.count) << 32 | index as u64)
    }

    fn remove(&mut self, token: Token) -> Option<C> {
        let index = usize::try_from(token.0 & u64::from(u32::MAX)).ok()?;
        let count = (token.0 >> 32) as u32;
        match self.table.get(index) {
            Some(&(c, _)) if c == count => self.table.try_remove(index).map(|(_, waiter)| waiter),
            _ => None,
        }
    }

    fn len(&self) -> usize {
        self.table.len()
    }
}

enum Slot<W> {
    Connecting,
    Open(W),
}

/// A session plus the driver-independent bookkeeping around it.
pub struct Shell<W, C> {
    session: Session,
    connect_timeout: Duration,
    conns: BTreeMap<ConnId, Slot<W>>,
    waiters: Waiters<C>,
}

impl<W, C> std::fmt::Debug for Shell<W, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shell")
            .field("session", &self.session)
            .field("conns", &self.conns.len())
            .field("waiters", &self.waiters.len())
            .finish_non_exhaustive()
    }
}

impl<W, C> Shell<W, C> {
    /// A shell around a new session.
    pub fn new(config: Config, now: Instant) -> Self {
        Shell {
            connect_timeout: config.connect_timeout,
            session: Session::new(config, now),
            conns: BTreeMap::new(),
            waiters: Waiters::default(),
        }
    }

    /// Submits a plan; `waiter` comes back in [`Action::Complete`] with its result.
    pub fn submit<P: Plan>(&mut self, now: Instant, plan: P, waiter: C) {
        self.submit_boxed(now, BoxedPlan::new(plan), waiter);
    }

    /// [`Shell::submit`] for a plan boxed already (by a caller on another task).
    pub fn submit_boxed(&mut self, now: Instant, plan: BoxedPlan, waiter: C) {
        let token = self.waiters.insert(waiter);
        self.session.submit_boxed(now, token, plan);
    }

    /// Applies a driver event. Events of connections the session already dropped are ignored.
    pub fn handle(&mut self, now: Instant, event: Event<W>) {
        match event {
            Event::Connected { conn, writer } => {
                if let Some(slot) = self.conns.get_mut(&conn) {
                    *slot = Slot::Open(writer);
                    self.session.handle_connected(now, conn);
                }
            }
            Event::ConnectFailed { conn, reason } => {
                if self.conns.remove(&conn).is_some() {
                    tracing::warn!(?conn, %reason, "connect failed");
                    self.session.handle_connect_failed(now, conn, &reason);
                }
            }
            Event::Read { conn, bytes } => {
                if self.conns.contains_key(&conn) {
                    self.session.handle_read_buf(now, conn, bytes);
                }
            }
            Event::Closed { conn, reason } => {
                if self.conns.remove(&conn).is_some() {
                    tracing::warn!(?conn, %reason, "connection lost");
                    self.session.handle_closed(now, conn, &reason);
                }
            }
        }
    }

    /// Whether `conn` is still wanted: a driver drops the events of other connections early.
    pub fn is_live(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn)
    }

    /// Time has come to `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.session.handle_timeout(now);
    }

    /// Ends every plan and asks the driver to drop every connection.
    pub fn close(&mut self, now: Instant) {
        self.session.close(now);
    }

    /// The next action. Call until it returns [`Action::Wait`].
    pub fn poll(&mut self) -> Action<W, C> {
        loop {
            match self.session.poll() {
                Output::Connect { conn, node, dial } => {
                    tracing::debug!(?conn, %node, %dial, "connecting");
                    self.conns.insert(conn, Slot::Connecting);
                    return Action::Connect {
                        conn,
                        dial,
                        timeout: self.connect_timeout,
                    };
                }
                Output::Transmit { conn, bytes } => {
                    if self.writer(conn).is_some() {
                        return Action::Write { conn, bytes };
                    }
                }
                Output::Close { conn } => {
                    let writer = match self.conns.remove(&conn) {
                        Some(Slot::Open(writer)) => Some(writer),
                        _ => None,
                    };
                    return Action::Drop { conn, writer };
                }
                Output::Complete { token, result } => {
                    if let Some(waiter) = self.waiters.remove(token) {
                        return Action::Complete {
                            waiter,
                            completion: result,
                        };
                    }
                }
                Output::Wait { until, .. } => return Action::Wait { until },
            }
        }
    }

    /// The writer of an open connection.
    pub fn writer(&self, conn: ConnId) -> Option<&W> {
        match self.conns.get(&conn) {
            Some(Slot::Open(writer)) => Some(writer),
            _ => None,
        }
    }

    /// The writer of an open connection, to change it (a driver that writes directly and
    /// hands its socket to a task while the socket is full).
    pub fn writer_mut(&mut self, conn: ConnId) -> Option<&mut W> {
        match self.conns.get_mut(&conn) {
            Some(Slot::Open(writer)) => Some(writer),
            _ => None,
        }
    }

    /// The connections still open or opening, for a driver that shuts down.
    pub fn connections(&self) -> Vec<ConnId> {
        self.conns.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Waiters;

    #[test]
    fn an_answered_token_never_reaches_a_later_waiter() {
        let mut waiters = Waiters::default();
        let first = waiters.insert("first");
        assert_eq!(waiters.remove(first), Some("first"));
        // The place is reused; the old token must not find the new waiter.
        let second = waiters.insert("second");
        assert_ne!(first, second);
        assert_eq!(waiters.remove(first), None);
        assert_eq!(waiters.len(), 1);
        assert_eq!(waiters.remove(second), Some("second"));
        assert_eq!(waiters.remove(second), None);
        assert_eq!(waiters.len(), 0);
    }
}
