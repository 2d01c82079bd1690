//! The two sides of a step on the wire: which servers they are (the same one or not), their
//! lifecycle records and markers, and whether bots run on them right now.

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::{Keyspace, Layout, CLUSTER_V1};
use crate::request::{Access, Request};
use crate::scan::Owners;
use crate::scripts::LIFECYCLE;
use crate::value::Value;

use super::engine::{layout, scan_page, send, send_ok};
use super::lifecycle::{Phase, Record, View};
use super::{Progress, Refusal};

/// What a step knows of one server (a single node, or a cluster).
#[derive(Clone, Debug)]
pub(super) struct Server {
    /// The masters to scan: `[None]` for a single node, else each master's address.
    pub nodes: Vec<Option<String>>,
    /// The slots' owners when `nodes` was read (none on a single node): slots that moved
    /// since, while a pass scanned `nodes` one after the other, may have left keys unvisited.
    pub owners: Owners,
    /// A single node's `run_id` (`INFO server`), when it answered one.
    pub run_id: Option<String>,
    /// How the server is named in the other side's record.
    pub described: String,
}

impl Server {
    /// Whether this is a Redis Cluster.
    pub(super) fn is_cluster(&self) -> bool {
        self.nodes != [None]
    }
}

/// Asks the server what it is: its masters, and a single node's `run_id`.
pub(super) async fn server<E: Executor>(e: &E) -> Result<Server, Error> {
    let (nodes, owners) = layout(e).await?;
    if nodes != [None] {
        let first = nodes.first().cloned().flatten().unwrap_or_default();
        return Ok(Server {
            described: format!("a cluster of {} masters ({first}, ...)", nodes.len()),
            nodes,
            owners,
            run_id: None,
        });
    }
    let info = Request::cmd(Access::Read, "INFO").arg("server").build()?;
    // A server that keeps INFO from this user answers an error: the step then needs the
    // caller's word (`other_server`).
    let text = match send(e, vec![info]).await?.pop() {
        Some(Ok(value)) => value.into_bytes().ok(),
        _ => None,
    };
    let field = |name: &str| {
        let text = text.as_ref()?;
        let text = std::str::from_utf8(text).ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    let run_id = field("run_id");
    let described = match (&run_id, field("tcp_port")) {
        (Some(id), Some(port)) => format!("the node of run_id {id} (port {port})"),
        _ => "a single node".to_owned(),
    };
    Ok(Server {
        nodes,
        owners,
        run_id,
        described,
    })
}

/// Whether the two sides of a step live on other servers. A cluster is never the same server
/// as a single node, and two single nodes are the same only when they answer one `run_id`.
/// `said` is the caller's word (`other_server`), which must agree with what the servers say.
pub(super) fn other_server(
    source: &Server,
    target: &Server,
    said: Option<bool>,
) -> Result<bool, Error> {
    let found = if source.is_cluster() || target.is_cluster() {
        Some(true)
    } else {
        match (&source.run_id, &target.run_id) {
            (Some(a), Some(b)) => Some(a != b),
            _ => None,
        }
    };
    match (found, said) {
        (Some(found), Some(said)) if found != said => Err(Refusal::OtherServerMismatch {
            said,
            source_server: source.described.clone(),
            target_server: target.described.clone(),
        }
        .into()),
        (Some(found), _) => Ok(found),
        (None, Some(said)) => Ok(said),
        (None, None) => Err(Refusal::OtherServerUnknown.into()),
    }
}

/// The keyspace of `layout` under `prefix` on a step's other server, whose keys include the
/// names both layouts share: the sibling that a separate step's shared names belong to as much
/// as to its own side. None in place (the step's two sides are the two layouts already), for a
/// braced legacy prefix (no cluster-layout sibling), and for a legacy keyspace on a cluster.
pub(super) fn sibling(
    layout: Layout,
    prefix: &str,
    separate: bool,
    on_cluster: bool,
) -> Option<Keyspace> {
    let possible = separate && !(layout == Layout::Legacy && on_cluster);
    possible
        .then(|| Keyspace::new(layout, prefix).ok())
        .flatten()
}

/// Reads a side's lifecycle record and marker. `data` also asks whether keys of its layout
/// exist under the prefix (a full `SCAN` when there are none): only a legacy side without a
/// record needs that, and only as a target.
pub(super) async fn view<E: Executor>(
    e: &E,
    server: &Server,
    ks: &Keyspace,
    data: bool,
) -> Result<View, Error> {
    let batch = vec![
        Request::cmd(Access::Read, "HGETALL")
            .key(ks.lifecycle())
            .build()?,
        Request::cmd(Access::Read, "GET").key(ks.marker()).build()?,
    ];
    let mut replies = send_ok(e, batch).await?.into_iter();
    let (Some(record), Some(marker)) = (replies.next(), replies.next()) else {
        return Err(Error::UnexpectedReply {
            detail: "the lifecycle record and the marker were not both answered".into(),
        });
    };
    let flat: Vec<Bytes> = record
        .into_array()?
        .into_iter()
        .map(Value::into_bytes)
        .collect::<Result<_, _>>()?;
    let record = if flat.is_empty() {
        Ok(None)
    } else {
        Record::parse(&flat).map(Some)
    };
    let marker = ks.layout() == Layout::Cluster
        && marker.into_opt_bytes()?.as_deref() == Some(CLUSTER_V1.as_bytes());
    let holds_data = match (&record, data) {
        (Ok(None), true) => holds_data(e, server, ks).await?,
        _ => false,
    };
    Ok(View {
        layout: ks.layout(),
        key: ks.lifecycle().to_string(),
        record,
        marker,
        holds_data,
    })
}

/// Whether a key of `ks`'s layout (not a name both layouts share) exists under its prefix.
async fn holds_data<E: Executor>(e: &E, server: &Server, ks: &Keyspace) -> Result<bool, Error> {
    let pattern = ks.prefix_pattern();
    // Data a copy would write or prune: not the coordination keys of running bots (holders,
    // turn queues), nor the names both layouts share.
    let mine = |key: &[u8]| {
        let name = super::names::of(ks, key);
        let ns = super::Namespace::of(&name);
        !name.is_shared()
            && (super::Namespace::COPIED.contains(&ns)
                || matches!(ns, super::Namespace::Items | super::Namespace::Drains))
    };
    for node in &server.nodes {
        let mut cursor = Bytes::from_static(b"0");
        loop {
            let (next, keys) = scan_page(e, node, &cursor, &pattern, 2000).await?;
            if keys.iter().any(|k| mine(k)) {
                return Ok(true);
            }
            cursor = next;
            if cursor.as_ref() == b"0" {
                break;
            }
        }
    }
    Ok(false)
}

/// What a step does with the marker when it writes a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MarkerOp {
    /// Leaves it.
    Keep,
    /// Writes `cluster:v1`: the copy into the cluster layout is complete.
    Set,
    /// Deletes it: a rollback completed, or a cleanup took the cluster side apart.
    Delete,
}

/// One side's record as the step last read or wrote it: its writes are refused when a bot
/// changed the record in between.
pub(super) struct Recorded<'a, E> {
    pub e: &'a E,
    pub ks: Keyspace,
    pub current: Option<Record>,
}

impl<E: Executor> Recorded<'_, E> {
    /// Replaces the record with `record` (and applies `marker`), unless it changed since it
    /// was read: then [`Refusal::RecordChanged`], and nothing is written.
    pub(super) async fn put(&mut self, record: Record, marker: MarkerOp) -> Result<(), Error> {
        let (copy, started) = match &self.current {
            Some(r) => (
                r.copy.to_string(),
                r.started.map(|s| s.to_string()).unwrap_or_default(),
            ),
            None => (String::new(), String::new()),
        };
        let marker_op = match marker {
            MarkerOp::Keep => "keep",
            MarkerOp::Set => "set",
            MarkerOp::Delete => "del",
        };
        let mut args: Vec<Bytes> = vec![
            Bytes::from_static(b"put"),
            Bytes::from(copy),
            Bytes::from(started),
            Bytes::from_static(marker_op.as_bytes()),
            Bytes::from_static(CLUSTER_V1.as_bytes()),
        ];
        for (field, value) in record.fields() {
            args.push(Bytes::from_static(field.as_bytes()));
            args.push(Bytes::from(value));
        }
        let keys = vec![self.ks.lifecycle(), self.ks.marker()];
        let call = Request::script(&LIFECYCLE, Access::Write, keys, args)?;
        let written = send_ok(self.e, vec![call])
            .await?
            .pop()
            .map(|v| v.as_i64())
            .transpose()?;
        if written != Some(1) {
            return Err(Refusal::RecordChanged {
                key: self.ks.lifecycle().to_string(),
            }
            .into());
        }
        self.current = Some(record);
        Ok(())
    }

    /// Moves the record to `phase` at `at_ms` (and applies `marker`); a side without a record
    /// keeps none.
    pub(super) async fn mark(
        &mut self,
        phase: Phase,
        at_ms: i64,
        marker: MarkerOp,
    ) -> Result<(), Error> {
        let Some(mut record) = self.current.clone() else {
            return Ok(());
        };
        record.phase = phase;
        record.at_ms = at_ms;
        self.put(record, marker).await
    }
}

/// The pattern of the turn queues with pending tickets, in the layout of `ks`.
fn tickets(ks: &Keyspace) -> String {
    let prefix = crate::keys::glob_escape(ks.prefix());
    match ks.layout() {
        Layout::Legacy => format!("{prefix}:co:turn:*:tix"),
        Layout::Cluster => format!("{prefix}:co:{{t:*}}:tix"),
    }
}

/// A side a step checks for running bots: its keyspace, and whether its heartbeats count (in
/// place the heartbeats are one set of keys for both layouts, so only the step's own side's
/// count there).
pub(super) struct Watched<'a, E> {
    pub e: &'a E,
    pub ks: &'a Keyspace,
    pub heartbeats: bool,
}

/// Refuses with [`Refusal::Live`] when heartbeats or pending tickets show bots running on any
/// of `sides`.
pub(super) async fn refuse_if_live<A: Executor, B: Executor>(
    first: Watched<'_, A>,
    second: Option<Watched<'_, B>>,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<(), Error> {
    progress(&Progress {
        phase: "checking",
        ..Progress::default()
    });
    let mut found = LiveFound::default();
    let heartbeats = first.heartbeats.then(|| first.ks.heartbeat_pattern());
    found
        .scan(first.e, heartbeats.as_deref(), &tickets(first.ks))
        .await?;
    if let Some(second) = second {
        let heartbeats = second.heartbeats.then(|| second.ks.heartbeat_pattern());
        found
            .scan(second.e, heartbeats.as_deref(), &tickets(second.ks))
            .await?;
    }
    found.refuse()
}

/// Keys that show live bots: heartbeats and turn queues with pending tickets.
#[derive(Default)]
struct LiveFound {
    heartbeats: u64,
    tickets: u64,
    examples: Vec<String>,
}

impl LiveFound {
    /// Scans `e` for heartbeats and pending tickets.
    async fn scan<E: Executor>(
        &mut self,
        e: &E,
        heartbeats: Option<&str>,
        tickets: &str,
    ) -> Result<(), Error> {
        let patterns = heartbeats
            .map(|h| (h, true))
            .into_iter()
            .chain([(tickets, false)]);
        for (pattern, is_heartbeat) in patterns {
            let keys = e.run(crate::scan::scan(pattern, 1000)).await?;
            for key in &keys {
                if self.examples.len() < 5 {
                    self.examples
                        .push(String::from_utf8_lossy(key).into_owned());
                }
            }
            let n = keys.len() as u64;
            if is_heartbeat {
                self.heartbeats += n;
            } else {
                self.tickets += n;
            }
        }
        Ok(())
    }

    /// The refusal, when anything was found.
    fn refuse(self) -> Result<(), Error> {
        if self.heartbeats + self.tickets == 0 {
            return Ok(());
        }
        Err(Refusal::Live {
            heartbeats: self.heartbeats,
            tickets: self.tickets,
            examples: self.examples,
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(run_id: Option<&str>) -> Server {
        Server {
            nodes: vec![None],
            owners: Vec::new(),
            run_id: run_id.map(str::to_owned),
            described: format!("node {run_id:?}"),
        }
    }

    fn cluster() -> Server {
        Server {
            nodes: vec![Some("10.0.0.1:7000".into())],
            owners: vec![(0, 16383, "10.0.0.1:7000".into())],
            run_id: None,
            described: "a cluster".into(),
        }
    }

    #[test]
    fn servers_are_told_apart_by_run_id_and_the_callers_word_must_agree() {
        let (a, b, mute) = (node(Some("a")), node(Some("b")), node(None));
        assert_eq!(other_server(&a, &a, None), Ok(false));
        assert_eq!(other_server(&a, &b, None), Ok(true));
        assert_eq!(other_server(&a, &cluster(), None), Ok(true));
        assert_eq!(other_server(&a, &b, Some(true)), Ok(true));
        assert_eq!(other_server(&mute, &a, Some(false)), Ok(false));
        assert_eq!(
            other_server(&mute, &a, None),
            Err(Refusal::OtherServerUnknown.into())
        );
        assert!(matches!(
            other_server(&a, &a, Some(true)),
            Err(Error::Refused(Refusal::OtherServerMismatch {
                said: true,
                ..
            }))
        ));
        assert!(matches!(
            other_server(&cluster(), &a, Some(false)),
            Err(Error::Refused(Refusal::OtherServerMismatch {
                said: false,
                ..
            }))
        ));
    }

    #[test]
    fn a_sibling_exists_only_beside_a_separate_step_and_never_as_legacy_on_a_cluster() {
        let legacy = Keyspace::new(Layout::Legacy, "p").unwrap();
        let cluster_ks = Keyspace::new(Layout::Cluster, "p").unwrap();
        assert_eq!(sibling(Layout::Legacy, "p", true, false), Some(legacy));
        assert_eq!(sibling(Layout::Cluster, "p", true, true), Some(cluster_ks));
        assert_eq!(sibling(Layout::Legacy, "p", false, false), None);
        assert_eq!(sibling(Layout::Legacy, "p", true, true), None);
        // A braced prefix has no cluster-layout keyspace.
        assert_eq!(sibling(Layout::Cluster, "{p}", true, false), None);
    }
}
