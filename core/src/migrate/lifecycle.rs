//! The lifecycle of a prefix that lives in two layouts: which side the bots run on, read from
//! the keyspace itself, and which steps are safe there.
//!
//! A migration copies the legacy keyspace of a prefix into the cluster layout (in place, into
//! another node, or into a cluster); a rollback copies it back; a cleanup deletes the side the
//! bots left. An operator takes these steps days apart, and the bots write between them. So each
//! side keeps a record, `p:{meta}:lifecycle:<layout>` ([`Keyspace::lifecycle`](crate::Keyspace::lifecycle)), that every copy
//! and every bot start updates:
//!
//! - a copy writes, on both sides, the copy's id (the source server's time in ms when it began),
//!   each side's role in it ([`Role::Source`], [`Role::Target`]) and the target's progress
//!   ([`Phase::Copying`], then [`Phase::Complete`] with the layout marker);
//! - a store's `start()` stamps its side with the id of the copy it holds (`started`): from then
//!   on this side is where the bots write, and the other side is stale;
//! - a cleanup marks its side [`Phase::Deleting`], then [`Phase::Deleted`].
//!
//! The decisions below are pure functions of the two sides' records ([`copy`], [`cleanup`]); the
//! steps read the records, ask, and refuse with [`Unsafe`] before writing anything. They keep
//! five invariants, whatever the order of the steps and the time between them:
//!
//! - **I1** no step writes into the live side a datum that side deleted since the copy;
//! - **I2** no step deletes or overwrites a datum written on the live side since the copy;
//! - **I3** which side is live is read from these records, never assumed; a step that cannot
//!   tell is refused, saying what it found and what to do;
//! - **I4** a mirror removes from its target whatever the source no longer holds;
//! - **I5** deleting the abandoned side is its own step, which only deletes, and only once the
//!   other side holds the data.
//!
//! ```text
//!              migrate                       bots start on the cluster side
//!   legacy ─────────────────► copied ──────────────────────────────────────► cluster live
//!   live  ◄───────────────── (cluster      bots start again on the legacy      │     │
//!     ▲     bots restart      is a copy)   side: the copy is stale; migrate    │     │ cleanup
//!     │     on legacy                      again refreshes it                  │     ▼ legacy
//!     │                                                                        │  cluster only
//!     │ bots start on        rolled back      rollback (mirror)                │
//!     └───────────────────── (legacy is ◄──────────────────────────────────────┘
//!       the legacy side       a copy)
//!     │ cleanup cluster (once the legacy bots run)
//!     ▼
//!   legacy only
//! ```
//!
//! `docs/migration.md` draws the same machine with every refusal.

use crate::keys::Layout;

pub use crate::keys::lifecycle::{Phase, Record, Role, LIVE_AFTER};

/// What a step read of one side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The side's layout.
    pub layout: Layout,
    /// Its record's key, for messages.
    pub key: String,
    /// Its record, if any; `Err` holds why it could not be read.
    pub record: Result<Option<Record>, String>,
    /// The layout marker holds `cluster:v1` (cluster side only).
    pub marker: bool,
    /// Keys of this layout exist under the prefix. Only asked where a side without a record
    /// could be live (a legacy target with data no copy wrote).
    pub holds_data: bool,
}

impl View {
    /// A side with no record, no marker and no data.
    pub fn empty(layout: Layout, key: impl Into<String>) -> View {
        View {
            layout,
            key: key.into(),
            record: Ok(None),
            marker: false,
            holds_data: false,
        }
    }

    fn record(&self) -> Result<Option<&Record>, Unsafe> {
        match &self.record {
            Ok(r) => Ok(r.as_ref()),
            Err(detail) => Err(Unsafe::UnreadableRecord {
                key: self.key.clone(),
                detail: detail.clone(),
            }),
        }
    }

    /// One line on what the side holds, for a refusal.
    pub fn summary(&self) -> String {
        let layout = self.layout.name();
        let record = match &self.record {
            Err(detail) => format!("an unreadable record ({detail})"),
            Ok(None) => {
                let mut text = "no lifecycle record".to_owned();
                if self.marker {
                    text.push_str(", the layout marker");
                }
                if self.holds_data {
                    text.push_str(", data of its layout");
                }
                text
            }
            Ok(Some(r)) => r.describe(),
        };
        format!("{layout} side ({}): {record}", self.key)
    }
}

/// Which copy a step runs: the one both records name (a rerun of a copy whose source did not
/// change: existing target keys are this copy's own), or a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyId {
    /// Rerun this copy.
    Resume(u64),
    /// Begin a new copy.
    New,
}

pub use crate::error::{StepKind, Unsafe};

impl Unsafe {
    /// The full message of a refusal: the reason, what each side holds, and what to do.
    pub fn message(&self, step: StepKind, sides: &[View; 2]) -> String {
        format!(
            "{}. Found: {}; {}. What to do: {}",
            self.what(),
            sides[0].summary(),
            sides[1].summary(),
            self.advice(step)
        )
    }

    /// The refusal of a step, with both sides' states (legacy first).
    pub(crate) fn refusal(self, step: StepKind, a: &View, b: &View) -> crate::error::Error {
        let sides = if a.layout == Layout::Legacy {
            [a.clone(), b.clone()]
        } else {
            [b.clone(), a.clone()]
        };
        crate::error::Refusal::Lifecycle {
            step,
            message: self.message(step, &sides),
            reason: self,
        }
        .into()
    }
}

/// The copy both records are about, if they are the two sides of one copy. A step writes the
/// target's record of a new copy before the source's, so a step killed between the two leaves a
/// target one copy ahead, still copying: it is recognised by its `prev`, and the source is read
/// as if its record had been written. Only a target is taken for one ahead: a source one copy
/// ahead, still copying, wrote its record second, so its partner in that copy is a third
/// keyspace, and the side its `prev` names is no partner of it (taken for one, a live side
/// whose copy elsewhere was killed passed for the stale copy of that side).
fn partners(a: &Record, b: &Record) -> Option<(Record, Record)> {
    if a.role == Role::Origin || b.role == Role::Origin {
        return None;
    }
    if a.copy == b.copy {
        return (a.role != b.role).then(|| (a.clone(), b.clone()));
    }
    let caught_up = |ahead: &Record, behind: &Record| Record {
        copy: ahead.copy,
        prev: Some(behind.copy),
        role: match ahead.role {
            Role::Target => Role::Source,
            _ => Role::Target,
        },
        phase: Phase::Copying,
        ..behind.clone()
    };
    let ahead_of = |ahead: &Record, behind: &Record| {
        ahead.role == Role::Target
            && ahead.phase == Phase::Copying
            && ahead.prev == Some(behind.copy)
    };
    if ahead_of(a, b) {
        return Some((a.clone(), caught_up(a, b)));
    }
    if ahead_of(b, a) {
        return Some((caught_up(b, a), b.clone()));
    }
    None
}

/// Whether a copy from `from` into `to` is safe, and which copy it runs. See the module docs.
pub fn copy(from: &View, to: &View) -> Result<CopyId, Unsafe> {
    let f = from.record()?;
    let t = to.record()?;
    if f.is_some_and(|f| f.phase.is_deletion()) {
        return Err(Unsafe::SourceDeleted);
    }
    if let Some(t) = t {
        if t.started_since_copy() {
            let both = f.is_some_and(|f| {
                partners(f, t)
                    .is_some_and(|(f, _)| f.started_since_copy() && f.role != Role::Origin)
            });
            return Err(if both {
                Unsafe::BothLive
            } else {
                Unsafe::TargetLive
            });
        }
    }
    let Some(f) = f else {
        // No record at the source: it took part in no copy. A legacy side is the original
        // keyspace; a cluster side must carry the marker (bots ran there before records).
        if from.layout == Layout::Cluster && !from.marker {
            return Err(Unsafe::SourceIncomplete);
        }
        if let Some(t) = t.filter(|t| first_copy_begun(t)) {
            return Ok(CopyId::Resume(t.copy));
        }
        return fresh_target(to).map(|()| CopyId::New);
    };
    if f.role == Role::Target && f.phase == Phase::Copying {
        return Err(Unsafe::SourceIncomplete);
    }
    if let Some((f, t)) = t.and_then(|t| partners(f, t)) {
        return match f.role {
            // The target holds this copy (or part of it), or a cleanup took it apart.
            Role::Source if t.phase.is_deletion() || f.started_since_copy() => Ok(CopyId::New),
            Role::Source => Ok(CopyId::Resume(f.copy)),
            // Copying back from a copy: once bots ran on it (the other side is then stale), or
            // from an exact copy no bot changed, which holds just what the other side holds.
            _ if f.started_since_copy() || f.exact => Ok(CopyId::New),
            _ => Err(Unsafe::SourceIsCopy),
        };
    }
    // The two records are about different copies (or the target has none).
    if f.started_since_copy() {
        // The source is live and took part in earlier copies; a first copy from it into a
        // keyspace that had no record was killed before the source's record was written.
        if let Some(t) = t.filter(|t| first_copy_begun(t)) {
            return Ok(CopyId::Resume(t.copy));
        }
        return fresh_target(to).map(|()| CopyId::New);
    }
    match f.role {
        Role::Target => Err(Unsafe::SourceIsCopy),
        // A copy from here to another keyspace whose target never recorded it is just as unsafe
        // to overlook: the bots may run there.
        _ => Err(Unsafe::SourceMayBeStale),
    }
}

/// Whether the names both layouts share on a server and prefix belong to `sibling` too (the
/// other layout of the same prefix on the same server): it has a lifecycle record that no
/// cleanup deleted, or, without a record, legacy data or the layout marker. A copy from another
/// server or prefix must not write them then, and a cleanup keeps them.
pub fn sibling_in_use(sibling: &View) -> bool {
    match &sibling.record {
        Ok(Some(r)) => r.phase != Phase::Deleted,
        Ok(None) => sibling.marker || sibling.holds_data,
        Err(_) => true,
    }
}

/// Whether a copy from another server or prefix may write the names both layouts share at the
/// target: not while they are its in-place sibling's too ([`sibling_in_use`]).
pub fn shared_names(sibling: &View) -> Result<(), Unsafe> {
    if sibling_in_use(sibling) {
        return Err(Unsafe::SiblingInUse);
    }
    Ok(())
}

/// A target whose first copy began and was killed before the source's record was written: it
/// had no record before (no `prev`), is still copying, and no bot started on it, so it holds
/// part of that copy at most.
fn first_copy_begun(t: &Record) -> bool {
    t.role == Role::Target && t.phase == Phase::Copying && t.prev.is_none() && t.started.is_none()
}

/// Whether a side that is no partner of the source may receive a copy: it has no record and
/// holds nothing live, or it was deleted.
fn fresh_target(to: &View) -> Result<(), Unsafe> {
    match to.record()? {
        None if to.marker => Err(Unsafe::TargetMayBeLive),
        None if to.layout == Layout::Legacy && to.holds_data => Err(Unsafe::TargetMayBeLive),
        None => Ok(()),
        Some(t) if t.phase == Phase::Deleted => Ok(()),
        Some(_) => Err(Unsafe::NotPartners),
    }
}

/// Whether the side `doomed` may be deleted, `other` being the other side of its copy. See the
/// module docs.
pub fn cleanup(doomed: &View, other: &View) -> Result<(), Unsafe> {
    let Some(d) = doomed.record()? else {
        return Err(Unsafe::NoCopy);
    };
    if d.started_since_copy() {
        return Err(Unsafe::SideLive);
    }
    let Some(o) = other.record()? else {
        return Err(Unsafe::NotPartners);
    };
    // The other side went live after this side's copy: whatever it did since, this side is
    // stale, and its data was carried forward (or deleted) by the bots' own choice.
    if o.live_after(d.copy) && d.role != Role::Origin {
        return Ok(());
    }
    let Some((d, o)) = partners(d, o) else {
        return Err(Unsafe::NotPartners);
    };
    match d.role {
        // Deleting the source of a copy: the copy must hold everything.
        Role::Source => match o.phase {
            Phase::Deleting | Phase::Deleted => Err(Unsafe::OtherDeleted),
            Phase::Copying => Err(Unsafe::CopyIncomplete),
            Phase::Complete if o.started_since_copy() || o.exact => Ok(()),
            Phase::Complete => Err(Unsafe::CopyInexact),
        },
        // Deleting a copy no bot started: its source still holds the data.
        _ if o.phase.is_deletion() => Err(Unsafe::OtherDeleted),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    const K1: u64 = 1_000;
    const K2: u64 = 2_000;

    fn rec(copy: u64, role: Role, phase: Phase) -> Record {
        Record {
            copy,
            prev: None,
            role,
            phase,
            exact: true,
            peer: "the other side".into(),
            at_ms: copy as i64,
            started: None,
            started_at_ms: None,
            live_after: Vec::new(),
        }
    }

    fn started(mut r: Record, at: u64) -> Record {
        r.started = Some(at);
        r.started_at_ms = Some(at as i64 + 1);
        r.live_after.push(at);
        r
    }

    fn side(layout: Layout, record: Option<Record>) -> View {
        View {
            layout,
            key: format!("p:{{meta}}:lifecycle:{}", layout.name()),
            record: Ok(record),
            marker: false,
            holds_data: false,
        }
    }

    fn legacy(record: Option<Record>) -> View {
        side(Layout::Legacy, record)
    }

    fn cluster(record: Option<Record>) -> View {
        side(Layout::Cluster, record)
    }

    use Phase::{Complete, Copying, Deleted, Deleting};
    use Role::{Source, Target};

    /// Copies: (what, from, to, decision).
    #[test]
    #[rustfmt::skip]
    fn copies_are_allowed_only_from_the_live_side_into_a_side_that_is_not() {
        let mut marked = cluster(None);
        marked.marker = true;
        let mut legacy_data = legacy(None);
        legacy_data.holds_data = true;
        let mut inexact = rec(K1, Target, Complete);
        inexact.exact = false;
        let mut ahead = rec(K2, Target, Copying);
        ahead.prev = Some(K1);
        // A live side's copy into a third keyspace, killed: its record moved on to that copy.
        let mut copying_elsewhere = started(rec(K2, Source, Copying), K1);
        copying_elsewhere.prev = Some(K1);
        let exact_copy = rec(K1, Target, Complete);
        let table: Vec<(&str, View, View, Result<CopyId, Unsafe>)> = vec![
            ("first migration", legacy(None), cluster(None), Ok(CopyId::New)),
            ("into a cluster keyspace no copy made", legacy(None), marked.clone(), Err(Unsafe::TargetMayBeLive)),
            ("into a cluster keyspace bots created", legacy(None), cluster(Some(Record::origin(5))), Err(Unsafe::TargetLive)),
            ("rerun of a complete copy", legacy(Some(rec(K1, Source, Complete))), cluster(Some(rec(K1, Target, Complete))), Ok(CopyId::Resume(K1))),
            ("rerun of a killed copy", legacy(Some(rec(K1, Source, Copying))), cluster(Some(rec(K1, Target, Copying))), Ok(CopyId::Resume(K1))),
            ("killed between the two records", legacy(Some(started(rec(K1, Source, Complete), K1))), cluster(Some(ahead.clone())), Ok(CopyId::Resume(K2))),
            ("first copy killed between the two records", legacy(None), cluster(Some(rec(K1, Target, Copying))), Ok(CopyId::Resume(K1))),
            ("rollback into a new prefix killed between the two records", cluster(Some(started(rec(K1, Target, Complete), K1))), legacy(Some(rec(K2, Target, Copying))), Ok(CopyId::Resume(K2))),
            ("rollback of a cluster keyspace bots created, killed between the records", cluster(Some(Record::origin(5))), legacy(Some(rec(K2, Target, Copying))), Ok(CopyId::Resume(K2))),
            ("into a new prefix another copy began, from a side not live", cluster(Some(rec(K1, Target, Complete))), legacy(Some(rec(K2, Target, Copying))), Err(Unsafe::SourceIsCopy)),
            ("bots ran on the cluster side (sequence 1)", legacy(Some(rec(K1, Source, Complete))), cluster(Some(started(rec(K1, Target, Complete), K1))), Err(Unsafe::TargetLive)),
            ("bots resumed on the legacy side: refresh", legacy(Some(started(rec(K1, Source, Complete), K1))), cluster(Some(rec(K1, Target, Complete))), Ok(CopyId::New)),
            ("bots on both sides", legacy(Some(started(rec(K1, Source, Complete), K1))), cluster(Some(started(rec(K1, Target, Complete), K1))), Err(Unsafe::BothLive)),
            ("migrate again after a rollback and legacy bots", legacy(Some(started(rec(K2, Target, Complete), K2))), cluster(Some(started(rec(K2, Source, Complete), K1))), Ok(CopyId::New)),
            ("migrate from an unstarted rollback copy", legacy(Some(rec(K2, Target, Complete))), cluster(Some(started(rec(K2, Source, Complete), K1))), Ok(CopyId::New)),
            ("from an unstarted copy into a third keyspace", cluster(Some(rec(K1, Target, Complete))), legacy(None), Err(Unsafe::SourceIsCopy)),
            ("from an incomplete rollback", legacy(Some(rec(K2, Target, Copying))), cluster(Some(rec(K2, Source, Copying))), Err(Unsafe::SourceIncomplete)),
            ("from a deleted side", legacy(Some(rec(K1, Source, Deleted))), cluster(Some(started(rec(K1, Target, Complete), K1))), Err(Unsafe::SourceDeleted)),
            ("rollback into the deleted legacy side", cluster(Some(started(rec(K1, Target, Complete), K1))), legacy(Some(rec(K1, Source, Deleted))), Ok(CopyId::New)),
            ("from a side being deleted", legacy(Some(rec(K1, Source, Deleting))), cluster(Some(rec(K1, Target, Complete))), Err(Unsafe::SourceDeleted)),
            ("into a deleted copy", legacy(Some(started(rec(K1, Source, Complete), K1))), cluster(Some(rec(K1, Target, Deleted))), Ok(CopyId::New)),
            ("copied elsewhere, never restarted", legacy(Some(rec(K1, Source, Complete))), cluster(None), Err(Unsafe::SourceMayBeStale)),
            ("copied elsewhere, restarted since", legacy(Some(started(rec(K1, Source, Complete), K1))), cluster(None), Ok(CopyId::New)),
            ("into another source's copy", legacy(Some(started(rec(K2, Source, Complete), K2))), cluster(Some(rec(K1, Target, Complete))), Err(Unsafe::NotPartners)),
            ("rollback of a cluster keyspace bots created", cluster(Some(Record::origin(5))), legacy(None), Ok(CopyId::New)),
            ("rollback over legacy data no copy wrote", cluster(Some(Record::origin(5))), legacy_data, Err(Unsafe::TargetMayBeLive)),
            ("rollback from a cluster side without a marker", cluster(None), legacy(None), Err(Unsafe::SourceIncomplete)),
            ("rollback from a marked cluster side", marked, legacy(None), Ok(CopyId::New)),
            ("rollback after the cluster bots ran", cluster(Some(started(rec(K1, Target, Complete), K1))), legacy(Some(rec(K1, Source, Complete))), Ok(CopyId::New)),
            ("rollback before any cluster bot ran", cluster(Some(rec(K1, Target, Complete))), legacy(Some(rec(K1, Source, Complete))), Ok(CopyId::New)),
            ("rollback --delete-source after the legacy bots ran (sequence 2)", cluster(Some(started(rec(K2, Source, Complete), K1))), legacy(Some(started(rec(K2, Target, Complete), K2))), Err(Unsafe::TargetLive)),
            ("rerun of a killed rollback", cluster(Some(started(rec(K2, Source, Copying), K1))), legacy(Some(rec(K2, Target, Copying))), Ok(CopyId::Resume(K2))),
            ("copy-only rollback copy, then migrate back", legacy(Some(inexact)), cluster(Some(rec(K1, Source, Complete))), Err(Unsafe::SourceIsCopy)),
            ("migrate again into a live cluster side whose rollback elsewhere was killed", legacy(Some(rec(K1, Source, Complete))), cluster(Some(copying_elsewhere.clone())), Err(Unsafe::SourceMayBeStale)),
            ("rollback into a live legacy side whose migration elsewhere was killed", cluster(Some(exact_copy)), legacy(Some(copying_elsewhere)), Err(Unsafe::SourceIsCopy)),
        ];
        for (what, from, to, expected) in table {
            assert_eq!(copy(&from, &to), expected, "{what}");
        }
    }

    /// Cleanups: (what, side to delete, other side, decision).
    #[test]
    #[rustfmt::skip]
    fn a_side_is_deleted_only_once_the_other_side_holds_the_data() {
        let mut inexact = rec(K2, Target, Complete);
        inexact.exact = false;
        let table: Vec<(&str, View, View, Result<(), Unsafe>)> = vec![
            ("legacy after the cluster bots ran (sequence 1)", legacy(Some(rec(K1, Source, Complete))), cluster(Some(started(rec(K1, Target, Complete), K1))), Ok(())),
            ("legacy right after a mirror copy", legacy(Some(rec(K1, Source, Complete))), cluster(Some(rec(K1, Target, Complete))), Ok(())),
            ("legacy after the legacy bots came back", legacy(Some(started(rec(K1, Source, Complete), K1))), cluster(Some(rec(K1, Target, Complete))), Err(Unsafe::SideLive)),
            ("legacy while the copy is incomplete", legacy(Some(rec(K1, Source, Copying))), cluster(Some(rec(K1, Target, Copying))), Err(Unsafe::CopyIncomplete)),
            ("cluster after the legacy bots ran (sequence 2)", cluster(Some(started(rec(K2, Source, Complete), K1))), legacy(Some(started(rec(K2, Target, Complete), K2))), Ok(())),
            ("cluster after a copy-only rollback no bot started", cluster(Some(started(rec(K2, Source, Complete), K1))), legacy(Some(inexact.clone())), Err(Unsafe::CopyInexact)),
            ("cluster after a copy-only rollback bots started", cluster(Some(started(rec(K2, Source, Complete), K1))), legacy(Some(started(inexact, K2))), Ok(())),
            ("the first legacy side, long after", legacy(Some(rec(K1, Source, Complete))), cluster(Some(started(rec(K2, Source, Deleted), K1))), Ok(())),
            ("the first legacy side, after the bots restarted on a later copy", legacy(Some(rec(K1, Source, Complete))), cluster(Some(started(started(rec(K2, Source, Complete), K1), K2))), Ok(())),
            ("an abandoned copy no bot started", cluster(Some(rec(K1, Target, Complete))), legacy(Some(started(rec(K1, Source, Complete), K1))), Ok(())),
            ("an interrupted copy", cluster(Some(rec(K1, Target, Copying))), legacy(Some(rec(K1, Source, Copying))), Ok(())),
            ("the copy whose source is gone", cluster(Some(rec(K1, Target, Complete))), legacy(Some(rec(K1, Source, Deleted))), Err(Unsafe::OtherDeleted)),
            ("the source of a deleted copy", legacy(Some(rec(K1, Source, Complete))), cluster(Some(rec(K1, Target, Deleting))), Err(Unsafe::OtherDeleted)),
            ("a rerun of a cleanup", legacy(Some(rec(K1, Source, Deleting))), cluster(Some(started(rec(K1, Target, Complete), K1))), Ok(())),
            ("a side no copy knows", legacy(None), cluster(Some(Record::origin(3))), Err(Unsafe::NoCopy)),
            ("a cluster side bots created", cluster(Some(Record::origin(3))), legacy(None), Err(Unsafe::SideLive)),
            ("strangers", legacy(Some(rec(K1, Source, Complete))), cluster(Some(rec(K2, Target, Complete))), Err(Unsafe::NotPartners)),
        ];
        for (what, doomed, other, expected) in table {
            assert_eq!(cleanup(&doomed, &other), expected, "{what}");
        }
    }

    #[test]
    fn shared_names_belong_to_a_sibling_until_a_cleanup_deleted_it() {
        let with = |record: Option<Record>, marker: bool, holds_data: bool| View {
            marker,
            holds_data,
            ..legacy(record)
        };
        let table = [
            ("nothing there", with(None, false, false), false),
            ("a marker", with(None, true, false), true),
            ("legacy data, no record", with(None, false, true), true),
            (
                "a copy's record",
                with(Some(rec(K1, Target, Complete)), false, false),
                true,
            ),
            (
                "being deleted",
                with(Some(rec(K1, Target, Deleting)), false, false),
                true,
            ),
            (
                "deleted",
                with(Some(rec(K1, Target, Deleted)), true, true),
                false,
            ),
        ];
        for (what, sibling, in_use) in table {
            assert_eq!(sibling_in_use(&sibling), in_use, "{what}");
            let want = if in_use {
                Err(Unsafe::SiblingInUse)
            } else {
                Ok(())
            };
            assert_eq!(shared_names(&sibling), want, "{what}");
        }
        let unreadable = View {
            record: Err("bad field".into()),
            ..legacy(None)
        };
        assert!(sibling_in_use(&unreadable));
    }

    #[test]
    fn records_round_trip_through_their_fields() {
        let mut r = started(rec(u64::MAX, Target, Complete), 7);
        r.prev = Some(3);
        r.exact = false;
        r.peer = "cluster keyspace \"a:b\" on a cluster".into();
        let flat: Vec<Bytes> = r
            .fields()
            .into_iter()
            .flat_map(|(k, v)| [Bytes::from(k), Bytes::from(v)])
            .collect();
        assert_eq!(Record::parse(&flat), Ok(r));
        assert_eq!(Record::parse(&[]), Err("no copy field".into()));
        let bad = [Bytes::from("copy"), Bytes::from("x")];
        assert_eq!(
            Record::parse(&bad),
            Err("field copy is not a number".into())
        );
    }

    #[test]
    fn an_unreadable_record_refuses_every_step() {
        let mut bad = legacy(None);
        bad.record = Err("no known role".into());
        let expected = Err(Unsafe::UnreadableRecord {
            key: bad.key.clone(),
            detail: "no known role".into(),
        });
        assert_eq!(
            copy(&bad, &cluster(None)),
            expected.clone().map(|()| CopyId::New)
        );
        assert_eq!(cleanup(&bad, &cluster(None)), expected);
    }

    #[test]
    fn a_refusal_names_both_sides_and_the_step_to_take() {
        let sides = [
            legacy(Some(rec(K1, Source, Complete))),
            cluster(Some(started(
                rec(1_764_624_605_000, Target, Complete),
                1_764_624_605_000,
            ))),
        ];
        let text = Unsafe::TargetLive.message(StepKind::Migrate, &sides);
        assert!(text.starts_with("the target is live"), "{text}");
        assert!(text.contains("legacy side (p:{meta}:lifecycle:legacy): source of the copy of 1970-01-01 00:00:01 UTC"), "{text}");
        assert!(
            text.contains("bots started here at 2025-12-01 21:30:05 UTC"),
            "{text}"
        );
        assert!(
            text.contains("botmesh-redis cleanup --layout legacy"),
            "{text}"
        );
    }
}
