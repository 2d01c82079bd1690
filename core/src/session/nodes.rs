//! The nodes the session knows: interned addresses, the connection each one uses, which ones
//! are in connect backoff, and forgetting the ones that left the topology.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Index;
use std::sync::Arc;
use std::time::Instant;

use crate::addr::NodeAddr;

use super::ids::{ConnId, NodeId};
use super::FORGET_AFTER;

/// A node whose connect failed: it is not dialled again before `until`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Down {
    /// Connect failures in a row; the backoff grows with them.
    pub(super) failures: u32,
    pub(super) until: Instant,
}

/// The node registry: every node the session knows by address, and the state that belongs to
/// a node rather than to one connection of it.
///
/// Ids are reused: a forgotten node's id goes to the next new node, so a cluster whose pods
/// change address does not grow the tables. Whether an id is live is [`Nodes::is_known`].
#[derive(Debug, Default)]
pub(super) struct Nodes {
    /// Shared, so that an op's summary names the node it went to without copying the address.
    addrs: Vec<Arc<NodeAddr>>,
    ids: BTreeMap<NodeAddr, NodeId>,
    /// Ids of forgotten nodes, reused by the next new ones.
    free: Vec<NodeId>,
    /// Nodes missing from the complete topologies since then (see [`FORGET_AFTER`]).
    absent: BTreeMap<NodeId, Instant>,
    /// Nodes in connect backoff: one dial per backoff period, however many requests arrive.
    down: BTreeMap<NodeId, Down>,
    /// The one connection each node uses, while it has one.
    conns: BTreeMap<NodeId, ConnId>,
}

impl Index<NodeId> for Nodes {
    type Output = NodeAddr;

    fn index(&self, node: NodeId) -> &NodeAddr {
        &self.addrs[node]
    }
}

impl Nodes {
    /// The id of `addr`, a new one if it is not known yet.
    pub(super) fn intern(&mut self, addr: NodeAddr) -> NodeId {
        if let Some(&id) = self.ids.get(&addr) {
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.addrs[id] = Arc::new(addr.clone());
                id
            }
            None => {
                self.addrs.push(Arc::new(addr.clone()));
                self.addrs.len() - 1
            }
        };
        self.ids.insert(addr, id);
        id
    }

    /// The id of a known address.
    pub(super) fn id(&self, addr: &NodeAddr) -> Option<NodeId> {
        self.ids.get(addr).copied()
    }

    /// The address of `node`, if the id was ever given.
    pub(super) fn get(&self, node: NodeId) -> Option<&NodeAddr> {
        self.addrs.get(node).map(|addr| &**addr)
    }

    /// The address of `node`, shared (for an op's [`Summary`](super::Summary)).
    pub(super) fn shared(&self, node: NodeId) -> Option<Arc<NodeAddr>> {
        self.addrs.get(node).cloned()
    }

    /// How many nodes are known now.
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether `node` is a live id (not one freed for reuse).
    pub(super) fn is_known(&self, node: NodeId) -> bool {
        self.addrs
            .get(node)
            .is_some_and(|addr| self.ids.get(&**addr) == Some(&node))
    }

    /// Every live id, in id order.
    pub(super) fn known(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.addrs.len()).filter(|&n| self.is_known(n))
    }

    // --- connections ------------------------------------------------------------------------

    /// The connection `node` uses now.
    pub(super) fn conn(&self, node: NodeId) -> Option<ConnId> {
        self.conns.get(&node).copied()
    }

    /// `conn` is the connection of `node` from now on.
    pub(super) fn bind_conn(&mut self, node: NodeId, conn: ConnId) {
        self.conns.insert(node, conn);
    }

    /// `conn` is gone; `node` has no connection unless it already had another.
    pub(super) fn unbind_conn(&mut self, node: NodeId, conn: ConnId) {
        if self.conns.get(&node) == Some(&conn) {
            self.conns.remove(&node);
        }
    }

    /// Every connection is gone (the session closed).
    pub(super) fn clear_conns(&mut self) {
        self.conns.clear();
    }

    // --- connect backoff --------------------------------------------------------------------

    /// When `node`'s connect backoff ends, while it has not ended at `now`.
    pub(super) fn backoff_until(&self, node: NodeId, now: Instant) -> Option<Instant> {
        self.down
            .get(&node)
            .map(|d| d.until)
            .filter(|&until| until > now)
    }

    /// Connect failures of `node` in a row so far.
    pub(super) fn failures(&self, node: NodeId) -> u32 {
        self.down.get(&node).map_or(0, |d| d.failures)
    }

    /// `node` failed to connect again: not dialled before `down.until`.
    pub(super) fn mark_down(&mut self, node: NodeId, down: Down) {
        self.down.insert(node, down);
    }

    /// `node` answered a handshake: its backoff is over.
    pub(super) fn mark_up(&mut self, node: NodeId) {
        self.down.remove(&node);
    }

    // --- departures -------------------------------------------------------------------------

    /// Notes which nodes a complete topology left out (`present` are those it named, `roots`
    /// are never absent), and returns those absent for [`FORGET_AFTER`] by `now`: candidates
    /// to forget, which the session forgets once nothing is bound to them.
    pub(super) fn departed(
        &mut self,
        now: Instant,
        present: &BTreeSet<NodeId>,
        roots: &[NodeAddr],
    ) -> Vec<NodeId> {
        let mut departed = Vec::new();
        for (addr, &node) in &self.ids {
            if present.contains(&node) || roots.contains(addr) {
                self.absent.remove(&node);
                continue;
            }
            let since = *self.absent.entry(node).or_insert(now);
            if now.saturating_duration_since(since) >= FORGET_AFTER {
                departed.push(node);
            }
        }
        departed
    }

    /// Forgets `node`: its id is free for the next new node.
    pub(super) fn forget(&mut self, node: NodeId) {
        if let Some(addr) = self.addrs.get(node) {
            self.ids.remove(&**addr);
        }
        self.absent.remove(&node);
        self.down.remove(&node);
        self.conns.remove(&node);
        self.free.push(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_forgotten_nodes_id_is_reused_and_no_longer_known() {
        let mut nodes = Nodes::default();
        let a = nodes.intern(NodeAddr::new("a", 1));
        let b = nodes.intern(NodeAddr::new("b", 1));
        assert_eq!(nodes.intern(NodeAddr::new("a", 1)), a);
        nodes.bind_conn(a, ConnId(7));
        nodes.forget(a);
        assert!(!nodes.is_known(a));
        assert_eq!(nodes.conn(a), None);
        assert_eq!(nodes.len(), 1);
        let c = nodes.intern(NodeAddr::new("c", 1));
        assert_eq!(c, a, "the freed id is reused");
        assert_eq!(nodes[c], NodeAddr::new("c", 1));
        assert_eq!(nodes.known().collect::<Vec<_>>(), [a, b]);
    }

    #[test]
    fn departed_nodes_are_those_absent_for_the_whole_delay() {
        let t0 = crate::testing::start();
        let mut nodes = Nodes::default();
        let root = nodes.intern(NodeAddr::new("root", 1));
        let gone = nodes.intern(NodeAddr::new("gone", 1));
        let roots = [NodeAddr::new("root", 1)];
        let none = BTreeSet::new();
        assert!(nodes.departed(t0, &none, &roots).is_empty());
        let later = t0 + FORGET_AFTER - Duration::from_millis(1);
        assert!(nodes.departed(later, &none, &roots).is_empty());
        assert_eq!(nodes.departed(t0 + FORGET_AFTER, &none, &roots), [gone]);
        // Back in a topology: the clock starts again.
        nodes.departed(t0 + FORGET_AFTER, &BTreeSet::from([gone]), &roots);
        assert!(nodes
            .departed(
                t0 + FORGET_AFTER * 2 - Duration::from_millis(1),
                &none,
                &roots
            )
            .is_empty());
        assert!(nodes.is_known(root));
    }
}
