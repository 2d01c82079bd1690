//! The slot table: the owner of every slot, as ranges, and the redirects a map may not undo.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::keys::SLOT_COUNT;

use super::ids::NodeId;

/// How long a node's `MOVED` outranks a topology answer that names it the slot's owner again.
/// Longer than a failover's news takes to reach every node (the promoted replica tells every
/// node at once; one that missed it hears within a few pings), and shorter than an operator
/// takes to fail back (after which the answers are right to name it again).
pub(super) const MOVED_OUTRANKS_MAP_FOR: Duration = Duration::from_secs(5);

/// A copy of the slot map for a driver's callers, who read it without the session: the number
/// the session gives each slot's owner ([`SlotOwners::owner`]), a node's number the same in
/// every slot it owns. The session writes it as its map changes
/// ([`Session::slot_owners`](super::Session::slot_owners)); a reader may see a change
/// part-way, as it would see a map a moment old. What a client counts by node (its calls out
/// to each) reads it; routing never does.
#[derive(Clone)]
pub struct SlotOwners(Arc<[AtomicU16]>);

/// A slot without a known owner, or whose owner's number does not fit.
const NO_OWNER: u16 = u16::MAX;

impl SlotOwners {
    fn new() -> Self {
        SlotOwners((0..SLOT_COUNT).map(|_| AtomicU16::new(NO_OWNER)).collect())
    }

    /// The number of the node that owns `slot`, as the session last learned it; `None` before
    /// the first map, or for a slot it left unmapped.
    pub fn owner(&self, slot: u16) -> Option<u16> {
        let owner = self.0.get(usize::from(slot))?.load(Relaxed);
        (owner != NO_OWNER).then_some(owner)
    }

    fn set(&self, first: u16, last: u16, owner: Option<NodeId>) {
        let owner = owner
            .and_then(|n| u16::try_from(n).ok())
            .unwrap_or(NO_OWNER);
        let slots = usize::from(first)..=usize::from(last);
        for slot in self.0.get(slots).into_iter().flatten() {
            slot.store(owner, Relaxed);
        }
    }
}

impl Default for SlotOwners {
    fn default() -> Self {
        SlotOwners::new()
    }
}

impl fmt::Debug for SlotOwners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SlotOwners(..)")
    }
}

/// The owner of every slot, as ranges. A cluster maps its 16384 slots in a few ranges, so routing
/// finds a request's owner with a binary search over a few cache lines. (A dense table of 16384
/// owners missed the cache at almost every random slot once the servers shared the cores: it
/// was most of `pump`'s time in the W1 and W2 profiles.)
#[derive(Debug, Default)]
pub(super) struct SlotTable {
    /// Disjoint, sorted, and never two adjacent ranges with one owner; a slot in no range has
    /// no known owner.
    pub(super) ranges: Vec<SlotRange>,
    /// Slots a node lately gave away in its own words (`MOVED`). A topology answer that maps
    /// such a slot to that node again is older news (asked before the redirect, or answered
    /// by a node the failover's news has not reached): the node itself knows best that it
    /// does not own the slot, and undoing the redirect would send the slot's requests back to
    /// it, and take the answers of the new owner for those of a replaced master.
    pub(super) disowned: BTreeMap<u16, Disowned>,
    /// The ranges' copy for the driver's callers, written with every change.
    pub(super) owners: SlotOwners,
}

/// A slot's owner, as its former owner named it in a `MOVED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Disowned {
    pub(super) by: NodeId,
    pub(super) to: NodeId,
    pub(super) until: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SlotRange {
    pub(super) first: u16,
    pub(super) last: u16,
    pub(super) owner: NodeId,
}

impl SlotTable {
    pub(super) fn get(&self, slot: u16) -> Option<NodeId> {
        // The last range that starts at or before `slot`.
        let after = self.ranges.partition_point(|r| r.first <= slot);
        let range = self.ranges.get(after.checked_sub(1)?)?;
        (slot <= range.last).then_some(range.owner)
    }

    pub(super) fn set(&mut self, slot: u16, node: NodeId) {
        self.set_range(slot, slot, node);
    }

    /// Gives slots `first..=last` to `owner`; slots past the last slot are ignored.
    pub(super) fn set_range(&mut self, first: u16, last: u16, owner: NodeId) {
        let last = last.min(SLOT_COUNT - 1);
        if first > last {
            return;
        }
        let mut ranges = Vec::with_capacity(self.ranges.len() + 2);
        for r in self.ranges.drain(..) {
            if r.last < first || r.first > last {
                ranges.push(r);
                continue;
            }
            // What is left of an overlapped range on either side.
            if r.first < first {
                ranges.push(SlotRange {
                    last: first - 1,
                    ..r
                });
            }
            if r.last > last {
                ranges.push(SlotRange {
                    first: last + 1,
                    ..r
                });
            }
        }
        ranges.push(SlotRange { first, last, owner });
        self.owners.set(first, last, Some(owner));
        ranges.sort_unstable_by_key(|r| r.first);
        for r in ranges {
            match self.ranges.last_mut() {
                Some(prev) if prev.owner == r.owner && prev.last + 1 == r.first => {
                    prev.last = r.last;
                }
                _ => self.ranges.push(r),
            }
        }
    }

    /// Gives each of `given` (disjoint ranges, in any order) to its owner, over whatever the
    /// table held there, in one pass: a topology of thousands of ranges costs a sort, not a
    /// rewrite of the table per range.
    pub(super) fn set_ranges(&mut self, mut given: Vec<SlotRange>) {
        given.retain(|r| r.first <= r.last && r.first < SLOT_COUNT);
        for r in &mut given {
            r.last = r.last.min(SLOT_COUNT - 1);
        }
        given.sort_unstable_by_key(|r| r.first);
        // What is left of each old range outside the given ones.
        let mut kept = Vec::with_capacity(self.ranges.len() + given.len());
        let mut g = 0;
        for old in self.ranges.drain(..) {
            let mut from = old.first;
            while g < given.len() && given[g].last < from {
                g += 1;
            }
            let mut i = g;
            while from <= old.last {
                match given.get(i) {
                    Some(cut) if cut.first <= old.last => {
                        if cut.first > from {
                            kept.push(SlotRange {
                                first: from,
                                last: cut.first - 1,
                                ..old
                            });
                        }
                        match cut.last.checked_add(1) {
                            Some(next) => from = from.max(next),
                            None => break,
                        }
                        i += 1;
                    }
                    _ => {
                        kept.push(SlotRange { first: from, ..old });
                        break;
                    }
                }
            }
        }
        for r in &given {
            self.owners.set(r.first, r.last, Some(r.owner));
        }
        kept.extend(given);
        kept.sort_unstable_by_key(|r| r.first);
        for r in kept {
            match self.ranges.last_mut() {
                Some(prev) if prev.owner == r.owner && prev.last + 1 == r.first => {
                    prev.last = r.last;
                }
                _ => self.ranges.push(r),
            }
        }
    }

    /// Gives `given` (disjoint ranges, in any order) in place of everything the table held.
    /// The callers' copy is written once a slot, never cleared first: callers read it without
    /// the session's lock, and a slot ownerless for a moment would send its calls out
    /// uncounted, every few seconds as complete maps come.
    fn replace(&mut self, given: Vec<SlotRange>) {
        self.ranges.clear();
        self.set_ranges(given);
        let SlotTable { ranges, owners, .. } = self;
        let mut unwritten = 0;
        for r in ranges.iter() {
            if r.first > unwritten {
                owners.set(unwritten, r.first - 1, None);
            }
            unwritten = r.last + 1;
        }
        if unwritten < SLOT_COUNT {
            owners.set(unwritten, SLOT_COUNT - 1, None);
        }
    }

    /// `by` answered that `slot` is `to`'s (`MOVED`), at `now`.
    pub(super) fn moved(&mut self, slot: u16, by: NodeId, to: NodeId, now: Instant) {
        self.set(slot, to);
        if by != to {
            let until = now + MOVED_OUTRANKS_MAP_FOR;
            self.disowned.insert(slot, Disowned { by, to, until });
        }
    }

    /// Gives a topology answer's ranges (`complete`: every slot is in them), except the slots
    /// it gives back to a node that lately disowned them; how many such slots were kept.
    pub(super) fn apply_topology(
        &mut self,
        given: Vec<SlotRange>,
        complete: bool,
        now: Instant,
    ) -> usize {
        if complete {
            self.replace(given);
        } else {
            self.set_ranges(given);
        }
        self.disowned.retain(|_, d| d.until > now);
        let mut kept = 0;
        let redirects: Vec<(u16, Disowned)> = self.disowned.iter().map(|(&s, &d)| (s, d)).collect();
        for (slot, d) in redirects {
            if self.get(slot) == Some(d.by) {
                self.set(slot, d.to);
                kept += 1;
            }
        }
        kept
    }

    /// A node's id is about to be reused: what it said no longer says anything.
    pub(super) fn forget(&mut self, node: NodeId) {
        self.disowned.retain(|_, d| d.by != node && d.to != node);
    }

    pub(super) fn owners(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.ranges.iter().map(|r| r.owner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change to the slot table: give a range to a node, or forget every owner.
    #[derive(Clone, Debug)]
    enum Change {
        Give { first: u16, len: u16, owner: NodeId },
        Clear,
    }

    fn change() -> impl proptest::strategy::Strategy<Value = Change> {
        use proptest::prelude::*;
        // Boundaries from a few points, so that ranges often start or end on each other.
        let point = prop_oneof![
            3 => proptest::sample::select(vec![
                0u16, 1, 2, 100, 101, 5460, 5461, 5462, 16382, 16383, 16384,
            ]),
            1 => 0u16..16_400,
        ];
        let len = prop_oneof![
            3 => proptest::sample::select(vec![0u16, 1, 2, 99, 100, 5360, 5460, 5461]),
            1 => 0u16..17_000,
        ];
        prop_oneof![
            12 => (point, len, 0usize..4)
                .prop_map(|(first, len, owner)| Change::Give { first, len, owner }),
            1 => Just(Change::Clear),
        ]
    }

    /// Disjoint ranges cut from random boundaries, each given to one of four owners.
    fn disjoint() -> impl proptest::strategy::Strategy<Value = Vec<SlotRange>> {
        use proptest::prelude::*;
        (
            proptest::collection::btree_set(0u16..16_400, 0..40),
            proptest::collection::vec((0usize..4, proptest::bool::ANY), 40),
        )
            .prop_map(|(cuts, owners)| {
                let cuts: Vec<u16> = cuts.into_iter().collect();
                cuts.windows(2)
                    .zip(owners)
                    .filter(|(_, (_, keep))| *keep)
                    .map(|(pair, (owner, _))| SlotRange {
                        first: pair[0],
                        last: pair[1] - 1,
                        owner,
                    })
                    .collect()
            })
    }

    fn assert_well_formed(table: &SlotTable) -> Result<(), proptest::test_runner::TestCaseError> {
        for pair in table.ranges.windows(2) {
            proptest::prop_assert!(pair[0].first <= pair[0].last);
            proptest::prop_assert!(pair[0].last < pair[1].first);
            let adjacent = pair[0].last + 1 == pair[1].first;
            proptest::prop_assert!(!(adjacent && pair[0].owner == pair[1].owner));
        }
        Ok(())
    }

    /// The callers' copy says what the ranges say, slot by slot.
    fn assert_mirrored(table: &SlotTable) -> Result<(), proptest::test_runner::TestCaseError> {
        for slot in 0..SLOT_COUNT {
            let owner = table
                .get(slot)
                .map(|n| u16::try_from(n).unwrap_or(NO_OWNER));
            proptest::prop_assert_eq!(table.owners.owner(slot), owner, "slot {}", slot);
        }
        proptest::prop_assert_eq!(table.owners.owner(SLOT_COUNT), None);
        Ok(())
    }

    fn whole(owner: NodeId) -> Vec<SlotRange> {
        vec![SlotRange {
            first: 0,
            last: SLOT_COUNT - 1,
            owner,
        }]
    }

    #[test]
    fn a_redirect_outranks_maps_that_give_the_slot_back_for_a_while() {
        let t0 = crate::testing::start();
        let mut table = SlotTable::default();
        table.apply_topology(whole(0), true, t0);
        table.moved(7, 0, 1, t0);
        // An older map: every slot to node 0, slot 7 included.
        assert_eq!(table.apply_topology(whole(0), true, t0), 1);
        assert_eq!(
            (table.get(6), table.get(7), table.get(8)),
            (Some(0), Some(1), Some(0))
        );
        // A map that names a third owner is newer news than the redirect.
        assert_eq!(table.apply_topology(whole(2), true, t0), 0);
        assert_eq!(table.get(7), Some(2));
        // Past the window, a map may give the slot back (a failback).
        let later = t0 + MOVED_OUTRANKS_MAP_FOR;
        assert_eq!(table.apply_topology(whole(0), true, later), 0);
        assert_eq!(table.get(7), Some(0));
        assert!(table.disowned.is_empty());
    }

    #[test]
    fn a_forgotten_node_leaves_no_redirect_behind() {
        let t0 = crate::testing::start();
        let mut table = SlotTable::default();
        table.moved(7, 0, 1, t0);
        table.moved(8, 2, 0, t0);
        table.moved(9, 2, 3, t0);
        table.forget(0);
        assert_eq!(table.disowned.keys().collect::<Vec<_>>(), vec![&9]);
        // A node redirecting to itself disowns nothing.
        table.moved(10, 4, 4, t0);
        assert_eq!(table.disowned.len(), 1);
    }

    proptest::proptest! {
        /// Giving many disjoint ranges at once (a topology) is giving them one by one.
        #[test]
        fn ranges_given_at_once_are_ranges_given_in_turn(
            before in disjoint(),
            mut given in disjoint(),
        ) {
            let mut at_once = SlotTable::default();
            let mut in_turn = SlotTable::default();
            for r in &before {
                at_once.set_range(r.first, r.last, r.owner);
                in_turn.set_range(r.first, r.last, r.owner);
            }
            for r in &given {
                in_turn.set_range(r.first, r.last, r.owner);
            }
            // A complete map's ranges replace the table's as if it had been empty.
            let mut replaced = SlotTable::default();
            let mut fresh = SlotTable::default();
            for r in &before {
                replaced.set_range(r.first, r.last, r.owner);
            }
            replaced.replace(given.clone());
            fresh.set_ranges(given.clone());
            proptest::prop_assert_eq!(&replaced.ranges, &fresh.ranges);
            assert_mirrored(&replaced)?;
            given.reverse(); // any order
            at_once.set_ranges(given);
            proptest::prop_assert_eq!(&at_once.ranges, &in_turn.ranges);
            assert_well_formed(&at_once)?;
            assert_mirrored(&at_once)?;
            assert_mirrored(&in_turn)?;
        }

        /// The ranges answer every slot as a dense table of 16384 owners would, and stay
        /// disjoint, sorted and merged.
        #[test]
        fn the_slot_table_agrees_with_a_dense_one(
            changes in proptest::collection::vec(change(), 0..40),
        ) {
            let mut table = SlotTable::default();
            let mut dense: Vec<Option<NodeId>> = vec![None; usize::from(SLOT_COUNT)];
            for change in changes {
                match change {
                    Change::Give { first, len, owner } => {
                        let last = first.saturating_add(len);
                        table.set_range(first, last, owner);
                        for slot in first..=last.min(SLOT_COUNT - 1) {
                            dense[usize::from(slot)] = Some(owner);
                        }
                    }
                    Change::Clear => {
                        table.replace(Vec::new());
                        dense.fill(None);
                    }
                }
                for slot in 0..SLOT_COUNT {
                    proptest::prop_assert_eq!(table.get(slot), dense[usize::from(slot)]);
                }
                for pair in table.ranges.windows(2) {
                    proptest::prop_assert!(pair[0].first <= pair[0].last);
                    proptest::prop_assert!(pair[0].last < pair[1].first);
                    let adjacent = pair[0].last + 1 == pair[1].first;
                    proptest::prop_assert!(!(adjacent && pair[0].owner == pair[1].owner));
                }
            }
            assert_mirrored(&table)?;
            // Past the last slot nothing is owned.
            proptest::prop_assert_eq!(table.get(SLOT_COUNT), None);
            proptest::prop_assert_eq!(table.get(u16::MAX), None);
        }
    }
}
