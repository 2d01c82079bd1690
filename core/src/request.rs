//! Requests: one RESP command or script call, with its declared keys, its route, and whether it
//! reads or writes. A request whose keys span slots cannot be built.

use bytes::Bytes;
use std::fmt;
use std::sync::atomic::{AtomicU16, Ordering};

use crate::addr::NodeAddr;
use crate::error::{ConfigError, Error};
use crate::keys::Key;
use crate::one_or_vec::OneOrVec;
use crate::script::Script;
use crate::wire::{write_command, Decimal};

/// Whether a request changes data. Decides what happens when its reply is lost: a read may be
/// retried, a write never is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Only reads.
    Read,
    /// May write.
    Write,
}

/// Where a request must go.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// The master of this slot.
    Slot(u16),
    /// Any master (keyless commands such as `TIME`).
    AnyMaster,
    /// One node (`SCAN` on every master, one at a time), parsed when the request is built.
    Node(NodeTarget),
}

/// The node of a [`Route::Node`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NodeTarget {
    /// A node by its cluster address.
    Addr(NodeAddr),
    /// A port on the host of the node that gave the plan its first reply: how that node's
    /// `CLUSTER SLOTS` names a master whose endpoint it leaves unknown (`:port`).
    Port(u16),
}

impl NodeTarget {
    /// Parses `host:port`, `[v6]:port` or `:port`.
    pub fn parse(text: &str) -> Option<NodeTarget> {
        match text.strip_prefix(':') {
            Some(port) => port
                .parse()
                .ok()
                .filter(|&p: &u16| p != 0)
                .map(NodeTarget::Port),
            None => NodeAddr::parse(text, "").map(NodeTarget::Addr),
        }
    }
}

impl fmt::Display for NodeTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeTarget::Addr(addr) => write!(f, "{addr}"),
            NodeTarget::Port(port) => write!(f, ":{port}"),
        }
    }
}

/// What is sent.
#[derive(Clone, Debug)]
pub(crate) enum Body {
    /// A plain command: its name and its arguments after the name. When `lead`, the
    /// request's declared keys are not among `args`: they are sent right after the name,
    /// before `args` (`GET key`, `SET key value`), held once, in the request's keys; a `GET`
    /// then has no argument vector at all. Otherwise `args` holds every argument, keys
    /// included where they were added.
    Command {
        name: &'static str,
        lead: bool,
        args: Vec<Bytes>,
    },
    /// A script call: `EVALSHA sha numkeys keys... args...`, or `EVAL` after `NOSCRIPT`.
    Script {
        script: &'static Script,
        args: Vec<Bytes>,
    },
}

/// A request's declared keys: most commands have one, held inline so that building a `GET`
/// allocates nothing for it.
type Keys = OneOrVec<Key>;

/// A request's route as built. A keyed request goes by its first key's slot, which is computed
/// when the route is first asked for and kept: a single node never asks, and a `GET` there
/// costs no CRC; a cluster asks several times a call (the client's room, the session's routing,
/// a redirection) and pays one. Multi-key requests check their slots when built, so that a call
/// a cluster would refuse is refused on a single node too, and keep the first key's.
#[derive(Clone, Debug)]
enum Routed {
    FirstKey(FirstSlot),
    AnyMaster,
    Node(NodeTarget),
}

/// The first key's slot once computed. Filled through a shared reference, by whoever asks
/// first; an atomic so that a request stays `Sync` (a bot may share a built request between
/// tasks and clone it per call). Two threads that race both store the same slot.
#[derive(Debug)]
struct FirstSlot(AtomicU16);

impl FirstSlot {
    /// No slot is `u16::MAX`: slots are below 16384.
    const UNKNOWN: u16 = u16::MAX;

    fn unknown() -> Self {
        FirstSlot(AtomicU16::new(Self::UNKNOWN))
    }

    fn known(slot: u16) -> Self {
        FirstSlot(AtomicU16::new(slot))
    }

    fn of(&self, key: &Key) -> u16 {
        match self.0.load(Ordering::Relaxed) {
            Self::UNKNOWN => {
                let slot = key.slot();
                self.0.store(slot, Ordering::Relaxed);
                slot
            }
            slot => slot,
        }
    }
}

impl Clone for FirstSlot {
    fn clone(&self) -> Self {
        FirstSlot(AtomicU16::new(self.0.load(Ordering::Relaxed)))
    }
}

/// One request of a plan step.
#[derive(Clone, Debug)]
pub struct Request {
    pub(crate) body: Body,
    keys: Keys,
    route: Routed,
    access: Access,
    /// `WAIT replicas timeout_ms`, written right after the request (see [`Request::then_wait`]).
    /// Boxed: few requests have one, and the room it took inline pushed a request past the
    /// 128 bytes the compiler moves without a call to `memcpy`.
    wait: Option<Box<(u32, u64)>>,
}

/// A value that can be a command argument.
pub trait Arg {
    /// The argument's bytes.
    fn into_arg(self) -> Bytes;
}

impl Arg for Bytes {
    fn into_arg(self) -> Bytes {
        self
    }
}
impl Arg for &Bytes {
    fn into_arg(self) -> Bytes {
        self.clone()
    }
}
impl Arg for &[u8] {
    fn into_arg(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}
impl Arg for Vec<u8> {
    fn into_arg(self) -> Bytes {
        Bytes::from(self)
    }
}
impl Arg for &str {
    fn into_arg(self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }
}
impl Arg for String {
    fn into_arg(self) -> Bytes {
        Bytes::from(self)
    }
}
impl Arg for &String {
    fn into_arg(self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }
}
impl Arg for &Key {
    fn into_arg(self) -> Bytes {
        self.to_bytes()
    }
}
macro_rules! int_arg {
    ($($t:ty),*) => {$(
        impl Arg for $t {
            fn into_arg(self) -> Bytes {
                // Copied once into a buffer of its exact length: one allocation, and no
                // shared handle, since an argument is encoded where it lies (`crate::exact`).
                Bytes::copy_from_slice(itoa::Buffer::new().format(self).as_bytes())
            }
        }
    )*};
}
int_arg!(i64, u64, u32, usize, i32, u8, u16);

/// Builds a plain command; keys added with [`CommandBuilder::key`] are declared and checked.
#[derive(Debug)]
pub struct CommandBuilder {
    name: &'static str,
    /// Whether every key so far came before every other argument (see [`Body::Command`]).
    lead: bool,
    args: Vec<Bytes>,
    keys: Keys,
    access: Access,
    /// A node route as given, parsed by `build`.
    node: Option<String>,
}

impl CommandBuilder {
    /// Appends a key argument and declares it. Given the key by value, a request whose keys
    /// come first (`GET key`, `SET key value`) holds it once and copies nothing; given a
    /// reference, it holds a clone (a reference count, and on a key's first clone the
    /// allocation of that count).
    pub fn key(mut self, key: impl Into<Key>) -> Self {
        let key = key.into();
        if self.lead && !self.args.is_empty() {
            // A key after another argument: every argument goes in `args`, in order.
            self.lead = false;
            let lead: Vec<Bytes> = self.keys.iter().map(Key::to_bytes).collect();
            self.args.splice(0..0, lead);
        }
        if !self.lead {
            self.args.push(key.to_bytes());
        }
        self.keys.push(key);
        self
    }

    /// Appends a non-key argument.
    pub fn arg(mut self, arg: impl Arg) -> Self {
        self.args.push(arg.into_arg());
        self
    }

    /// Sends a keyless command to one node: `host:port`, `[v6]:port`, or `:port` on the host
    /// of the node that gave the plan its first reply. Parsed by [`CommandBuilder::build`].
    pub fn to_node(mut self, addr: impl Into<String>) -> Self {
        self.node = Some(addr.into());
        self
    }

    /// Builds a multi-key command for a single node, whose keys may hash to different slots
    /// (a migration's `MGET` of legacy keys): routed to any master, which on a single-node
    /// client is the node. On a cluster the server would answer `CROSSSLOT`, as for
    /// [`Request::single_node_script`].
    pub fn build_for_single_node(self) -> Request {
        Request {
            body: Body::Command {
                name: self.name,
                lead: self.lead,
                args: self.args,
            },
            keys: self.keys,
            route: match self.node.as_deref().and_then(NodeTarget::parse) {
                Some(target) => Routed::Node(target),
                None => Routed::AnyMaster,
            },
            access: self.access,
            wait: None,
        }
    }

    /// Checks that every key shares one slot (and that a node route is an address) and builds
    /// the request.
    pub fn build(self) -> Result<Request, Error> {
        let route = match self.node {
            Some(text) => Routed::Node(
                NodeTarget::parse(&text)
                    .ok_or_else(|| ConfigError::BadNodeAddress { text: text.clone() })?,
            ),
            None => route_of(&self.keys)?,
        };
        Ok(Request {
            body: Body::Command {
                name: self.name,
                lead: self.lead,
                args: self.args,
            },
            keys: self.keys,
            route,
            access: self.access,
            wait: None,
        })
    }
}

fn route_of(keys: &[Key]) -> Result<Routed, Error> {
    let [first, others @ ..] = keys else {
        return Ok(Routed::AnyMaster);
    };
    if others.is_empty() {
        return Ok(Routed::FirstKey(FirstSlot::unknown()));
    }
    let slot = first.slot();
    if let Some(other) = others.iter().find(|k| k.slot() != slot) {
        return Err(Error::CrossSlot {
            first: first.clone(),
            other: other.clone(),
        });
    }
    Ok(Routed::FirstKey(FirstSlot::known(slot)))
}

impl Request {
    /// Starts a plain command named `name` (`GET`, `ZADD`, ...).
    pub fn cmd(access: Access, name: &'static str) -> CommandBuilder {
        // No vector until an argument other than a leading key comes: a `GET` has none.
        CommandBuilder {
            name,
            lead: true,
            args: Vec::new(),
            keys: Keys::new(),
            access,
            node: None,
        }
    }

    /// A script call. Every key the script touches is in `keys`, all in one slot; the call is
    /// routed by the first key.
    pub fn script(
        script: &'static Script,
        access: Access,
        keys: Vec<Key>,
        args: Vec<Bytes>,
    ) -> Result<Request, Error> {
        let route = route_of(&keys)?;
        Ok(Request {
            body: Body::Script { script, args },
            keys: Keys::from_vec(keys),
            route,
            access,
            wait: None,
        })
    }

    /// A script call in the layout's way: checked to one slot in the cluster layout; sent to
    /// the single node in the legacy layout, whose keys carry no hash tags (a lock and its
    /// fence, or a message log and its items, hash to different slots there).
    pub fn script_in(
        ks: &crate::keys::Keyspace,
        script: &'static Script,
        access: Access,
        keys: Vec<Key>,
        args: Vec<Bytes>,
    ) -> Result<Request, Error> {
        match ks.layout() {
            crate::keys::Layout::Cluster => Request::script(script, access, keys, args),
            crate::keys::Layout::Legacy => {
                Ok(Request::single_node_script(script, access, keys, args))
            }
        }
    }

    /// A script call for a single node, whose keys may hash to different slots: the legacy
    /// layout's multi-key scripts (its key names carry no hash tags). Routed to any master, which
    /// on a single-node client is the node. On a cluster the server would answer `CROSSSLOT`;
    /// a legacy-layout store refuses a cluster client at construction, so it never gets there.
    pub fn single_node_script(
        script: &'static Script,
        access: Access,
        keys: Vec<Key>,
        args: Vec<Bytes>,
    ) -> Request {
        Request {
            body: Body::Script { script, args },
            keys: Keys::from_vec(keys),
            route: Routed::AnyMaster,
            access,
            wait: None,
        }
    }

    /// Follows a grant with `WAIT replicas timeout_ms` on the same connection, as soon as the
    /// grant is answered with something other than nil: `WAIT` counts the writes of its own
    /// connection, so only there does it say whether replicas acknowledged this one. A nil
    /// answer (nothing granted) or an error reply sends no `WAIT`.
    ///
    /// The reply is then a two-element array: this request's value, and `WAIT`'s count, or its
    /// error as a status starting with `-`, or nil when none came (nothing was granted, or the
    /// connection was lost before `WAIT` answered: the grant's replication is then unknown).
    /// An error reply to the request itself comes as usual. The session refuses a timeout at or
    /// above its response timeout, which would close the connection under the waiting `WAIT`.
    pub fn then_wait(mut self, replicas: u32, timeout_ms: u64) -> Request {
        self.wait = Some(Box::new((replicas, timeout_ms)));
        self
    }

    /// The `WAIT` that follows this request: replicas and timeout in milliseconds.
    pub fn wait(&self) -> Option<(u32, u64)> {
        self.wait.as_deref().copied()
    }

    /// Whether the server may hold this request's reply back by design: a blocking command
    /// (`BLPOP`, `BRPOP`, `BRPOPLPUSH`, `BLMOVE`, `BLMPOP`, `BZPOPMIN`, `BZPOPMAX`, `BZMPOP`,
    /// `XREAD` or `XREADGROUP` with `BLOCK`, `WAIT`, `WAITAOF`), or a request followed by a
    /// `WAIT` ([`Request::then_wait`]). A script is taken not to block.
    pub fn blocks(&self) -> bool {
        self.wait.is_some()
            || matches!(&self.body, Body::Command { name, args, .. } if crate::blocking::blocks(name, args))
    }

    /// The script's name, or the command's name: what a log line or a snapshot calls it.
    pub fn name(&self) -> String {
        match &self.body {
            Body::Script { script, .. } => script.name().to_owned(),
            Body::Command { name, .. } => (*name).to_owned(),
        }
    }

    /// The arguments after the name (for a script, after `numkeys` and the keys), as text with
    /// invalid UTF-8 replaced: for logs, snapshots and tests.
    pub fn arguments(&self) -> Vec<String> {
        let text = |a: &[u8]| String::from_utf8_lossy(a).into_owned();
        let keys: &[Key] = match &self.body {
            Body::Command { lead: true, .. } => &self.keys,
            Body::Command { .. } | Body::Script { .. } => &[],
        };
        let args = match &self.body {
            Body::Script { args, .. } | Body::Command { args, .. } => args,
        };
        keys.iter()
            .map(|k| text(k.as_bytes()))
            .chain(args.iter().map(|a| text(a)))
            .collect()
    }

    /// The declared keys.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// The route; a keyed request's slot is computed on the first call.
    pub fn route(&self) -> Route {
        match &self.route {
            Routed::FirstKey(_) => self.slot().map_or(Route::AnyMaster, Route::Slot),
            Routed::AnyMaster => Route::AnyMaster,
            Routed::Node(target) => Route::Node(target.clone()),
        }
    }

    /// The node the request is addressed to, for node-routed requests: what
    /// [`Request::route`] says without computing a slot or cloning the target.
    pub fn node(&self) -> Option<&NodeTarget> {
        match &self.route {
            Routed::Node(target) => Some(target),
            Routed::FirstKey(_) | Routed::AnyMaster => None,
        }
    }

    /// The key whose slot routes the request, for slot-routed requests: its first.
    pub fn slot_key(&self) -> Option<&Key> {
        match self.route {
            Routed::FirstKey(_) => self.keys.first(),
            Routed::AnyMaster | Routed::Node(_) => None,
        }
    }

    /// Moves the key [`Request::slot_key`] names out, leaving an empty key in its place: for
    /// a request that is done with, whose key the session keeps for its summary without a
    /// clone.
    pub(crate) fn take_slot_key(&mut self) -> Option<Key> {
        match self.route {
            Routed::FirstKey(_) => self
                .keys
                .first_mut()
                .map(|key| std::mem::replace(key, Key::new(Bytes::new()))),
            Routed::AnyMaster | Routed::Node(_) => None,
        }
    }

    /// Read or write.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The slot, for slot-routed requests.
    pub fn slot(&self) -> Option<u16> {
        match &self.route {
            Routed::FirstKey(first) => self.keys.first().map(|key| first.of(key)),
            Routed::AnyMaster | Routed::Node(_) => None,
        }
    }

    /// The script, for script calls.
    pub fn script_ref(&self) -> Option<&'static Script> {
        match &self.body {
            Body::Script { script, .. } => Some(script),
            Body::Command { .. } => None,
        }
    }

    /// The RESP argument vector as sent: `EVALSHA` for scripts, or `EVAL` with the source when
    /// `with_source` (the `NOSCRIPT` fallback).
    pub fn wire_args(&self, with_source: bool) -> Vec<Bytes> {
        match &self.body {
            Body::Command { name, lead, args } => {
                let keys: &[Key] = if *lead { &self.keys } else { &[] };
                let mut out = Vec::with_capacity(1 + keys.len() + args.len());
                out.push(Bytes::from_static(name.as_bytes()));
                out.extend(keys.iter().map(Key::to_bytes));
                out.extend(args.iter().cloned());
                out
            }
            Body::Script { script, args } => {
                let mut out = Vec::with_capacity(3 + self.keys.len() + args.len());
                if with_source {
                    out.push(Bytes::from_static(b"EVAL"));
                    out.push(Bytes::from_static(script.source().as_bytes()));
                } else {
                    out.push(Bytes::from_static(b"EVALSHA"));
                    out.push(script.sha1().clone());
                }
                out.push(Bytes::from(self.keys.len().to_string()));
                out.extend(self.keys.iter().map(Key::to_bytes));
                out.extend(args.iter().cloned());
                out
            }
        }
    }

    /// Appends the RESP2 encoding of this request to `buf`: `EVALSHA` for scripts, or `EVAL`
    /// with the source when `with_source` (the `NOSCRIPT` fallback). Encodes from borrowed
    /// slices, so sending a request copies each argument once, into `buf`.
    pub fn encode(&self, with_source: bool, buf: &mut bytes::BytesMut) {
        match &self.body {
            Body::Command { name, lead, args } => {
                let keys: &[Key] = if *lead { &self.keys } else { &[] };
                let keys = keys.iter().map(Key::as_bytes);
                let rest = args.iter().map(|a| &a[..]);
                write_command(
                    buf,
                    std::iter::once(name.as_bytes()).chain(keys).chain(rest),
                )
            }
            Body::Script { script, args } => {
                let (verb, body): (&[u8], &[u8]) = if with_source {
                    (b"EVAL", script.source().as_bytes())
                } else {
                    (b"EVALSHA", script.sha1())
                };
                let numkeys = Decimal::new(self.keys.len());
                let head = [verb, body, numkeys.as_bytes()];
                let keys = self.keys.iter().map(Key::as_bytes);
                let rest = args.iter().map(|a| &a[..]);
                write_command(buf, head.into_iter().chain(keys).chain(rest));
            }
        }
    }
}

/// Renders bytes for humans: printable ASCII as is, everything else escaped, long values cut.
pub(crate) fn render_bytes(b: &[u8], out: &mut String) {
    const MAX: usize = 80;
    let shown = &b[..b.len().min(MAX)];
    out.push_str(&shown.escape_ascii().to_string());
    if b.len() > MAX {
        out.push_str(&format!("…(+{} bytes)", b.len() - MAX));
    }
}

impl fmt::Display for Request {
    /// `EVALSHA save_message slot=4211 keys=[a b] args=[x y]` or `GET slot=1 keys=[a] args=[]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        let (head, args): (String, Vec<Bytes>) = match &self.body {
            Body::Script { script, args } => (format!("EVALSHA {}", script.name()), args.clone()),
            Body::Command {
                name,
                lead: true,
                args,
            } => ((*name).to_owned(), args.clone()),
            Body::Command { name, args, .. } => {
                // Show the arguments that are not declared keys, in order.
                let mut rest = Vec::new();
                let mut keys = self.keys.iter().peekable();
                for arg in args {
                    if keys.peek().is_some_and(|k| k.as_bytes() == arg.as_ref()) {
                        keys.next();
                    } else {
                        rest.push(arg.clone());
                    }
                }
                ((*name).to_owned(), rest)
            }
        };
        out.push_str(&head);
        match self.route() {
            Route::Slot(s) => out.push_str(&format!(" slot={s}")),
            Route::AnyMaster => out.push_str(" any-master"),
            Route::Node(addr) => out.push_str(&format!(" node={addr}")),
        }
        if self.access == Access::Read {
            out.push_str(" read");
        }
        if let Some((replicas, ms)) = self.wait() {
            out.push_str(&format!(" then=[WAIT {replicas} {ms}]"));
        }
        out.push_str(" keys=[");
        for (i, k) in self.keys.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            render_bytes(k.as_bytes(), &mut out);
        }
        out.push_str("] args=[");
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            render_bytes(a, &mut out);
        }
        out.push(']');
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_slot_commands_are_refused() {
        let a = Key::new(&b"{a}x"[..]);
        let b = Key::new(&b"{b}x"[..]);
        let err = Request::cmd(Access::Read, "MGET")
            .key(&a)
            .key(&b)
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::CrossSlot { .. }), "{err:?}");
        let ok = Request::cmd(Access::Read, "MGET")
            .key(&a)
            .key(Key::new(&b"{a}y"[..]))
            .build()
            .unwrap();
        assert_eq!(ok.slot(), Some(a.slot()));
    }

    #[test]
    fn script_encoding_matches_the_argument_vector() {
        let keys = vec![Key::new(&b"{c}:z"[..]), Key::new(&b"{c}:i:1"[..])];
        let args = vec![Bytes::from_static(b"1"), Bytes::from_static(b"")];
        let req =
            Request::script(&crate::scripts::SAVE_MESSAGE, Access::Write, keys, args).unwrap();
        for with_source in [false, true] {
            let mut direct = bytes::BytesMut::new();
            req.encode(with_source, &mut direct);
            // redis-protocol, with every argument as a bulk string, is the reference.
            let frame = redis_protocol::resp2::types::BytesFrame::Array(
                req.wire_args(with_source)
                    .into_iter()
                    .map(redis_protocol::resp2::types::BytesFrame::BulkString)
                    .collect(),
            );
            let mut reference = bytes::BytesMut::new();
            redis_protocol::resp2::encode::extend_encode(&mut reference, &frame, false).unwrap();
            assert_eq!(direct, reference, "with_source={with_source}");
        }
    }

    proptest::proptest! {
        /// Keys held apart from the other arguments (leading ones) or among them (after
        /// another argument) are sent, listed and shown in the order they were added, and
        /// a key given by value is sent as one given by reference.
        #[test]
        fn keys_go_out_where_they_were_added(
            items in proptest::collection::vec((proptest::bool::ANY, "[a-c]{0,3}"), 0..6),
            by_value in proptest::bool::ANY,
        ) {
            // Every key in one slot, so that any mix builds.
            let mut cmd = Request::cmd(Access::Write, "CMD");
            let mut expected = vec![Bytes::from_static(b"CMD")];
            let (mut keys, mut others) = (Vec::new(), Vec::new());
            for (is_key, text) in &items {
                if *is_key {
                    let key = Key::new(format!("{{t}}{text}"));
                    expected.push(key.to_bytes());
                    keys.push(key.clone());
                    cmd = if by_value { cmd.key(key) } else { cmd.key(&key) };
                } else {
                    expected.push(Bytes::from(text.clone()));
                    others.push(text.clone());
                    cmd = cmd.arg(text.as_str());
                }
            }
            let req = cmd.build().unwrap();
            proptest::prop_assert_eq!(req.wire_args(false), expected.clone());
            let mut direct = bytes::BytesMut::new();
            req.encode(false, &mut direct);
            let frame = redis_protocol::resp2::types::BytesFrame::Array(
                expected
                    .iter()
                    .cloned()
                    .map(redis_protocol::resp2::types::BytesFrame::BulkString)
                    .collect(),
            );
            let mut reference = bytes::BytesMut::new();
            redis_protocol::resp2::encode::extend_encode(&mut reference, &frame, false).unwrap();
            proptest::prop_assert_eq!(direct, reference);
            let arguments: Vec<String> = expected[1..]
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            proptest::prop_assert_eq!(req.arguments(), arguments);
            proptest::prop_assert_eq!(req.keys(), &keys[..]);
            proptest::prop_assert_eq!(req.slot(), keys.first().map(Key::slot));
            let shown = req.to_string();
            proptest::prop_assert!(
                shown.ends_with(&format!("args=[{}]", others.join(" "))),
                "{}",
                shown
            );
        }
    }

    #[test]
    fn a_request_keeps_its_first_keys_slot_however_often_asked() {
        fn send_and_sync<T: Send + Sync>() {}
        send_and_sync::<Request>();
        for text in ["k", "{t}k", "bench:k:17", "{m:c%201}:i:9", "{}x", ""] {
            let key = Key::new(text);
            let get = Request::cmd(Access::Read, "GET").key(&key).build().unwrap();
            let before = get.clone();
            assert_eq!(get.slot(), Some(key.slot()), "{text}");
            let after = get.clone();
            assert_eq!(get.route(), Route::Slot(key.slot()), "{text}");
            assert_eq!(before.slot(), Some(key.slot()), "{text}");
            assert_eq!(after.slot(), Some(key.slot()), "{text}");
        }
        // A multi-key request has its slot from the check that the keys share one.
        let keys = vec![Key::new("{c}:z"), Key::new("{c}:i:1")];
        let script = Request::script(
            &crate::scripts::SAVE_MESSAGE,
            Access::Write,
            keys.clone(),
            vec![],
        )
        .unwrap();
        assert_eq!(script.slot(), Some(keys[0].slot()));
        assert_eq!(script.route(), Route::Slot(keys[0].slot()));
        // A request done with keeps the slot it was routed by.
        let mut get = Request::cmd(Access::Read, "GET")
            .key(Key::new("{t}k"))
            .build()
            .unwrap();
        let slot = get.slot();
        get.take_slot_key();
        assert_eq!(get.slot(), slot);
    }

    #[test]
    fn a_done_request_gives_its_slot_key_up_once() {
        let key = Key::new("{t}k");
        let mut get = Request::cmd(Access::Read, "GET").key(&key).build().unwrap();
        assert_eq!(get.take_slot_key(), Some(key));
        assert_eq!(get.take_slot_key(), Some(Key::new("")));
        let mut time = Request::cmd(Access::Read, "TIME").build().unwrap();
        assert_eq!(time.take_slot_key(), None);
    }

    #[test]
    fn encoding_is_resp2_bulk_array() {
        let req = Request::cmd(Access::Write, "SET")
            .key(Key::new(&b"k"[..]))
            .arg("v")
            .build()
            .unwrap();
        let mut buf = bytes::BytesMut::new();
        req.encode(false, &mut buf);
        assert_eq!(&buf[..], b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
        assert_eq!(req.to_string(), "SET slot=7629 keys=[k] args=[v]");
    }
}
