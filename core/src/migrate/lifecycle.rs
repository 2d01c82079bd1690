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

use bytes::Bytes;

use crate::layout::Layout;

/// A side's part in the copy its record names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// No copy made this side: bots created it (a cluster-layout store started on an empty
    /// keyspace). It is live.
    Origin,
    /// The copy was made from this side.
    Source,
    /// The copy was made into this side.
    Target,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Origin => "origin",
            Role::Source => "source",
            Role::Target => "target",
        }
    }

    fn parse(text: &[u8]) -> Option<Role> {
        [Role::Origin, Role::Source, Role::Target]
            .into_iter()
            .find(|r| r.name().as_bytes() == text)
    }
}

/// Where a side stands in its copy, or in its deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A copy from or into this side began and has not completed (a target without this phase
    /// complete holds part of the data).
    Copying,
    /// The copy completed (a target holds every namespace; a cluster target carries the marker).
    Complete,
    /// A cleanup is deleting this side.
    Deleting,
    /// A cleanup deleted this side's data.
    Deleted,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Copying => "copying",
            Phase::Complete => "complete",
            Phase::Deleting => "deleting",
            Phase::Deleted => "deleted",
        }
    }

    fn parse(text: &[u8]) -> Option<Phase> {
        [
            Phase::Copying,
            Phase::Complete,
            Phase::Deleting,
            Phase::Deleted,
        ]
        .into_iter()
        .find(|p| p.name().as_bytes() == text)
    }

    /// Whether a cleanup began on the side.
    pub fn is_deletion(self) -> bool {
        matches!(self, Phase::Deleting | Phase::Deleted)
    }
}

/// One side's lifecycle record (a hash at [`Keyspace::lifecycle`](crate::Keyspace::lifecycle)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The id of the last copy this side took part in: the copy's source server time in ms when
    /// it began (`0` for an [`Role::Origin`] record).
    pub copy: u64,
    /// The copy before it, if any: a step that was killed after writing one side's record of a
    /// new copy but not the other's is recognised by it.
    pub prev: Option<u64>,
    /// This side's part in `copy`.
    pub role: Role,
    /// Where this side stands.
    pub phase: Phase,
    /// A target made to match its source exactly (a mirror): its source may be deleted before
    /// any bot starts on it. A copy-only target kept some of its older keys.
    pub exact: bool,
    /// The other side of `copy`, for people ("cluster keyspace \"bot\" on a cluster of 3
    /// masters").
    pub peer: String,
    /// Server time in ms when `phase` was last set.
    pub at_ms: i64,
    /// The copy this side held when bots last started on it: equal to `copy` once bots started
    /// here since that copy.
    pub started: Option<u64>,
    /// Server time in ms of that start.
    pub started_at_ms: Option<i64>,
    /// Every copy (the last [`LIVE_AFTER`]) this side held when bots started on it: the side
    /// went live after each of them. A later step reads it to know that this side was where
    /// the bots wrote after an older copy, even once newer copies came and went.
    pub live_after: Vec<u64>,
}

/// How many copies a record remembers bots starting after.
pub const LIVE_AFTER: usize = 16;

impl Record {
    /// The record a cluster-layout store writes when it starts on a keyspace no copy made.
    pub fn origin(now_ms: i64) -> Record {
        Record {
            copy: 0,
            prev: None,
            role: Role::Origin,
            phase: Phase::Complete,
            exact: true,
            peer: String::new(),
            at_ms: now_ms,
            started: Some(0),
            started_at_ms: Some(now_ms),
            live_after: vec![0],
        }
    }

    /// Whether bots started on this side while it held `copy`.
    pub fn live_after(&self, copy: u64) -> bool {
        self.started == Some(copy) || self.live_after.contains(&copy)
    }

    /// Whether bots started on this side since its copy: this side is where they write.
    pub fn started_since_copy(&self) -> bool {
        self.live_after(self.copy)
    }

    /// The hash fields of the record, in a fixed order.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            ("copy", self.copy.to_string()),
            ("role", self.role.name().to_owned()),
            ("phase", self.phase.name().to_owned()),
            ("exact", if self.exact { "1" } else { "0" }.to_owned()),
            ("peer", self.peer.clone()),
            ("at", self.at_ms.to_string()),
        ];
        if let Some(prev) = self.prev {
            out.push(("prev", prev.to_string()));
        }
        if let (Some(started), Some(at)) = (self.started, self.started_at_ms) {
            out.push(("started", started.to_string()));
            out.push(("started_at", at.to_string()));
        }
        if !self.live_after.is_empty() {
            let list: Vec<String> = self.live_after.iter().map(u64::to_string).collect();
            out.push(("live", list.join(",")));
        }
        out
    }

    /// Reads a record from its hash fields (a flat `HGETALL` reply); `Err` names what is wrong.
    pub fn parse(flat: &[Bytes]) -> Result<Record, String> {
        let field = |name: &str| -> Option<&Bytes> {
            flat.chunks(2)
                .find(|pair| pair.len() == 2 && pair[0].as_ref() == name.as_bytes())
                .map(|pair| &pair[1])
        };
        let number = |name: &str| -> Result<Option<u64>, String> {
            field(name)
                .map(|v| {
                    std::str::from_utf8(v)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| format!("field {name} is not a number"))
                })
                .transpose()
        };
        let time = |name: &str| -> Result<Option<i64>, String> {
            field(name)
                .map(|v| {
                    std::str::from_utf8(v)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| format!("field {name} is not a time"))
                })
                .transpose()
        };
        let copy = number("copy")?.ok_or("no copy field")?;
        let role = field("role")
            .and_then(|r| Role::parse(r))
            .ok_or("no known role")?;
        let phase = field("phase")
            .and_then(|p| Phase::parse(p))
            .ok_or("no known phase")?;
        Ok(Record {
            copy,
            prev: number("prev")?,
            role,
            phase,
            exact: field("exact").is_some_and(|e| e.as_ref() == b"1"),
            peer: field("peer")
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .unwrap_or_default(),
            at_ms: time("at")?.unwrap_or(0),
            started: number("started")?,
            started_at_ms: time("started_at")?,
            live_after: match field("live") {
                None => Vec::new(),
                Some(list) => std::str::from_utf8(list)
                    .ok()
                    .and_then(|t| t.split(',').map(|n| n.parse().ok()).collect())
                    .ok_or("field live is not a list of numbers")?,
            },
        })
    }
}

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

impl Record {
    /// What the record says, for people: the copy, its phase, and when bots last started.
    pub fn describe(&self) -> String {
        describe(self)
    }
}

fn describe(r: &Record) -> String {
    let mut text = match r.role {
        Role::Origin => "created by bots (no copy)".to_owned(),
        Role::Source => format!("source of the copy of {} to {}", when(r.copy), r.peer),
        Role::Target => format!(
            "{} copy of {} from {}",
            if r.exact { "mirror" } else { "copy-only" },
            when(r.copy),
            r.peer
        ),
    };
    if r.role != Role::Origin {
        text.push_str(&format!(", {} at {}", r.phase.name(), when_i(r.at_ms)));
    }
    match (r.started_since_copy(), r.started_at_ms) {
        (true, Some(at)) => text.push_str(&format!("; bots started here at {}", when_i(at))),
        (false, Some(at)) => text.push_str(&format!(
            "; no bot started here since (last at {})",
            when_i(at)
        )),
        _ => text.push_str("; no bot started here since"),
    }
    text
}

fn when(ms: u64) -> String {
    when_i(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// A server time in ms as UTC, `2026-12-01 21:30:05`: the core has no clock, but dates in
/// refusals are read by people.
fn when_i(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
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

/// Why the records forbid a step. Every reason says what was found and what to do
/// ([`Unsafe::advice`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unsafe {
    /// The target is live: bots started on it since the copy. A copy into it would bring back
    /// what they deleted and undo what they wrote.
    TargetLive,
    /// Bots started on both sides since the copy: each holds writes the other lacks.
    BothLive,
    /// The target has no lifecycle record but may be live: a cluster side with the layout
    /// marker (bots started there before lifecycle records existed), or a legacy side with data
    /// no copy wrote.
    TargetMayBeLive,
    /// The source is a copy that no bot started, and either a copy-only one (it kept older
    /// keys) or a copy of another keyspace than this step's target (which may have changed
    /// since): the data is on the keyspace it was copied from.
    SourceIsCopy,
    /// The source is not a complete keyspace: an interrupted copy into it, or a cluster side
    /// without the layout marker.
    SourceIncomplete,
    /// The source was (or is being) deleted by a cleanup.
    SourceDeleted,
    /// The source was copied to another keyspace than this step's target and no bot started on
    /// it since: the bots may run on that other keyspace.
    SourceMayBeStale,
    /// The two records name different copies: these keyspaces are not the two sides of one
    /// migration.
    NotPartners,
    /// The target's server holds the other layout of the target's prefix too (a keyspace with
    /// a lifecycle record that no cleanup deleted, or legacy data): the names both layouts share
    /// (conversations, cursors, leases, durability tables) are its keys, which a copy from
    /// another server or prefix would overwrite.
    SiblingInUse,
    /// Cleanup: bots started on the side to delete since its copy: it holds their writes.
    SideLive,
    /// Cleanup: the side took part in no copy (no record), so no other side holds its data.
    NoCopy,
    /// Cleanup: the other side's copy is not complete.
    CopyIncomplete,
    /// Cleanup: the other side is a copy-only copy (it kept some older keys) that no bot
    /// started: deleting its source would lose the newer values.
    CopyInexact,
    /// Cleanup: the other side was deleted: this side holds the only copy.
    OtherDeleted,
    /// A lifecycle record could not be read.
    UnreadableRecord {
        /// The record's key.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
}

/// The step a decision is about, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// `migrate_to_cluster_layout`.
    Migrate,
    /// `rollback_to_legacy_layout`.
    Rollback,
    /// `delete_abandoned_side`.
    Cleanup,
}

impl Unsafe {
    fn what(&self) -> String {
        match self {
            Unsafe::TargetLive => "the target is live: bots started on it since the copy, so a copy into it would bring back what they deleted and undo what they wrote".into(),
            Unsafe::BothLive => "bots started on both sides since the copy: each side holds writes the other lacks".into(),
            Unsafe::TargetMayBeLive => "the target has no lifecycle record but holds data or the layout marker that no copy recorded: bots may have written it".into(),
            Unsafe::SourceIsCopy => "the source is a copy that no bot started, copy-only or made from another keyspace than this target: the data is on the keyspace it was copied from".into(),
            Unsafe::SourceIncomplete => "the source is not a complete keyspace (an interrupted copy into it, or a cluster side without the layout marker)".into(),
            Unsafe::SourceDeleted => "the source was deleted (or is being deleted) by a cleanup".into(),
            Unsafe::SourceMayBeStale => "the source was copied to another keyspace than this target and no bot started on it since: the bots may run on that keyspace".into(),
            Unsafe::NotPartners => "the two sides' records name different copies: they are not the two sides of one migration".into(),
            Unsafe::SiblingInUse => "the target's server holds the other layout of the target's prefix, not deleted, and the names both layouts share (conversations, cursors, leases, durability tables) are its keys too".into(),
            Unsafe::SideLive => "bots started on the side to delete since its copy: it holds their writes".into(),
            Unsafe::NoCopy => "the side to delete took part in no recorded copy, so no other side is known to hold its data".into(),
            Unsafe::CopyIncomplete => "the other side's copy is not complete".into(),
            Unsafe::CopyInexact => "the other side is a copy-only copy (it kept some of its older keys) that no bot started: deleting its source would lose the newer values".into(),
            Unsafe::OtherDeleted => "the other side was deleted: this side holds the only copy".into(),
            Unsafe::UnreadableRecord { key, detail } => format!("the lifecycle record {key} cannot be read ({detail})"),
        }
    }

    /// What the operator can do instead, for `step`.
    pub fn advice(&self, step: StepKind) -> &'static str {
        match (self, step) {
            (Unsafe::TargetLive, StepKind::Migrate) => "if the bots run on the cluster side now, delete the legacy side with a cleanup (`botmesh-redis cleanup --layout legacy`); to bring them back to the legacy side, roll back from the cluster side",
            (Unsafe::TargetLive, StepKind::Rollback) => "if the bots run on the legacy side now, delete the cluster side with a cleanup (`botmesh-redis cleanup --layout cluster`); to move them to the cluster again, migrate from the legacy side",
            (Unsafe::TargetLive, StepKind::Cleanup) | (Unsafe::SideLive, _) => "the side holds the bots' newest data: delete the other side instead, or copy this one over it first",
            (Unsafe::BothLive, _) => "stop the bots, decide which side's writes to keep, and reconcile by hand; docs/migration.md (\"Both sides live\") shows how to record the choice",
            (Unsafe::TargetMayBeLive, _) => "check that no bot uses the target; if its data is a leftover, delete it by hand (docs/migration.md, \"A target without a record\"), or copy into a fresh prefix",
            (Unsafe::SourceIsCopy, _) => "start the bots on the side that holds the data, or on this copy (their start records it), then take the step from the side they run on",
            (Unsafe::SourceIncomplete, _) => "finish the copy into the source first (rerun it), or take the step from the side that holds the data",
            (Unsafe::SourceDeleted, _) => "finish the cleanup (`botmesh-redis cleanup`); the data is on the other side",
            (Unsafe::SourceMayBeStale, _) => "take the step against the keyspace the record names as the copy's other side; if the bots run on this side, start them here once (their start records it)",
            (Unsafe::NotPartners, _) => "check the prefixes and servers: name the two keyspaces of one migration",
            (Unsafe::SiblingInUse, _) => "if the bots left that keyspace, delete it first (`botmesh-redis cleanup`); else copy into another prefix",
            (Unsafe::NoCopy, _) | (Unsafe::CopyIncomplete, _) => "finish the copy first (rerun it); the cleanup waits for a complete copy",
            (Unsafe::CopyInexact, _) => "start the bots on the copy first, or rerun the copy as a mirror",
            (Unsafe::OtherDeleted, _) => "keep this side: it holds the only copy of the data",
            (Unsafe::UnreadableRecord { .. }, _) => "inspect the record (`HGETALL`); docs/migration.md describes its fields",
        }
    }

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
}

/// The copy both records are about, if they are the two sides of one copy. A step writes the
/// target's record of a new copy before the source's, so a step killed between the two leaves a
/// target one copy ahead, still copying: it is recognised by its `prev`, and the source is read
/// as if its record had been written.
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
    if a.phase == Phase::Copying && a.prev == Some(b.copy) {
        return Some((a.clone(), caught_up(a, b)));
    }
    if b.phase == Phase::Copying && b.prev == Some(a.copy) {
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
        // A first copy killed after the target's record and before the source's: the target
        // says it had no record before (no `prev`) and is still copying, so it holds part of
        // this copy at most, and no bot started on it.
        if let Some(t) =
            t.filter(|t| t.role == Role::Target && t.phase == Phase::Copying && t.prev.is_none())
        {
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
        let table: Vec<(&str, View, View, Result<CopyId, Unsafe>)> = vec![
            ("first migration", legacy(None), cluster(None), Ok(CopyId::New)),
            ("into a cluster keyspace no copy made", legacy(None), marked.clone(), Err(Unsafe::TargetMayBeLive)),
            ("into a cluster keyspace bots created", legacy(None), cluster(Some(Record::origin(5))), Err(Unsafe::TargetLive)),
            ("rerun of a complete copy", legacy(Some(rec(K1, Source, Complete))), cluster(Some(rec(K1, Target, Complete))), Ok(CopyId::Resume(K1))),
            ("rerun of a killed copy", legacy(Some(rec(K1, Source, Copying))), cluster(Some(rec(K1, Target, Copying))), Ok(CopyId::Resume(K1))),
            ("killed between the two records", legacy(Some(started(rec(K1, Source, Complete), K1))), cluster(Some(ahead.clone())), Ok(CopyId::Resume(K2))),
            ("first copy killed between the two records", legacy(None), cluster(Some(rec(K1, Target, Copying))), Ok(CopyId::Resume(K1))),
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
