//! What the passes of a copy step share: the two sides ([`Pair`]), what the step asked for
//! ([`Settings`]), and how a write script's answers are counted ([`tally`]).

use bytes::Bytes;

use crate::error::Error;
use crate::keys::{Key, Keyspace};

use super::{MigrationReport, Namespace};

/// The same name under another prefix: the names both layouts share.
pub(super) fn renamed(key: &[u8], from: &str, to: &str) -> Key {
    let mut out = Vec::with_capacity(key.len() + to.len());
    out.extend_from_slice(to.as_bytes());
    out.extend_from_slice(&key[from.len()..]);
    Key::new(out)
}

/// What a copy pass does, whichever its direction.
pub(super) struct Settings {
    /// Make the target match the source: existing target keys that differ are replaced, and
    /// the target's counterpart of a source key that went away is removed.
    pub mirror: bool,
    /// Copy-only: existing target keys are replaced all the same.
    pub overwrite: bool,
    /// Nothing is written.
    pub dry_run: bool,
    /// The target is another server or prefix: the names both layouts share are copied.
    pub separate: bool,
    /// Only these namespaces (`None`: all).
    pub include: Option<Vec<Namespace>>,
}

impl Settings {
    pub(super) fn includes(&self, ns: Namespace) -> bool {
        let ns = match ns {
            Namespace::Drains | Namespace::Items => Namespace::Messages,
            other => other,
        };
        self.include.as_ref().is_none_or(|list| list.contains(&ns))
    }

    fn replaces(&self) -> bool {
        self.mirror || self.overwrite
    }

    /// The write scripts' flags: replace what differs, and write nothing.
    pub(super) fn flags(&self) -> (Bytes, Bytes) {
        let flag = |b: bool| Bytes::from_static(if b { b"1" } else { b"0" });
        (flag(self.replaces()), flag(self.dry_run))
    }
}

/// The two sides of a pass: servers, keyspaces (their layouts give the direction).
pub(super) struct Pair<'a, S, T> {
    pub source: &'a S,
    pub target: &'a T,
    /// The source keyspace.
    pub src: Keyspace,
    /// The target keyspace.
    pub tgt: Keyspace,
    pub src_cluster: bool,
    pub tgt_cluster: bool,
    /// Nothing is written.
    pub dry_run: bool,
}

impl<S, T> Pair<'_, S, T> {
    pub(super) fn src_log(&self, chat: &str, drain: bool) -> Key {
        if drain {
            self.src.message_drain(chat)
        } else {
            self.src.message_log(chat)
        }
    }

    pub(super) fn tgt_log(&self, chat: &str, drain: bool) -> Key {
        if drain {
            self.tgt.message_drain(chat)
        } else {
            self.tgt.message_log(chat)
        }
    }
}

/// Counts what a write call answered per entry (`ns` names its namespace): a negative code
/// leaves the target key as it is (another type in the way, or a `DUMP` payload the target
/// refused: -2, a newer server's) and counts the source key (`key`) unreadable.
///
/// An error reply to a write (OOM, NOREPLICAS, READONLY after the retries...) may have left
/// part of its call written: the run stops, and a rerun finishes it.
pub(super) fn tally<T>(
    report: &mut MigrationReport,
    done: Vec<(T, Result<i64, Error>)>,
    ns: impl Fn(&T) -> Namespace,
    key: impl Fn(&T) -> Key,
) -> Result<(), Error> {
    for (tag, code) in done {
        match code? {
            code if code < 0 => report.unreadable_key(key(&tag).as_bytes()),
            code => report.counts(ns(&tag)).add(code),
        }
    }
    Ok(())
}
