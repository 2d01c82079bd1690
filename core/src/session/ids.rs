//! The ids by which the session's rooms name each other's things: a connection, a node, an
//! op, one dispatch of a request. They are leaves: every room uses them, none owns them.

/// Identifies one connection attempt; a reconnect gets a new id, so late events of a dead
/// connection are recognised and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// A node's place in [`Nodes`](super::nodes::Nodes): small and `Copy`, so that the slot map, connections and
/// requests name a node without holding its address.
pub(super) type NodeId = usize;

/// An op's id: its submission number, and where it is stored. Ids order by submission, and the
/// id of an ended op never finds a later op stored in its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct OpId {
    pub(super) seq: u64,
    pub(super) index: usize,
}

/// One dispatch of one request of an op's current batch.
///
/// `attempt` is unique in the whole session, so a reply, a timer or a queued write that belongs
/// to an earlier dispatch, or to an earlier batch of the same op (whose requests reuse the same
/// indexes), never matches the request as it is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ReqRef {
    pub(super) op: OpId,
    pub(super) idx: usize,
    pub(super) attempt: u64,
}
