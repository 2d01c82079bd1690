//! The copy pass both directions share: one `SCAN` page of the source at a time, read in
//! batches, written in groups that share a slot at the target. A mirror's copy replaces what
//! differs and removes the target's counterpart of a source key that went away since the scan
//! (a key that expired, a message whose item is gone): the prune pass before it could not know.

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::{Key, Keyspace, Layout, RecordKind};

use super::engine::{dbsize, scan_page, Mode};
use super::names::{self, Name};
use super::pair::{renamed, Pair, Settings};
use super::records::Job;
use super::{MigrationReport, Namespace, Progress};

/// The copy pass: the two sides, what it does, and the report it fills.
pub(super) struct Copier<'a, S, T> {
    pub pair: Pair<'a, S, T>,
    pub settings: Settings,
    /// The target's layout under the source prefix, to recognise what an in-place run wrote.
    pub own_other: Option<Keyspace>,
    pub report: MigrationReport,
}

impl<S: Executor, T: Executor> Copier<'_, S, T> {
    /// A mirror's prune pass over the target's `nodes`; yields how many target keys it checked.
    pub(super) async fn prune(
        &mut self,
        nodes: &[Option<String>],
        scan_count: u32,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<u64, Error> {
        let mut pruned = self.report.part();
        let checked = self
            .pair
            .prune(&self.settings, nodes, scan_count, &mut pruned, progress)
            .await;
        self.report.absorb(pruned);
        checked
    }

    /// The copy pass over every master of the source: each `SCAN` page is copied while the next
    /// is read.
    pub(super) async fn copy_all(
        &mut self,
        nodes: &[Option<String>],
        scan_count: u32,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<(), Error> {
        let source = self.pair.source;
        let total = dbsize(source, nodes).await?;
        let pattern = self.pair.src.prefix_pattern();
        for node in nodes {
            let start = Bytes::from_static(b"0");
            let mut page = scan_page(source, node, &start, &pattern, scan_count).await?;
            loop {
                let (next, keys) = std::mem::take(&mut page);
                let last = next.as_ref() == b"0";
                if last {
                    self.page(keys).await?;
                } else {
                    let (copied, fetched) = futures_util::future::join(
                        self.page(keys),
                        scan_page(source, node, &next, &pattern, scan_count),
                    )
                    .await;
                    copied?;
                    page = fetched?;
                }
                progress(&Progress {
                    scanned: self.report.scanned,
                    total,
                    moved: self.report.moved(),
                    phase: "copying",
                });
                if last {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Copies one `SCAN` page of source keys.
    pub(super) async fn page(&mut self, keys: Vec<Bytes>) -> Result<(), Error> {
        let mut reads: Vec<(Key, Mode)> = Vec::new();
        let mut jobs: Vec<Job> = Vec::new();
        let mut logs: Vec<(String, bool)> = Vec::new();
        let mut items: Vec<(Bytes, Name)> = Vec::new();
        let (src, tgt) = (&self.pair.src, &self.pair.tgt);
        for key in keys {
            let sorted = sort(src, tgt, &self.settings, self.own_other.as_ref(), &key);
            let report = &mut self.report;
            if !matches!(sorted, Sorted::Bookkeeping) {
                report.scanned += 1;
            }
            match sorted {
                Sorted::Bookkeeping | Sorted::Excluded => {}
                Sorted::TargetLayout => report.target_layout += 1,
                Sorted::Unknown => {
                    report.unknown += 1;
                    report.example("unknown", &key);
                }
                Sorted::NotCopied(ns) => *report.not_copied.entry(ns).or_default() += 1,
                Sorted::Unrepresentable => {
                    report.unrepresentable += 1;
                    report.example("unrepresentable", &key);
                }
                Sorted::Log { chat, drain } => logs.push((chat, drain)),
                Sorted::Item(name) => items.push((key, name)),
                Sorted::Read(mode, job) => {
                    reads.push((Key::new(key), mode));
                    jobs.push(job);
                }
            }
        }
        // Records, the owners of items, and message logs are independent: they run together.
        let (mut records, mut owners, mut messages) =
            (self.report.part(), self.report.part(), self.report.part());
        let (copied, checked, moved) = futures_util::future::join3(
            self.pair.copy(&self.settings, &mut records, reads, jobs),
            self.pair.check_items(&mut owners, items),
            self.pair.messages(&self.settings, &mut messages, logs),
        )
        .await;
        for part in [records, owners, messages] {
            self.report.absorb(part);
        }
        copied?;
        checked?;
        moved
    }
}

/// What the copy pass does with one source key, from its name alone.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Sorted {
    /// The steps' own bookkeeping (written by this very run): not even counted as scanned.
    Bookkeeping,
    /// A key of the target's layout under the source prefix: an in-place run sees what it
    /// wrote.
    TargetLayout,
    /// No name of the source layout.
    Unknown,
    /// Not copied by design (the marker, heartbeats, holders, turn queues, indexes; in place,
    /// the names both layouts share), counted per namespace.
    NotCopied(Namespace),
    /// A datum the target layout cannot hold: its name would read back differently.
    Unrepresentable,
    /// Left out by `include`.
    Excluded,
    /// A message log (or drain), copied with its items.
    Log { chat: String, drain: bool },
    /// A message item, whose owners are checked (orphans are left alone).
    Item(Name),
    /// A key to read this way, and what it becomes at the target.
    Read(Mode, Job),
}

/// Sorts a source key of `src` for a copy into `tgt`. `own_other`: the target's layout under
/// the source prefix (see [`Copier::own_other`]).
pub(super) fn sort(
    src: &Keyspace,
    tgt: &Keyspace,
    settings: &Settings,
    own_other: Option<&Keyspace>,
    key: &[u8],
) -> Sorted {
    let name = names::of(src, key);
    if matches!(name, Name::Lifecycle { .. }) {
        return Sorted::Bookkeeping;
    }
    if own_other.is_some_and(|other| names::is_own(other, key)) {
        return Sorted::TargetLayout;
    }
    let ns = Namespace::of(&name);
    match &name {
        Name::Unknown => return Sorted::Unknown,
        Name::Marker
        | Name::Heartbeat
        | Name::LockHolder { .. }
        | Name::LeaderHolder { .. }
        | Name::Turn { .. }
        | Name::RecordIndex { .. }
        | Name::UserIndex { .. } => return Sorted::NotCopied(ns),
        Name::Conversation | Name::Cursor | Name::Lease | Name::Durable { .. }
            if !settings.separate =>
        {
            return Sorted::NotCopied(ns)
        }
        Name::UserEntry {
            user, ns: space, ..
        } if tgt.layout() == Layout::Legacy && (user.contains(':') || space.contains(':')) => {
            return Sorted::Unrepresentable
        }
        _ if !settings.includes(ns) => return Sorted::Excluded,
        _ => {}
    }
    let shared = || renamed(key, src.prefix(), tgt.prefix());
    let read = |mode, job| Sorted::Read(mode, job);
    match name {
        Name::Log { chat } => Sorted::Log { chat, drain: false },
        Name::Drain { chat } => Sorted::Log { chat, drain: true },
        item @ (Name::LegacyItem { .. } | Name::Item { .. }) => Sorted::Item(item),
        Name::Record { kind, id } => {
            let mode = match kind {
                RecordKind::Schedule => Mode::Hash,
                _ => Mode::String,
            };
            read(mode, Job::Record { kind, id })
        }
        Name::UserEntry { user, ns, key } => read(Mode::String, Job::User { user, ns, key }),
        Name::Fence { key } => read(
            Mode::String,
            Job::Counter(Namespace::Fences, tgt.lock_fence(&key)),
        ),
        Name::Term { name } => read(
            Mode::String,
            Job::Counter(Namespace::Terms, tgt.leader_term(&name)),
        ),
        Name::Cursor if settings.mirror => read(Mode::String, Job::Cursor(shared())),
        Name::Cursor => read(Mode::String, Job::Counter(Namespace::Cursors, shared())),
        Name::Conversation | Name::Durable { .. } => read(Mode::Dump, Job::Restore(ns, shared())),
        Name::Lease => read(Mode::Hash, Job::Lease(shared())),
        // Every other name returned above.
        _ => Sorted::NotCopied(ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(separate: bool, mirror: bool, include: Option<Vec<Namespace>>) -> Settings {
        Settings {
            mirror,
            overwrite: false,
            dry_run: false,
            separate,
            include,
        }
    }

    /// A migration of `p` into `q`: the source, the target, and the target's layout under `p`.
    fn forward() -> (Keyspace, Keyspace, Keyspace) {
        (
            Keyspace::new(Layout::Legacy, "p").unwrap(),
            Keyspace::new(Layout::Cluster, "q").unwrap(),
            Keyspace::new(Layout::Cluster, "p").unwrap(),
        )
    }

    #[test]
    fn a_legacy_page_sorts_into_reads_logs_items_and_what_is_left() {
        let (src, tgt, own) = forward();
        let all = settings(true, true, None);
        let sort = |key: &Key, s: &Settings| sort(&src, &tgt, s, Some(&own), key.as_bytes());
        assert_eq!(
            sort(&src.record(RecordKind::Chat, "a:b"), &all),
            Sorted::Read(
                Mode::String,
                Job::Record {
                    kind: RecordKind::Chat,
                    id: "a:b".into()
                }
            )
        );
        assert_eq!(
            sort(&src.record(RecordKind::Schedule, "s"), &all),
            Sorted::Read(
                Mode::Hash,
                Job::Record {
                    kind: RecordKind::Schedule,
                    id: "s".into()
                }
            )
        );
        assert_eq!(
            sort(&src.message_log("c"), &all),
            Sorted::Log {
                chat: "c".into(),
                drain: false
            }
        );
        assert!(matches!(
            sort(&src.message_item_raw("c", b"m"), &all),
            Sorted::Item(Name::LegacyItem { .. })
        ));
        assert_eq!(
            sort(&src.lock_fence("k"), &all),
            Sorted::Read(
                Mode::String,
                Job::Counter(Namespace::Fences, tgt.lock_fence("k"))
            )
        );
    }

    #[test]
    fn shared_names_go_only_to_another_server_or_prefix_under_its_prefix() {
        let (src, tgt, own) = forward();
        let all = settings(true, true, None);
        let sort = |key: &Key, s: &Settings| sort(&src, &tgt, s, Some(&own), key.as_bytes());
        assert_eq!(
            sort(&src.cursor("x"), &all),
            Sorted::Read(Mode::String, Job::Cursor(Key::new("q:cursor:x")))
        );
        let copy_only = settings(true, false, None);
        assert_eq!(
            sort(&src.cursor("x"), &copy_only),
            Sorted::Read(
                Mode::String,
                Job::Counter(Namespace::Cursors, Key::new("q:cursor:x"))
            )
        );
        let in_place = settings(false, true, None);
        assert_eq!(
            sort(&src.cursor("x"), &in_place),
            Sorted::NotCopied(Namespace::Cursors)
        );
        assert_eq!(
            sort(&src.conversation("c"), &all),
            Sorted::Read(
                Mode::Dump,
                Job::Restore(Namespace::Conversations, tgt.conversation("c"))
            )
        );
        assert_eq!(
            sort(&src.lease("l"), &all),
            Sorted::Read(Mode::Hash, Job::Lease(tgt.lease("l")))
        );
    }

    #[test]
    fn what_is_no_datum_of_the_source_is_counted_not_copied() {
        let (src, tgt, own) = forward();
        let all = settings(true, true, None);
        let sort = |key: &Key, s: &Settings| sort(&src, &tgt, s, Some(&own), key.as_bytes());
        // What an in-place run wrote, the steps' bookkeeping, the marker, and strangers.
        assert_eq!(
            sort(&own.record(RecordKind::Chat, "a"), &all),
            Sorted::TargetLayout
        );
        assert_eq!(sort(&src.lifecycle(), &all), Sorted::Bookkeeping);
        assert_eq!(
            sort(&src.marker(), &all),
            Sorted::NotCopied(Namespace::of(&Name::Marker))
        );
        assert_eq!(sort(&Key::new("p:what:ever"), &all), Sorted::Unknown);
        let chats_only = settings(true, true, Some(vec![Namespace::Chats]));
        assert_eq!(
            sort(&src.record(RecordKind::Contact, "a"), &chats_only),
            Sorted::Excluded
        );
        assert_eq!(sort(&src.message_log("c"), &chats_only), Sorted::Excluded);
    }

    #[test]
    fn user_data_the_legacy_layout_cannot_name_is_unrepresentable() {
        let src = Keyspace::new(Layout::Cluster, "p").unwrap();
        let tgt = Keyspace::new(Layout::Legacy, "p").unwrap();
        let s = settings(false, true, None);
        let sort = |key: Key| sort(&src, &tgt, &s, Some(&tgt), key.as_bytes());
        assert_eq!(
            sort(src.user_entry("u:1", "n", "k")),
            Sorted::Unrepresentable
        );
        assert_eq!(
            sort(src.user_entry("u", "n:1", "k")),
            Sorted::Unrepresentable
        );
        assert_eq!(
            sort(src.user_entry("u", "n", "k:1")),
            Sorted::Read(
                Mode::String,
                Job::User {
                    user: "u".into(),
                    ns: "n".into(),
                    key: "k:1".into()
                }
            )
        );
    }
}
