//! The `start()` guard: a store refuses to run over a keyspace of the other layout.
//!
//! Cluster layout:
//!
//! 1. read the layout marker `p:{meta}:layout`: `cluster:v1` means the keyspace is already in
//!    the cluster layout; any other value is refused;
//! 2. without a marker, `SCAN` at most [`SCAN_LIMIT`] keys under the prefix (on a single node,
//!    or on every master of a cluster) for legacy-layout keys;
//! 3. legacy keys found: refuse with [`Error::LegacyDataFound`] (naming up to ten of them and the
//!    migration, [`migrate_to_cluster_layout`](crate::migrate::migrate_to_cluster_layout)), unless
//!    `allow_legacy_data`, which starts without writing the marker (so the guard stays armed
//!    for stores started without it);
//! 4. none found: write the marker (`SET NX`).
//!
//! Legacy layout: a marker under the prefix means some replica runs the cluster layout. The
//! store logs a warning (`tracing::warn!`) and starts: replicas on different layouts of one
//! prefix see different keyspaces, so the warning must be seen.
//!
//! Both layouts, once the start is decided: the side's lifecycle record is stamped (the
//! `lifecycle` script's `start`), so that a migration step taken later knows the bots run
//! here (`docs/migration.md`, "The lifecycle"). A cluster-layout keyspace without a record gets
//! an `origin` one; a legacy one without a record gets none. A record that says a copy into
//! this side was interrupted, or a cleanup deleted it, refuses the start
//! ([`Error::KeyspaceNotReady`]), nothing written.
//!
//! Which keys are legacy-layout keys: every key under the prefix except the cluster layout's
//! (the rest after `p:` starts with a hash tag, `{`, or is a coordinator key `co:{`) and the
//! names both layouts share (`conv:`, `cursor:`, `lease:`, `co:rep:`).
//!
//! ```text
//! start ──► GET marker ──cluster:v1──────────────────────────────► Done(MarkerFound)
//!               │ none (cluster layout)
//!               ▼
//!           SCAN prefix:* ──legacy key──► error, or Done(LegacyDataAllowed)
//!               │ none
//!               ▼
//!           SET marker NX ──OK──► Done(MarkerWritten)
//!               │ already set by another replica
//!               ▼
//!           GET marker ──cluster:v1──► Done(MarkerFound)
//!
//! (every Done above, and the legacy layout's: stamp the lifecycle record first; a record of
//! an incomplete copy or a deleted side ──► error)
//! ```

use bytes::Bytes;

use crate::error::Error;
use crate::keys::lifecycle::{Record, Role};
use crate::keys::{Keyspace, Layout, CLUSTER_V1};
use crate::plan::{misuse, Plan, Reply, Step};
use crate::request::{Access, Request};
use crate::scan::{scan, Scan};
use crate::scripts::LIFECYCLE;
use crate::value::Value;

use super::{forward, one};

/// At most this many keys under the prefix are checked for legacy-layout keys.
pub const SCAN_LIMIT: usize = 10_000;

/// How a store started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Started {
    /// Cluster layout; the marker was there.
    MarkerFound,
    /// Cluster layout; no legacy-layout key among the `checked` keys under the prefix, and the
    /// marker was written.
    MarkerWritten {
        /// Keys under the prefix that were checked (at most [`SCAN_LIMIT`]).
        checked: usize,
    },
    /// Cluster layout over legacy-layout keys, allowed by `allow_legacy_data`; the marker was not
    /// written.
    LegacyDataAllowed {
        /// One of the legacy-layout keys found.
        example: String,
    },
    /// Legacy layout; no marker.
    Legacy,
    /// Legacy layout, but the prefix carries the cluster layout's marker: a warning was logged.
    LegacyWithMarker,
}

/// Whether `key` (found under the prefix of `ks`) belongs to the legacy layout: not a
/// cluster-layout key and not a name both layouts share. Keys outside the prefix are not.
pub fn is_legacy_layout_key(ks: &Keyspace, key: &[u8]) -> bool {
    let Some(rest) = key
        .strip_prefix(ks.prefix().as_bytes())
        .and_then(|r| r.strip_prefix(b":"))
    else {
        return false;
    };
    // Cluster-layout keys: a hash tag right after the prefix, or a tagged coordinator key.
    if rest.starts_with(b"{") || rest.starts_with(b"co:{") {
        return false;
    }
    // Names both layouts share: conversations, cursors, leases, heartbeats.
    let shared = [
        ks.conversation(""),
        ks.cursor(""),
        ks.lease(""),
        ks.heartbeat(""),
    ];
    !shared.iter().any(|head| key.starts_with(head.as_bytes()))
}

/// The guard of a store in the layout of `ks`; see the module docs.
pub fn start(ks: &Keyspace, allow_legacy_data: bool) -> StartGuard {
    StartGuard {
        ks: ks.clone(),
        allow_legacy_data,
        state: State::Start,
    }
}

/// The plan of [`start`].
#[derive(Debug)]
pub struct StartGuard {
    ks: Keyspace,
    allow_legacy_data: bool,
    state: State,
}

#[derive(Debug)]
enum State {
    Start,
    ReadingMarker,
    Scanning(Scan),
    WritingMarker {
        checked: usize,
    },
    RereadingMarker,
    /// The start is decided; the lifecycle record is being stamped.
    Stamping(Started),
    Finished,
}

impl StartGuard {
    fn get_marker(&self) -> Result<Request, Error> {
        Request::cmd(Access::Read, "GET")
            .key(self.ks.marker())
            .build()
    }

    fn on_marker(&mut self, marker: Option<Bytes>, reread: bool) -> Result<Step<Started>, Error> {
        match (self.ks.layout(), marker) {
            (Layout::Legacy, None) => self.stamp(Started::Legacy),
            (Layout::Legacy, Some(value)) => {
                tracing::warn!(
                    prefix = self.ks.prefix(),
                    marker = %value.escape_ascii(),
                    "a legacy-layout store started on a prefix that carries the cluster layout \
                     marker: replicas on different layouts of one prefix see different \
                     keyspaces, and their turns and locks stop excluding each other"
                );
                self.stamp(Started::LegacyWithMarker)
            }
            (Layout::Cluster, Some(value)) if value.as_ref() == CLUSTER_V1.as_bytes() => {
                self.stamp(Started::MarkerFound)
            }
            (Layout::Cluster, Some(value)) => Err(Error::UnknownLayoutMarker {
                key: self.ks.marker().to_string(),
                value: value.escape_ascii().to_string(),
            }),
            (Layout::Cluster, None) if reread => Err(Error::LayoutMarkerRemoved {
                key: self.ks.marker().to_string(),
            }),
            (Layout::Cluster, None) => {
                let mut scan = scan(self.ks.prefix_pattern(), SCAN_LIMIT);
                let step = scan.start();
                self.state = State::Scanning(scan);
                self.scanned(step)
            }
        }
    }

    /// Stamps the keyspace's lifecycle record: bots start here (`docs/migration.md`, "The
    /// lifecycle"). A cluster-layout keyspace no copy made gets an origin record; a legacy one
    /// without a record gets none (a legacy bot that never migrated writes no new key).
    fn stamp(&mut self, started: Started) -> Result<Step<Started>, Error> {
        let create = self.ks.layout() == Layout::Cluster;
        let request = Request::script(
            &LIFECYCLE,
            Access::Write,
            vec![self.ks.lifecycle(), self.ks.marker()],
            vec![
                Bytes::from_static(b"start"),
                Bytes::from_static(if create { b"1" } else { b"0" }),
            ],
        )?;
        self.state = State::Stamping(started);
        Ok(Step::Send(request.into()))
    }

    /// What the stamp found: a keyspace that may not start, or one whose other side goes stale
    /// now (which the log says).
    fn on_stamp(&self, reply: Value) -> Result<(), Error> {
        let mut items = reply.into_array()?.into_iter();
        let outcome = items
            .next()
            .ok_or_else(|| misuse("the lifecycle stamp answered nothing"))?
            .into_string()?;
        let flat: Vec<Bytes> = items.map(Value::into_bytes).collect::<Result<_, _>>()?;
        if outcome == "none" || outcome == "created" || outcome == "again" {
            return Ok(());
        }
        let record = Record::parse(&flat).map_err(|detail| Error::UnexpectedReply {
            detail: format!("the lifecycle record {}: {detail}", self.ks.lifecycle()),
        })?;
        if outcome == "refused" {
            return Err(Error::KeyspaceNotReady {
                key: self.ks.lifecycle().to_string(),
                found: record.describe(),
            });
        }
        match record.role {
            Role::Target => tracing::info!(
                prefix = self.ks.prefix(),
                peer = %record.peer,
                "bots start on this copy: from now on the other side is stale, and a copy into \
                 this side is refused"
            ),
            Role::Source => tracing::warn!(
                prefix = self.ks.prefix(),
                peer = %record.peer,
                "bots start on a keyspace that was copied: the copy goes stale as they write; \
                 migrate again before moving the bots to it"
            ),
            Role::Origin => {}
        }
        Ok(())
    }

    fn scanned(&mut self, step: Step<Vec<Bytes>>) -> Result<Step<Started>, Error> {
        let keys = match forward(step) {
            Ok(keys) => keys,
            Err(step) => return Ok(step),
        };
        let mut legacy = keys.iter().filter(|k| is_legacy_layout_key(&self.ks, k));
        if let Some(key) = legacy.next() {
            let example = String::from_utf8_lossy(key).into_owned();
            if !self.allow_legacy_data {
                let mut examples = vec![example];
                examples.extend(
                    legacy
                        .take(9)
                        .map(|k| String::from_utf8_lossy(k).into_owned()),
                );
                return Err(Error::LegacyDataFound {
                    prefix: self.ks.prefix().to_owned(),
                    examples,
                });
            }
            tracing::warn!(
                prefix = self.ks.prefix(),
                example = %example,
                "a cluster-layout store started over legacy-layout keys (allow_legacy_data); \
                 they are invisible to it until migrated, and the layout marker is not written"
            );
            return self.stamp(Started::LegacyDataAllowed { example });
        }
        let request = Request::cmd(Access::Write, "SET")
            .key(self.ks.marker())
            .arg(CLUSTER_V1)
            .arg("NX")
            .build()?;
        self.state = State::WritingMarker {
            checked: keys.len(),
        };
        Ok(Step::Send(request.into()))
    }

    fn on_replies(&mut self, state: State, replies: Vec<Reply>) -> Result<Step<Started>, Error> {
        match state {
            State::ReadingMarker => self.on_marker(one(replies)?.into_opt_bytes()?, false),
            State::RereadingMarker => self.on_marker(one(replies)?.into_opt_bytes()?, true),
            State::Scanning(mut scan) => {
                let step = scan.resume(replies);
                self.state = State::Scanning(scan);
                self.scanned(step)
            }
            State::WritingMarker { checked } => match one(replies)? {
                Value::Nil => {
                    // Another replica wrote it first: check what it wrote.
                    self.state = State::RereadingMarker;
                    Ok(Step::Send(self.get_marker()?.into()))
                }
                ok => {
                    ok.expect_ok()?;
                    self.stamp(Started::MarkerWritten { checked })
                }
            },
            State::Stamping(started) => {
                self.on_stamp(one(replies)?)?;
                Ok(Step::Done(Ok(started)))
            }
            State::Start | State::Finished => Err(misuse("StartGuard resumed out of order")),
        }
    }
}

impl Plan for StartGuard {
    type Output = Started;

    fn operation(&self) -> &'static str {
        "start"
    }

    fn start(&mut self) -> Step<Started> {
        if !matches!(self.state, State::Start) {
            return Step::Done(Err(misuse("StartGuard::start called twice")));
        }
        warn_braced_legacy_prefix(&self.ks);
        match self.get_marker() {
            Ok(request) => {
                self.state = State::ReadingMarker;
                Step::Send(request.into())
            }
            Err(e) => Step::Done(Err(e)),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Started> {
        let state = std::mem::replace(&mut self.state, State::Finished);
        self.on_replies(state, replies)
            .unwrap_or_else(|e| Step::Done(Err(e)))
    }
}

/// Logs a warning when a legacy-layout keyspace's prefix holds `{` or `}`: the legacy layout
/// accepts it, but the cluster layout refuses it (a brace would change the keys' hash tags),
/// so this keyspace cannot be migrated to `cluster:v1` under the same prefix.
fn warn_braced_legacy_prefix(ks: &Keyspace) {
    if ks.layout() == Layout::Legacy && ks.prefix().contains(['{', '}']) {
        tracing::warn!(
            prefix = ks.prefix(),
            "the prefix holds a brace: the legacy layout accepts it, but the cluster layout \
             refuses it, so this keyspace cannot move to cluster:v1 in place; migrate it to a \
             prefix without braces (migrate_to_cluster_layout with a target_prefix)"
        );
    }
}

/// Reads the server's `maxmemory-policy` (`CONFIG GET`); `None` when the reply names none.
pub fn eviction_policy() -> Result<crate::plan::Single<Option<String>>, Error> {
    let request = Request::cmd(Access::Read, "CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .build()?;
    Ok(crate::plan::single("eviction_policy", request, |v| {
        let mut items = v.into_array()?.into_iter();
        match (items.next(), items.next()) {
            (Some(_), Some(policy)) => policy.into_string().map(Some),
            _ => Ok(None),
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::{Arc, Mutex};

    /// A subscriber that records the level and message of every event: enough to check a
    /// warning without a subscriber crate.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<(tracing::Level, String)>>>);

    struct Message<'a>(&'a mut String);

    impl tracing::field::Visit for Message<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                *self.0 = format!("{value:?}");
            }
        }
    }

    impl tracing::Subscriber for Recorder {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut message = String::new();
            event.record(&mut Message(&mut message));
            let level = *event.metadata().level();
            self.0.lock().unwrap().push((level, message));
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// The warnings logged while the start guard of `ks` takes its first step.
    fn warnings_at_start(ks: &Keyspace) -> Vec<String> {
        let recorder = Recorder::default();
        tracing::subscriber::with_default(recorder.clone(), || {
            let step = start(ks, false).start();
            assert!(matches!(step, Step::Send(_)), "{step:?}");
        });
        let events = recorder.0.lock().unwrap().clone();
        events
            .into_iter()
            .filter(|(level, _)| *level == tracing::Level::WARN)
            .map(|(_, message)| message)
            .collect()
    }

    #[test]
    fn a_braced_legacy_prefix_is_warned_about_at_start() {
        for prefix in ["bot{1}", "a{b", "a}b"] {
            let ks = Keyspace::new(Layout::Legacy, prefix).unwrap();
            let warnings = warnings_at_start(&ks);
            assert_eq!(warnings.len(), 1, "{prefix}: {warnings:?}");
            assert!(
                warnings[0].contains("cannot move to cluster:v1 in place"),
                "{warnings:?}"
            );
        }
        // No brace, or the cluster layout (which refuses braces when the keyspace is built):
        // no warning.
        assert!(warnings_at_start(&Keyspace::new(Layout::Legacy, "bot").unwrap()).is_empty());
        assert!(warnings_at_start(&Keyspace::new(Layout::Cluster, "bot").unwrap()).is_empty());
        assert!(Keyspace::new(Layout::Cluster, "bot{1}").is_err());
    }

    #[test]
    fn legacy_keys_are_told_apart() {
        let ks = Keyspace::new(Layout::Cluster, "bot").unwrap();
        let legacy = [
            "bot:chat:1",
            "bot:msgs:{x}",
            "bot:msg:a:b",
            "bot:user:u:n:k",
            "bot:co:turn:c:seq",
            "bot:co:leader:x",
            "bot:lock:k",
        ];
        for key in legacy {
            assert!(is_legacy_layout_key(&ks, key.as_bytes()), "{key}");
        }
        let not_legacy = [
            "bot:{m:c}:z",
            "bot:{meta}:layout",
            "bot:{durable:t}:x",
            "bot:co:{t:c}:seq",
            "bot:co:{ld:x}",
            "bot:conv:c",
            "bot:cursor:n",
            "bot:lease:l",
            "bot:co:rep:r",
            "other:chat:1",
            "botx:chat:1",
        ];
        for key in not_legacy {
            assert!(!is_legacy_layout_key(&ks, key.as_bytes()), "{key}");
        }
    }
}
