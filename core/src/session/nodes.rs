//! The nodes the session knows: interned addresses, which ones are masters, stalled or ready,
//! and forgetting the ones that left the topology.

use super::*;

impl<W> Session<W> {
    pub(super) fn intern(&mut self, addr: NodeAddr) -> NodeId {
        if let Some(&id) = self.node_ids.get(&addr) {
            return id;
        }
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.nodes[id] = addr.clone();
                id
            }
            None => {
                self.nodes.push(addr.clone());
                self.nodes.len() - 1
            }
        };
        self.node_ids.insert(addr, id);
        id
    }

    /// Whether `node`'s connection has waited at least `stall_refresh` for its oldest reply.
    pub(super) fn is_stalled(&self, node: NodeId, now: Instant) -> bool {
        self.node_conn
            .get(&node)
            .and_then(|c| self.conns.get(c))
            .and_then(|c| c.in_flight.front())
            .and_then(|&(_, written)| after(written, self.config.stall_refresh))
            .is_some_and(|suspect| suspect <= now)
    }

    /// Whether `node` is a live id (not one freed for reuse).
    pub(super) fn is_known(&self, node: NodeId) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|addr| self.node_ids.get(addr) == Some(&node))
    }

    /// Marks the nodes missing from a complete topology, and forgets those missing for
    /// [`FORGET_AFTER`]: their idle connection closes, and their id is reused. A root node,
    /// a node with requests on its connection, or one a waiting request is bound to (an
    /// `ASK` target, a `NOSCRIPT` node) stays until it is free.
    pub(super) fn forget_departed(&mut self, now: Instant, topo: &Topology) {
        let present: BTreeSet<NodeId> = topo
            .shards
            .iter()
            .filter_map(|s| self.node_ids.get(&s.master).copied())
            .collect();
        let roots: Vec<NodeAddr> = match &self.config.endpoints {
            Endpoints::Cluster(roots) => roots.clone(),
            Endpoints::Single(addr) => vec![addr.clone()],
        };
        let known: Vec<NodeId> = self.node_ids.values().copied().collect();
        for node in known {
            if present.contains(&node) || roots.contains(&self.nodes[node]) {
                self.absent.remove(&node);
                continue;
            }
            let since = *self.absent.entry(node).or_insert(now);
            if now.saturating_duration_since(since) < FORGET_AFTER {
                continue;
            }
            let busy_conn = self
                .node_conn
                .get(&node)
                .and_then(|c| self.conns.get(c))
                .is_some_and(|c| !c.in_flight.is_empty() || !c.outbox.is_empty());
            let bound = self.ops.iter().any(|op| {
                op.reqs
                    .iter()
                    .any(|r| r.ask == Some(node) || r.pinned == Some(node))
            });
            if busy_conn || bound {
                continue;
            }
            if let Some(conn) = self.node_conn.get(&node).copied() {
                let reason = "the node left the cluster's topology".to_owned();
                self.drop_conn(now, conn, Loss::Lost(reason));
            }
            tracing::debug!(node = %self.nodes[node], "forgetting a node that left the topology");
            self.node_ids.remove(&self.nodes[node]);
            self.absent.remove(&node);
            self.down.remove(&node);
            self.free_ids.push(node);
        }
    }

    pub(super) fn dial_addr(&self, node: NodeId) -> NodeAddr {
        let addr = &self.nodes[node];
        match &self.config.address_map {
            Some(map) => map(addr),
            None => addr.clone(),
        }
    }

    pub(super) fn masters(&self) -> BTreeSet<NodeId> {
        self.slots.owners().collect()
    }

    pub(super) fn is_ready(&self, node: NodeId) -> bool {
        self.node_conn
            .get(&node)
            .and_then(|c| self.conns.get(c))
            .is_some_and(|c| c.state == ConnState::Ready)
    }
}
