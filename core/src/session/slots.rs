//! The slot table: the owner of every slot, as ranges.

use crate::keys::SLOT_COUNT;

use super::ids::NodeId;

/// The owner of every slot, as ranges. A cluster maps its 16384 slots in a few ranges, so routing
/// finds a request's owner with a binary search over a few cache lines. (A dense table of 16384
/// owners missed the cache at almost every random slot once the servers shared the cores: it
/// was most of `pump`'s time in the W1 and W2 profiles.)
#[derive(Debug, Default)]
pub(super) struct SlotTable {
    /// Disjoint, sorted, and never two adjacent ranges with one owner; a slot in no range has
    /// no known owner.
    pub(super) ranges: Vec<SlotRange>,
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

    pub(super) fn clear(&mut self) {
        self.ranges.clear();
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
            given.reverse(); // any order
            at_once.set_ranges(given);
            proptest::prop_assert_eq!(&at_once.ranges, &in_turn.ranges);
            assert_well_formed(&at_once)?;
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
                        table.clear();
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
            // Past the last slot nothing is owned.
            proptest::prop_assert_eq!(table.get(SLOT_COUNT), None);
            proptest::prop_assert_eq!(table.get(u16::MAX), None);
        }
    }
}
