//! Moving a keyspace between the two layouts: inspection, the forward migration
//! (`legacy` → `cluster:v1`), the rollback (`cluster:v1` → `legacy`), and the cleanup that
//! deletes the side the bots left.
//!
//! All four are written once over any [`Executor`](crate::Executor), like the store's API,
//! and send nothing but the requests built here: `SCAN` pages, one read script per batch of
//! keys ([`MIGRATE_READ`]) and one write script per group of keys that share a slot at the
//! target. Memory stays bounded whatever the keyspace size: one `SCAN` page at a time, message
//! logs in pages of 1000, and at most [`CHAT_WAVE`] logs in flight.
//!
//! Each side keeps a lifecycle record ([`lifecycle`]): every copy and every bot start updates
//! it, so a step taken days after the last one knows which side the bots write, and refuses
//! what would bring back deleted data or destroy newer writes.
//!
//! `docs/migration.md` is the operator's guide and states every rule; in short:
//!
//! - a copy goes only from the live side into a side no bot started on since its last copy,
//!   and by default mirrors: the target ends up holding what the source holds, no more;
//! - messages are read from each chat's log, never by parsing item keys; an item no log (or
//!   drain) names is an orphan, reported and left alone;
//! - records and user data keep their remaining TTL; checkpoint and user-data index scores are
//!   computed from the target server's clock;
//! - lock fences and leadership terms are only ever raised, never pruned; schedule tokens never
//!   go backwards (a higher source token wins even without `overwrite`);
//! - turn queues, lock and leadership holders and heartbeats belong to running bots and are not
//!   copied; conversations, cursors, leases and durability tables keep their names and are copied
//!   only to another server or prefix;
//! - a run killed at any point and run again ends with the same keyspace;
//! - the layout marker is written last, and only by a complete run;
//! - deleting a side is its own step ([`delete_abandoned_side`]), which only deletes.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::keys::{Layout, RecordKind};
use crate::scripts::{
    MIGRATE_COUNTERS, MIGRATE_LEASE, MIGRATE_MEMBERS, MIGRATE_MESSAGES, MIGRATE_READ,
    MIGRATE_RESTORE, MIGRATE_SCHEDULES, MIGRATE_STRINGS,
};

mod cleanup;
mod copy;
mod engine;
mod forward;
mod inspect;
pub mod lifecycle;
mod messages;
pub mod names;
mod owners;
mod pair;
mod prune;
mod records;
mod rollback;
mod sides;
mod step;

pub use cleanup::delete_abandoned_side;
pub use forward::migrate_to_cluster_layout;
pub use inspect::inspect_keyspace;
pub use rollback::rollback_to_legacy_layout;

/// At most this many message logs are migrated at once (each in pages of 1000 messages): a
/// wave's three round trips (log pages, items, writes) carry this many chats each.
pub const CHAT_WAVE: usize = 128;

/// What a key holds, for counting and for choosing what to copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Namespace {
    /// Message logs (inspect: one per chat with messages) and messages (migration: one per log
    /// member copied with its item).
    Messages,
    /// Message items (inspect only: the migration counts them as messages).
    Items,
    /// Logs of an interrupted `delete_chat` (inspect), and their messages (migration).
    Drains,
    /// Chat records.
    Chats,
    /// Contact records.
    Contacts,
    /// Checkpoints.
    Checkpoints,
    /// Schedules, deleted markers included.
    Schedules,
    /// Bucket and user-data indexes (cluster layout; rebuilt, never copied).
    Indexes,
    /// User-data entries (`ctx.user`).
    UserData,
    /// Lock holders.
    Locks,
    /// Lock fences.
    Fences,
    /// Turn queue keys.
    Turns,
    /// Leadership holders.
    Leaderships,
    /// Leadership terms.
    Terms,
    /// Replica heartbeats.
    Heartbeats,
    /// Conversation states.
    Conversations,
    /// Cursors.
    Cursors,
    /// Leases.
    Leases,
    /// Durability table keys.
    Durability,
    /// The layout marker and the lifecycle records (the `{meta}` keys).
    Marker,
    /// Keys under the prefix that are no name of the layout.
    Unknown,
}

impl Namespace {
    /// Every namespace, in report order.
    pub const ALL: [Namespace; 21] = [
        Namespace::Messages,
        Namespace::Items,
        Namespace::Drains,
        Namespace::Chats,
        Namespace::Contacts,
        Namespace::Checkpoints,
        Namespace::Schedules,
        Namespace::Indexes,
        Namespace::UserData,
        Namespace::Locks,
        Namespace::Fences,
        Namespace::Turns,
        Namespace::Leaderships,
        Namespace::Terms,
        Namespace::Heartbeats,
        Namespace::Conversations,
        Namespace::Cursors,
        Namespace::Leases,
        Namespace::Durability,
        Namespace::Marker,
        Namespace::Unknown,
    ];

    /// The namespaces a migration copies (the ones `include` chooses from).
    pub const COPIED: [Namespace; 12] = [
        Namespace::Messages,
        Namespace::Chats,
        Namespace::Contacts,
        Namespace::Checkpoints,
        Namespace::Schedules,
        Namespace::UserData,
        Namespace::Fences,
        Namespace::Terms,
        Namespace::Conversations,
        Namespace::Cursors,
        Namespace::Leases,
        Namespace::Durability,
    ];

    /// The name used in reports and on the command line (`user-data`, `fences`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Namespace::Messages => "messages",
            Namespace::Items => "items",
            Namespace::Drains => "drains",
            Namespace::Chats => "chats",
            Namespace::Contacts => "contacts",
            Namespace::Checkpoints => "checkpoints",
            Namespace::Schedules => "schedules",
            Namespace::Indexes => "indexes",
            Namespace::UserData => "user-data",
            Namespace::Locks => "locks",
            Namespace::Fences => "fences",
            Namespace::Turns => "turns",
            Namespace::Leaderships => "leaderships",
            Namespace::Terms => "terms",
            Namespace::Heartbeats => "heartbeats",
            Namespace::Conversations => "conversations",
            Namespace::Cursors => "cursors",
            Namespace::Leases => "leases",
            Namespace::Durability => "durability",
            Namespace::Marker => "marker",
            Namespace::Unknown => "unknown",
        }
    }

    /// The namespace of a record kind.
    pub fn of_record(kind: RecordKind) -> Namespace {
        match kind {
            RecordKind::Chat => Namespace::Chats,
            RecordKind::Contact => Namespace::Contacts,
            RecordKind::Checkpoint => Namespace::Checkpoints,
            RecordKind::Schedule => Namespace::Schedules,
        }
    }

    /// The namespace of a key name (drains count as their own namespace).
    pub fn of(name: &names::Name) -> Namespace {
        use names::Name;
        match name {
            Name::Log { .. } => Namespace::Messages,
            Name::Drain { .. } => Namespace::Drains,
            Name::LegacyItem { .. } | Name::Item { .. } => Namespace::Items,
            Name::Record { kind, .. } => Namespace::of_record(*kind),
            Name::RecordIndex { .. } | Name::UserIndex { .. } => Namespace::Indexes,
            Name::UserEntry { .. } => Namespace::UserData,
            Name::LockHolder { .. } => Namespace::Locks,
            Name::Fence { .. } => Namespace::Fences,
            Name::Turn { .. } => Namespace::Turns,
            Name::LeaderHolder { .. } => Namespace::Leaderships,
            Name::Term { .. } => Namespace::Terms,
            Name::Heartbeat => Namespace::Heartbeats,
            Name::Conversation => Namespace::Conversations,
            Name::Cursor => Namespace::Cursors,
            Name::Lease => Namespace::Leases,
            Name::Durable { .. } => Namespace::Durability,
            Name::Marker | Name::Lifecycle { .. } => Namespace::Marker,
            Name::Unknown => Namespace::Unknown,
        }
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Namespace {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Namespace::ALL
            .into_iter()
            .find(|n| n.name() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Namespace::COPIED.iter().map(|n| n.name()).collect();
                format!("unknown namespace {s:?}; known: {}", known.join(", "))
            })
    }
}

pub use crate::error::Refusal;

/// Per namespace: what happened to the source's keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Copied to a target that did not hold them.
    pub copied: u64,
    /// Left as they were, because the target already held them (an existing key wins), or,
    /// for counters, held an equal or higher value.
    pub kept: u64,
    /// Replaced at the target (`overwrite`, a higher schedule token, a raised counter).
    pub overwritten: u64,
    /// Deleted from the target by a mirroring rollback, because the source no longer holds them
    /// (schedules: turned into deleted markers).
    pub pruned: u64,
}

impl Counts {
    fn add(&mut self, code: i64) {
        match code {
            0 => self.kept += 1,
            1 => self.copied += 1,
            _ => self.overwritten += 1,
        }
    }
}

/// What happened to the layout marker.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MarkerOutcome {
    /// Written (`cluster:v1`) by this complete run.
    Written,
    /// Already there.
    AlreadySet,
    /// Not written: `include` left namespaces out, so the start guard stays armed.
    NotWrittenPartial,
    /// Not written: a dry run.
    NotWrittenDryRun,
    /// Removed by this complete rollback.
    Removed,
    /// A rollback found none to remove.
    Absent,
    /// Kept by a rollback that was not complete (dry run, or data the legacy layout cannot hold).
    Kept,
}

impl fmt::Display for MarkerOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MarkerOutcome::Written => "written",
            MarkerOutcome::AlreadySet => "already set",
            MarkerOutcome::NotWrittenPartial => "not written (include limited the run)",
            MarkerOutcome::NotWrittenDryRun => "not written (dry run)",
            MarkerOutcome::Removed => "removed",
            MarkerOutcome::Absent => "absent",
            MarkerOutcome::Kept => "kept (dry run or incomplete rollback)",
        })
    }
}

/// Keys kept as examples in a report, per kind of problem.
pub const EXAMPLES: usize = 10;

/// The report of a migration or a rollback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationReport {
    /// `legacy` → `cluster` for a migration, `cluster` → `legacy` for a rollback.
    pub from: Layout,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// Keys seen under the source prefix.
    pub scanned: u64,
    /// Per copied namespace.
    pub namespaces: BTreeMap<Namespace, Counts>,
    /// Keys not copied by design (turn queues, holders, heartbeats; in place: the names both
    /// layouts share), per namespace.
    pub not_copied: BTreeMap<Namespace, u64>,
    /// Message items that no log or drain names (left alone).
    pub orphans: u64,
    /// Message items whose key reads first as one chat's but that a longer chat id's log names
    /// (copied to that chat).
    pub foreign_items: u64,
    /// Message items named by two logs (the legacy layout's historical collision), copied to
    /// each.
    pub shared_items: u64,
    /// Log members whose item is missing (not copied: there is no message to copy).
    pub dangling: u64,
    /// Keys that could not be read as their namespace's type (wrong type, bad token).
    pub unreadable: u64,
    /// Data the target layout cannot hold (a rollback: a `:` in a user id or namespace, two
    /// messages on one legacy item key with different values). Not copied.
    pub unrepresentable: u64,
    /// Keys under the prefix that are no name of the source layout.
    pub unknown: u64,
    /// Keys of the target layout found under the source prefix (an in-place run sees what it
    /// wrote), skipped.
    pub target_layout: u64,
    /// Up to [`EXAMPLES`] keys per problem (orphans, unreadable, unrepresentable, unknown).
    pub examples: BTreeMap<&'static str, Vec<String>>,
    /// Source keys deleted after the copy completed (`delete_source`: the cleanup of the
    /// source, which deletes only; a log counts its items and itself).
    pub source_deleted: u64,
    /// The copy this run made: a rerun of the one both lifecycle records name, or a new one
    /// (`docs/migration.md`, "The lifecycle").
    pub copy: lifecycle::CopyId,
    /// Whether the run mirrored: existing target keys that differ were replaced and target
    /// data the source no longer holds was removed (`pruned`).
    pub mirrored: bool,
    /// The layout marker.
    pub marker: MarkerOutcome,
    /// Wall time of the run, on the source server's clock (`TIME` at the start and the end:
    /// the core has no clock of its own).
    pub elapsed: Duration,
}

impl MigrationReport {
    fn new(from: Layout, dry_run: bool) -> Self {
        MigrationReport {
            from,
            dry_run,
            scanned: 0,
            namespaces: BTreeMap::new(),
            not_copied: BTreeMap::new(),
            orphans: 0,
            foreign_items: 0,
            shared_items: 0,
            dangling: 0,
            unreadable: 0,
            unrepresentable: 0,
            unknown: 0,
            target_layout: 0,
            examples: BTreeMap::new(),
            source_deleted: 0,
            copy: lifecycle::CopyId::New,
            mirrored: false,
            marker: MarkerOutcome::Kept,
            elapsed: Duration::ZERO,
        }
    }

    /// An empty report of the same run, for a part of it that runs concurrently.
    fn part(&self) -> Self {
        MigrationReport::new(self.from, self.dry_run)
    }

    /// Adds the counts of a part.
    fn absorb(&mut self, part: MigrationReport) {
        self.scanned += part.scanned;
        for (ns, c) in part.namespaces {
            let mine = self.counts(ns);
            mine.copied += c.copied;
            mine.kept += c.kept;
            mine.overwritten += c.overwritten;
            mine.pruned += c.pruned;
        }
        for (ns, n) in part.not_copied {
            *self.not_copied.entry(ns).or_default() += n;
        }
        self.orphans += part.orphans;
        self.foreign_items += part.foreign_items;
        self.shared_items += part.shared_items;
        self.dangling += part.dangling;
        self.unreadable += part.unreadable;
        self.unrepresentable += part.unrepresentable;
        self.unknown += part.unknown;
        self.target_layout += part.target_layout;
        self.source_deleted += part.source_deleted;
        for (what, keys) in part.examples {
            for key in keys {
                self.example(what, key.as_bytes());
            }
        }
    }

    fn counts(&mut self, ns: Namespace) -> &mut Counts {
        self.namespaces.entry(ns).or_default()
    }

    fn example(&mut self, what: &'static str, key: &[u8]) {
        let list = self.examples.entry(what).or_default();
        if list.len() < EXAMPLES {
            list.push(String::from_utf8_lossy(key).into_owned());
        }
    }

    /// Whether every key of the source reached the target: none it could not represent, none
    /// unreadable (a payload the target refused, a source key that could not be read). A run
    /// that is not exact keeps its source, whatever `delete_source` asked.
    pub fn is_exact(&self) -> bool {
        self.unrepresentable == 0 && self.unreadable == 0
    }

    /// Counts a key that could not be read (or written) as its namespace's type.
    fn unreadable_key(&mut self, key: &[u8]) {
        self.unreadable += 1;
        self.example("unreadable", key);
    }

    /// Total keys copied, kept or overwritten.
    pub fn moved(&self) -> u64 {
        self.namespaces
            .values()
            .map(|c| c.copied + c.kept + c.overwritten)
            .sum()
    }
}

/// Progress of a long run, reported after every `SCAN` page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Keys seen so far.
    pub scanned: u64,
    /// Keys in the source databases when the run began (`DBSIZE` of every node scanned): the
    /// upper bound of `scanned` for a keyspace that does not grow.
    pub total: u64,
    /// Records and messages handled so far (copied, kept or overwritten).
    pub moved: u64,
    /// The phase: `scanning` (inspection), `checking`, `pruning` (a mirror), `copying`,
    /// `deleting` (a cleanup, or `delete_source`).
    pub phase: &'static str,
}

/// Options of [`migrate_to_cluster_layout`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrateOptions {
    /// The source's prefix (legacy layout).
    pub prefix: String,
    /// The target's prefix; `None`: the same prefix.
    pub target_prefix: Option<String>,
    /// Whether the target is another server than the source. `None` (the default): the
    /// migration finds out (a cluster is always another server; two single nodes are one
    /// server exactly when `INFO server` gives one `run_id`); a value that contradicts the
    /// servers is refused ([`Refusal::OtherServerMismatch`]).
    pub other_server: Option<bool>,
    /// Make the target match the source (default): existing target keys that differ are
    /// replaced, and target data the source no longer holds is removed. The lifecycle only
    /// lets a copy into a side no bot started on since its last copy, so what a mirror
    /// replaces or removes there is stale, never newer. `false`: copy only, existing target
    /// keys win unless `overwrite`.
    pub mirror: bool,
    /// Count what would happen; write nothing.
    pub dry_run: bool,
    /// Only these namespaces (of [`Namespace::COPIED`]); `None`: all. A limited run leaves the
    /// layout marker unset.
    pub include: Option<Vec<Namespace>>,
    /// With `mirror: false`, replace existing target keys (counters are still only raised).
    pub overwrite: bool,
    /// Run although heartbeats or pending tickets show live bots. Unsafe: see
    /// `docs/migration.md`.
    pub allow_live: bool,
    /// Once the copy is complete, delete the source ([`delete_abandoned_side`] on it: it
    /// deletes only). Needs the mirror and a complete run.
    pub delete_source: bool,
    /// `SCAN COUNT` hint (default 2000).
    pub scan_count: u32,
}

impl MigrateOptions {
    /// An in-place migration of `prefix`, with every default.
    pub fn new(prefix: impl Into<String>) -> Self {
        MigrateOptions {
            prefix: prefix.into(),
            target_prefix: None,
            other_server: None,
            mirror: true,
            dry_run: false,
            include: None,
            overwrite: false,
            allow_live: false,
            delete_source: false,
            scan_count: 2000,
        }
    }

    /// The target's prefix.
    pub fn target_prefix(&self) -> &str {
        self.target_prefix.as_deref().unwrap_or(&self.prefix)
    }
}

/// Options of [`rollback_to_legacy_layout`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollbackOptions {
    /// The source's prefix (cluster layout).
    pub prefix: String,
    /// The target's prefix (legacy layout); `None`: the same prefix.
    pub target_prefix: Option<String>,
    /// Whether the target is another server than the source; `None` (the default): the
    /// rollback finds out, as [`MigrateOptions::other_server`].
    pub other_server: Option<bool>,
    /// Make the legacy target match the source (default): records overwrite, and legacy
    /// records the source no longer holds are deleted (schedules become deleted markers).
    /// `false`: copy only, existing legacy keys win.
    pub mirror: bool,
    /// Count what would happen; write nothing.
    pub dry_run: bool,
    /// Once the rollback is complete, delete the cluster-layout source
    /// ([`delete_abandoned_side`] on it: it deletes only). Needs the mirror.
    pub delete_source: bool,
    /// Run although heartbeats or pending tickets show live bots. Unsafe: see
    /// `docs/migration.md`.
    pub allow_live: bool,
    /// `SCAN COUNT` hint (default 2000).
    pub scan_count: u32,
}

impl RollbackOptions {
    /// A mirroring rollback of `prefix` into the same prefix.
    pub fn new(prefix: impl Into<String>) -> Self {
        RollbackOptions {
            prefix: prefix.into(),
            target_prefix: None,
            other_server: None,
            mirror: true,
            dry_run: false,
            delete_source: false,
            allow_live: false,
            scan_count: 2000,
        }
    }

    /// The target's prefix.
    pub fn target_prefix(&self) -> &str {
        self.target_prefix.as_deref().unwrap_or(&self.prefix)
    }
}

/// Options of [`delete_abandoned_side`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CleanupOptions {
    /// The prefix of the side to delete.
    pub prefix: String,
    /// The layout of the side to delete.
    pub layout: Layout,
    /// The other side's prefix; `None`: the same prefix.
    pub other_prefix: Option<String>,
    /// Whether the other side is on another server; `None` (the default): the cleanup finds
    /// out, as [`MigrateOptions::other_server`]. In place (one server, one prefix) the names
    /// both layouts share are the live side's too, and are never deleted.
    pub other_server: Option<bool>,
    /// Count what would be deleted; delete nothing.
    pub dry_run: bool,
    /// Run although pending tickets (or, on another server, heartbeats) show bots running on
    /// the side to delete. Unsafe.
    pub allow_live: bool,
    /// `SCAN COUNT` hint (default 2000).
    pub scan_count: u32,
}

impl CleanupOptions {
    /// Deletes the `layout` side of `prefix`, the other side being the other layout of the
    /// same prefix (in place, or on the server given to [`delete_abandoned_side`]).
    pub fn new(prefix: impl Into<String>, layout: Layout) -> Self {
        CleanupOptions {
            prefix: prefix.into(),
            layout,
            other_prefix: None,
            other_server: None,
            dry_run: false,
            allow_live: false,
            scan_count: 2000,
        }
    }

    /// The other side's prefix.
    pub fn other_prefix(&self) -> &str {
        self.other_prefix.as_deref().unwrap_or(&self.prefix)
    }
}

/// What [`delete_abandoned_side`] deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CleanupReport {
    /// The layout of the deleted side.
    pub layout: Layout,
    /// Whether nothing was deleted.
    pub dry_run: bool,
    /// Keys seen under the prefix.
    pub scanned: u64,
    /// Keys deleted (or that a dry run would delete), per namespace; a message log counts
    /// its items under [`Namespace::Items`].
    pub deleted: BTreeMap<Namespace, u64>,
    /// Message items that no log or drain names: never copied, so left for the operator.
    pub orphans: u64,
    /// Keys under the prefix that are no name of the layout: left alone.
    pub unknown: u64,
    /// Keys both layouts share, left because the other side is in place and uses them.
    pub shared_kept: u64,
    /// Up to [`EXAMPLES`] keys per kind left (`orphans`, `unknown`).
    pub examples: BTreeMap<&'static str, Vec<String>>,
    /// Wall time, on the deleted side's server clock.
    pub elapsed: Duration,
}

impl CleanupReport {
    fn new(layout: Layout, dry_run: bool) -> Self {
        CleanupReport {
            layout,
            dry_run,
            scanned: 0,
            deleted: BTreeMap::new(),
            orphans: 0,
            unknown: 0,
            shared_kept: 0,
            examples: BTreeMap::new(),
            elapsed: Duration::ZERO,
        }
    }

    /// Keys deleted in all.
    pub fn total(&self) -> u64 {
        self.deleted.values().sum()
    }
}

/// Counts of one layout's keys, per namespace.
pub type NamespaceCounts = BTreeMap<Namespace, u64>;

/// What [`inspect_keyspace`] found under a prefix.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyspaceReport {
    /// The prefix.
    pub prefix: String,
    /// The nodes scanned: `standalone`, or each master's address.
    pub nodes: Vec<String>,
    /// Keys of the legacy layout, per namespace.
    pub legacy: NamespaceCounts,
    /// Keys of the cluster layout, per namespace.
    pub cluster: NamespaceCounts,
    /// Keys both layouts share (heartbeats, conversations, cursors, leases, durability tables,
    /// the marker), per namespace.
    pub shared: NamespaceCounts,
    /// Keys under the prefix that are no name of either layout.
    pub unknown: u64,
    /// Up to [`EXAMPLES`] unknown keys.
    pub unknown_examples: Vec<String>,
    /// The layout marker's value, if any.
    pub marker: Option<String>,
    /// Each layout's lifecycle record under the prefix (`docs/migration.md`, "The lifecycle"):
    /// which copy the side took part in, and whether bots started on it since
    /// ([`lifecycle::Record::describe`] says it in words). An unreadable record is its error.
    pub lifecycle: BTreeMap<Layout, Result<lifecycle::Record, String>>,
    /// Keys per node and namespace (both layouts and shared names together).
    pub per_node: BTreeMap<String, NamespaceCounts>,
    /// The hash tags holding the most keys, most first (at most 10). Counted with a bounded
    /// summary (Misra-Gries, 1024 counters), so the counts are lower bounds when there are
    /// more tags than that.
    pub hot_tags: Vec<(String, u64)>,
    /// Keys scanned.
    pub scanned: u64,
    /// Keys a cluster-layout store's `start()` guard takes for legacy-layout data (every key
    /// under the prefix but the cluster layout's and the shared names: unknown keys too), and
    /// up to [`EXAMPLES`] of them. Without a marker, the guard refuses any of them.
    pub guard_legacy: u64,
    /// Examples of [`guard_legacy`](Self::guard_legacy).
    pub guard_examples: Vec<String>,
}

impl KeyspaceReport {
    /// Whether the prefix holds legacy-layout keys (what the start guard refuses).
    pub fn has_legacy_data(&self) -> bool {
        self.legacy.values().any(|n| *n > 0)
    }
}
