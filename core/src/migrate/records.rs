//! The copy of one page's keys that are not messages: records, user data, counters (fences,
//! terms, and a copy-only run's cursors) and the names both layouts share. What each read key
//! becomes at the target is a pure function ([`prepare`]); the write scripts then answer, per
//! entry, what they did.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::{Key, Keyspace, Layout, RecordKind};
use crate::request::Arg;
use crate::script::Script;
use crate::store::user::member;

use super::engine::{canonical_int, read, ttl_arg, write, Entry, Mode, Read, WRITE_CHUNK};
use super::pair::{tally, Pair, Settings};
use super::prune::Doomed;
use super::{
    MigrationReport, Namespace, MIGRATE_COUNTERS, MIGRATE_LEASE, MIGRATE_RESTORE,
    MIGRATE_SCHEDULES, MIGRATE_STRINGS,
};

/// One key of a page to copy, once read: what it is at the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Job {
    Record {
        kind: RecordKind,
        id: String,
    },
    User {
        user: String,
        ns: String,
        key: String,
    },
    Counter(Namespace, Key),
    /// A cursor a mirror sets exactly (copy-only raises it, as a counter).
    Cursor(Key),
    Restore(Namespace, Key),
    Lease(Key),
}

impl Job {
    /// The target datum a mirror removes when the source key is gone.
    fn doomed(&self) -> Option<Doomed> {
        match self {
            Job::Record { kind, id } => Some(Doomed::Record {
                kind: *kind,
                id: id.clone(),
            }),
            Job::User { user, ns, key } => Some(Doomed::UserEntry {
                user: user.clone(),
                ns: ns.clone(),
                key: key.clone(),
            }),
            Job::Cursor(tgt) => Some(Doomed::Shared(Namespace::Cursors, tgt.clone())),
            Job::Restore(ns, tgt) => Some(Doomed::Shared(*ns, tgt.clone())),
            Job::Lease(tgt) => Some(Doomed::Shared(Namespace::Leases, tgt.clone())),
            // Fences and terms are only ever raised: a counter gone at the source keeps its
            // value at the target.
            Job::Counter(..) => None,
        }
    }
}

/// The write calls of a page, one script (and mode) each, in the order they are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Group {
    /// Chat and contact records: strings with an index member (cluster layout).
    Indexed,
    /// Checkpoints and user data: strings with an expiring index member (cluster layout).
    Expiring,
    /// A mirror's cursors: plain strings.
    Plain,
    Schedules,
    /// Fences, terms and a copy-only run's cursors: only ever raised.
    Counters,
    /// Conversations and durability tables: `DUMP` payloads.
    Restores,
    Leases,
}

impl Group {
    fn script(self) -> &'static Script {
        match self {
            Group::Indexed | Group::Expiring | Group::Plain => &MIGRATE_STRINGS,
            Group::Schedules => &MIGRATE_SCHEDULES,
            Group::Counters => &MIGRATE_COUNTERS,
            Group::Restores => &MIGRATE_RESTORE,
            Group::Leases => &MIGRATE_LEASE,
        }
    }

    /// The arguments before the entries'. The legacy layout has no indexes: its records are
    /// plain strings, its schedules hashes without an index member.
    fn head(self, layout: Layout, overwrite: &Bytes, dry: &Bytes) -> Vec<Bytes> {
        let cluster = layout == Layout::Cluster;
        let mode = |name: &'static str| match cluster {
            true => Bytes::from_static(name.as_bytes()),
            false => Bytes::from_static(b"plain"),
        };
        let first = match self {
            Group::Indexed => mode("indexed"),
            Group::Expiring => mode("expiring"),
            Group::Plain => Bytes::from_static(b"plain"),
            Group::Schedules => Bytes::from_static(if cluster { b"1" } else { b"0" }),
            Group::Counters => return vec![dry.clone()],
            Group::Restores | Group::Leases => return vec![overwrite.clone(), dry.clone()],
        };
        vec![first, overwrite.clone(), dry.clone()]
    }

    /// Entries per call: `migrate_lease.lua` copies one lease per call.
    fn chunk(self) -> usize {
        match self {
            Group::Leases => 1,
            _ => WRITE_CHUNK,
        }
    }
}

/// A write's tag: the namespace it counts in, and the source key (for examples).
type Tag = (Namespace, Key);

/// What a page's reads become: the write calls, what a mirror removes, what cannot be copied.
#[derive(Default)]
pub(super) struct Writes {
    pub groups: BTreeMap<Group, Vec<Entry<Tag>>>,
    /// Target data whose source key went away since the scan: a mirror removes it, which the
    /// prune pass saw alive at the source.
    pub gone: Vec<Doomed>,
    /// Source keys that could not be read as their namespace's type.
    pub unreadable: Vec<Key>,
}

/// Sorts what was read of a page into its writes under `tgt`. See [`Writes`].
pub(super) fn prepare(
    tgt: &Keyspace,
    mirror: bool,
    reads: Vec<(Key, Mode)>,
    values: Vec<Read>,
    jobs: Vec<Job>,
) -> Writes {
    let mut writes = Writes::default();
    for (((src_key, _), value), job) in reads.into_iter().zip(values).zip(jobs) {
        if value.kind.is_none() {
            if mirror {
                writes.gone.extend(job.doomed());
            }
            continue;
        }
        if value.value.is_none() {
            writes.unreadable.push(src_key);
            continue;
        }
        match entry(tgt, job, &value) {
            Some((group, ns, entry)) => {
                let entry = entry.tagged((ns, src_key));
                writes.groups.entry(group).or_default().push(entry);
            }
            None => writes.unreadable.push(src_key),
        }
    }
    writes
}

/// The write of one read key under `tgt`: its call, the namespace it counts in, its entry;
/// `None` when the value is not what its namespace holds (a counter that is no canonical
/// integer, a schedule or lease without a canonical token).
fn entry(tgt: &Keyspace, job: Job, value: &Read) -> Option<(Group, Namespace, Untagged)> {
    let bytes = || value.bytes().unwrap_or_default();
    let one = |key: Key, head: Vec<Key>, args: Vec<Bytes>| Untagged {
        slot: key.slot(),
        head,
        keys: vec![key],
        args,
    };
    Some(match job {
        Job::Record {
            kind: RecordKind::Schedule,
            id,
        } => (
            Group::Schedules,
            Namespace::Schedules,
            schedule_entry(tgt, &id, value)?,
        ),
        Job::Record { kind, id } => {
            let head = tgt.record_index_of(kind, &id).into_iter().collect();
            let key = tgt.record(kind, &id);
            let args = vec![Bytes::from(id), bytes(), ttl_arg(value.ttl())];
            let group = match kind {
                RecordKind::Checkpoint => Group::Expiring,
                _ => Group::Indexed,
            };
            (group, Namespace::of_record(kind), one(key, head, args))
        }
        Job::User { user, ns, key } => {
            let args = vec![member(&ns, &key), bytes(), ttl_arg(value.ttl())];
            let head = tgt.user_index(&user).into_iter().collect();
            let key = tgt.user_entry(&user, &ns, &key);
            (Group::Expiring, Namespace::UserData, one(key, head, args))
        }
        Job::Counter(ns, key) => {
            let n = value.bytes().and_then(|b| canonical_int(&b))?;
            (Group::Counters, ns, one(key, Vec::new(), vec![n]))
        }
        Job::Cursor(key) => {
            let args = vec![Bytes::new(), bytes(), ttl_arg(value.ttl())];
            (Group::Plain, Namespace::Cursors, one(key, Vec::new(), args))
        }
        Job::Restore(ns, key) => {
            let ttl = value.ttl().unwrap_or(0).into_arg();
            (
                Group::Restores,
                ns,
                one(key, Vec::new(), vec![bytes(), ttl]),
            )
        }
        Job::Lease(key) => (Group::Leases, Namespace::Leases, lease_entry(value, key)?),
    })
}

impl<S: Executor, T: Executor> Pair<'_, S, T> {
    /// Writes the records, user data, counters and shared names of one page.
    pub(super) async fn copy(
        &self,
        settings: &Settings,
        report: &mut MigrationReport,
        reads: Vec<(Key, Mode)>,
        jobs: Vec<Job>,
    ) -> Result<(), Error> {
        let pair = self;
        let values = read(pair.source, pair.src_cluster, &reads).await?;
        let writes = prepare(&pair.tgt, settings.mirror, reads, values, jobs);
        for key in &writes.unreadable {
            report.unreadable_key(key.as_bytes());
        }
        let (overwrite, dry) = settings.flags();
        let mut done = Vec::new();
        for (group, entries) in writes.groups {
            let head = group.head(pair.tgt.layout(), &overwrite, &dry);
            let (t, c) = (pair.target, pair.tgt_cluster);
            done.extend(write(t, c, group.script(), entries, &head, group.chunk()).await?);
        }
        tally(report, done, |(ns, _)| *ns, |(_, key)| key.clone())?;
        pair.remove(writes.gone, settings.dry_run, report).await
    }
}

/// An entry without its tag yet.
pub(super) struct Untagged {
    slot: u16,
    head: Vec<Key>,
    keys: Vec<Key>,
    args: Vec<Bytes>,
}

impl Untagged {
    pub(super) fn tagged<T>(self, tag: T) -> Entry<T> {
        Entry {
            slot: self.slot,
            head: self.head,
            keys: self.keys,
            args: self.args,
            tag,
        }
    }
}

/// The write of a schedule record (hash: token, holder, data, deleted) under `ks`; `None` when
/// the record has no canonical token.
pub(super) fn schedule_entry(ks: &Keyspace, id: &str, value: &Read) -> Option<Untagged> {
    let hash = value.hash()?;
    let token = hash.get(b"token".as_slice())?;
    let token = canonical_int(token).filter(|t| t == token)?;
    let deleted = hash
        .get(b"deleted".as_slice())
        .is_some_and(|d| d.as_ref() == b"1");
    let tgt = ks.record(RecordKind::Schedule, id);
    Some(Untagged {
        slot: tgt.slot(),
        head: ks
            .record_index_of(RecordKind::Schedule, id)
            .into_iter()
            .collect(),
        args: vec![
            Bytes::copy_from_slice(id.as_bytes()),
            token,
            hash.get(b"holder".as_slice()).cloned().unwrap_or_default(),
            Bytes::from_static(if deleted { b"1" } else { b"0" }),
            hash.get(b"data".as_slice()).cloned().unwrap_or_default(),
        ],
        keys: vec![tgt],
    })
}

/// The write of a lease: its token, and its holder with the time it had left when it was read.
pub(super) fn lease_entry(value: &Read, tgt: Key) -> Option<Untagged> {
    let hash = value.hash()?;
    let token = match hash.get(b"token".as_slice()) {
        Some(t) => canonical_int(t)?,
        None => Bytes::new(),
    };
    let holder = hash.get(b"holder".as_slice()).cloned().unwrap_or_default();
    let until: Option<i64> = hash
        .get(b"until".as_slice())
        .and_then(|u| std::str::from_utf8(u).ok()?.parse().ok());
    let left = match until {
        Some(until) if !holder.is_empty() && until > value.now_ms => {
            (until - value.now_ms).into_arg()
        }
        _ => Bytes::new(),
    };
    Some(Untagged {
        slot: tgt.slot(),
        head: Vec::new(),
        args: vec![token, holder, left],
        keys: vec![tgt],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::engine::KeyType;
    use crate::value::Value;

    fn string(value: &str, pttl: i64) -> Read {
        Read {
            kind: KeyType::String,
            pttl,
            value: Some(Value::Bulk(Bytes::copy_from_slice(value.as_bytes()))),
            now_ms: 1_000,
        }
    }

    fn gone() -> Read {
        Read {
            kind: KeyType::None,
            pttl: -2,
            value: None,
            now_ms: 1_000,
        }
    }

    fn hash(fields: &[(&str, &str)]) -> Read {
        let flat = fields
            .iter()
            .flat_map(|(f, v)| [f, v])
            .map(|s| Value::Bulk(Bytes::copy_from_slice(s.as_bytes())))
            .collect();
        Read {
            kind: KeyType::Other("hash".into()),
            pttl: -1,
            value: Some(Value::Array(flat)),
            now_ms: 1_000,
        }
    }

    fn cluster() -> Keyspace {
        Keyspace::new(Layout::Cluster, "p").unwrap()
    }

    fn args(entry: &Entry<Tag>) -> Vec<&[u8]> {
        entry.args.iter().map(|a| a.as_ref()).collect()
    }

    #[test]
    fn records_go_to_their_index_and_checkpoints_and_user_data_expire() {
        let tgt = cluster();
        let chat = Job::Record {
            kind: RecordKind::Chat,
            id: "a:b".into(),
        };
        let (group, ns, entry) = entry(&tgt, chat, &string("v", -1)).unwrap();
        assert_eq!((group, ns), (Group::Indexed, Namespace::Chats));
        let entry = entry.tagged(());
        assert_eq!(entry.keys, vec![tgt.record(RecordKind::Chat, "a:b")]);
        assert_eq!(
            entry.head,
            vec![tgt.record_index_of(RecordKind::Chat, "a:b").unwrap()]
        );
        assert_eq!(entry.slot, tgt.record(RecordKind::Chat, "a:b").slot());
        let checkpoint = Job::Record {
            kind: RecordKind::Checkpoint,
            id: "c".into(),
        };
        let (group, _, entry) = entry_of(&tgt, checkpoint, &string("v", 5_000));
        assert_eq!(group, Group::Expiring);
        assert_eq!(args(&entry), [&b"c"[..], b"v", b"5000"]);
        let user = Job::User {
            user: "u".into(),
            ns: "n s".into(),
            key: "k".into(),
        };
        let (group, ns, entry) = entry_of(&tgt, user, &string("v", -1));
        assert_eq!((group, ns), (Group::Expiring, Namespace::UserData));
        assert_eq!(args(&entry), [&b"n%20s:k"[..], b"v", b""]);
        assert_eq!(entry.head, vec![tgt.user_index("u").unwrap()]);
    }

    fn entry_of(tgt: &Keyspace, job: Job, value: &Read) -> (Group, Namespace, Entry<Tag>) {
        let (group, ns, entry) = entry(tgt, job, value).unwrap();
        (group, ns, entry.tagged((ns, Key::new("src"))))
    }

    #[test]
    fn a_legacy_target_has_no_index_to_head_a_call() {
        let tgt = Keyspace::new(Layout::Legacy, "p").unwrap();
        let chat = Job::Record {
            kind: RecordKind::Contact,
            id: "a".into(),
        };
        let (_, _, entry) = entry_of(&tgt, chat, &string("v", -1));
        assert!(entry.head.is_empty());
        let (o, d) = (Bytes::from_static(b"0"), Bytes::from_static(b"1"));
        assert_eq!(
            Group::Indexed.head(Layout::Legacy, &o, &d),
            ["plain", "0", "1"]
        );
        assert_eq!(
            Group::Indexed.head(Layout::Cluster, &o, &d),
            ["indexed", "0", "1"]
        );
        assert_eq!(
            Group::Expiring.head(Layout::Cluster, &o, &d),
            ["expiring", "0", "1"]
        );
        assert_eq!(
            Group::Schedules.head(Layout::Legacy, &o, &d),
            ["0", "0", "1"]
        );
        assert_eq!(
            Group::Schedules.head(Layout::Cluster, &o, &d),
            ["1", "0", "1"]
        );
        assert_eq!(Group::Counters.head(Layout::Cluster, &o, &d), ["1"]);
        assert_eq!(Group::Restores.head(Layout::Legacy, &o, &d), ["0", "1"]);
        assert_eq!(
            (Group::Leases.chunk(), Group::Plain.chunk()),
            (1, WRITE_CHUNK)
        );
    }

    #[test]
    fn values_that_are_not_their_namespaces_type_are_unreadable() {
        let tgt = cluster();
        let fence = |v: &str| {
            entry(
                &tgt,
                Job::Counter(Namespace::Fences, Key::new("f")),
                &string(v, -1),
            )
        };
        assert!(fence("9007199254740993").is_some());
        assert!(fence("007").is_none());
        assert!(fence("1.5").is_none());
        let schedule = |fields: &[(&str, &str)]| {
            let job = Job::Record {
                kind: RecordKind::Schedule,
                id: "s".into(),
            };
            entry(&tgt, job, &hash(fields)).map(|(g, ..)| g)
        };
        assert_eq!(
            schedule(&[("token", "3"), ("data", "d")]),
            Some(Group::Schedules)
        );
        assert_eq!(schedule(&[("token", "+3")]), None);
        assert_eq!(schedule(&[("data", "d")]), None);
        let lease = |fields: &[(&str, &str)]| {
            entry(&tgt, Job::Lease(Key::new("l")), &hash(fields)).map(|(_, _, e)| e.args)
        };
        // A live holder is copied with the time it had left; a lapsed one without.
        assert_eq!(
            lease(&[("token", "4"), ("holder", "h"), ("until", "1500")]).unwrap(),
            ["4", "h", "500"]
        );
        assert_eq!(
            lease(&[("token", "4"), ("holder", "h"), ("until", "900")]).unwrap(),
            ["4", "h", ""]
        );
        assert_eq!(lease(&[("token", "x")]), None);
    }

    #[test]
    fn a_key_gone_since_the_scan_is_removed_by_a_mirror_only() {
        let tgt = cluster();
        let reads = || {
            vec![
                (Key::new("a"), Mode::String),
                (Key::new("b"), Mode::String),
                (Key::new("c"), Mode::String),
                (Key::new("d"), Mode::String),
            ]
        };
        let jobs = || {
            vec![
                Job::Record {
                    kind: RecordKind::Chat,
                    id: "a".into(),
                },
                Job::Counter(Namespace::Terms, Key::new("t")),
                Job::Cursor(Key::new("cur")),
                Job::Counter(Namespace::Fences, Key::new("f")),
            ]
        };
        let values = || vec![gone(), gone(), string("7", -1), string("x", -1)];
        let mirror = prepare(&tgt, true, reads(), values(), jobs());
        assert_eq!(
            mirror.gone,
            vec![Doomed::Record {
                kind: RecordKind::Chat,
                id: "a".into()
            }]
        );
        assert_eq!(mirror.unreadable, vec![Key::new("d")]);
        let groups: Vec<(Group, usize)> =
            mirror.groups.iter().map(|(g, e)| (*g, e.len())).collect();
        assert_eq!(groups, [(Group::Plain, 1)]);
        let copy_only = prepare(&tgt, false, reads(), values(), jobs());
        assert!(copy_only.gone.is_empty());
        assert_eq!(copy_only.unreadable, vec![Key::new("d")]);
    }
}
