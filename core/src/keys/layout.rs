//! The two key layouts, `legacy` and `cluster:v1`, and every key of every namespace in each.
//!
//! One method per datum, with both layouts side by side, so the whole contract of
//! `docs/key-layout.md` can be read (and reviewed) in one place. Nothing outside this module
//! formats a key name.

use super::encoding::{bucket, glob_escape, push_enc, Key, BUCKET_COUNT};
use std::fmt;

/// A key under a keyspace's prefix, from its pieces in order: a `&str` as it is, [`Enc`] of a
/// segment percent-encoded, a `u8` (a bucket) in decimal.
///
/// Each piece is pushed straight into the key's one `String`. Formatting the same text with
/// `write!` took twice the instructions (its dispatch per piece and through `Display`), and
/// two keys were two thirds of building a `save_message` (callgrind, docs/performance.md,
/// "Keys without the formatter").
macro_rules! key {
    ($keyspace:expr, $($piece:expr),+ $(,)?) => {{
        let mut text = $keyspace.key_text();
        $(Piece::push($piece, &mut text);)+
        Key::new(text.into_bytes())
    }};
}

/// One piece of a key's text, for [`key!`].
trait Piece {
    fn push(self, text: &mut String);
}

impl Piece for &str {
    fn push(self, text: &mut String) {
        text.push_str(self);
    }
}

/// A segment written percent-encoded, as [`enc`](super::enc) spells it: of a `str`, or of
/// raw bytes (an id read back from a log, which need not be UTF-8), byte by byte alike.
struct Enc<'a, T: ?Sized>(&'a T);

impl<T: AsRef<[u8]> + ?Sized> Piece for Enc<'_, T> {
    fn push(self, text: &mut String) {
        push_enc(text, self.0.as_ref());
    }
}

impl Piece for u8 {
    fn push(self, text: &mut String) {
        text.push_str(itoa::Buffer::new().format(self));
    }
}

/// The value of the layout marker key in the cluster layout.
pub const CLUSTER_V1: &str = "cluster:v1";

/// A key layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layout {
    /// The historical single-node layout: raw segments, `SCAN` listings, `MULTI`.
    Legacy,
    /// The `cluster:v1` layout: hash tags, encoded segments, bucket indexes, a layout marker.
    Cluster,
}

impl Layout {
    /// The name users write in configuration (`legacy`, `cluster`).
    pub fn name(self) -> &'static str {
        match self {
            Layout::Legacy => "legacy",
            Layout::Cluster => "cluster",
        }
    }

    /// The other layout: where a migration or a rollback of this one goes.
    pub fn other(self) -> Layout {
        match self {
            Layout::Legacy => Layout::Cluster,
            Layout::Cluster => Layout::Legacy,
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reads a layout as written in configuration: `legacy`, `cluster`, or `cluster:v1` (the value
/// of the layout marker, [`CLUSTER_V1`], which names the cluster layout too). Case-sensitive,
/// like the marker, and without trimming: a config file's `"Cluster "` is a mistake to report,
/// not to guess at.
///
/// ```
/// use botmesh_redis_core::Layout;
///
/// assert_eq!("cluster".parse(), Ok(Layout::Cluster));
/// assert_eq!("cluster:v1".parse(), Ok(Layout::Cluster));
/// assert_eq!("legacy".parse::<Layout>().map(|l| l.to_string()).as_deref(), Ok("legacy"));
/// assert!("Cluster".parse::<Layout>().is_err());
/// ```
impl std::str::FromStr for Layout {
    type Err = ParseLayoutError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "legacy" => Ok(Layout::Legacy),
            "cluster" | CLUSTER_V1 => Ok(Layout::Cluster),
            other => Err(ParseLayoutError {
                text: other.to_owned(),
            }),
        }
    }
}

/// A layout name that is none of `legacy`, `cluster` or `cluster:v1` ([`Layout`]'s `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown key layout {text:?}: the layouts are \"legacy\" and \"cluster\" (also written \
     \"cluster:v1\"), in lower case"
)]
pub struct ParseLayoutError {
    text: String,
}

impl ParseLayoutError {
    /// The refused text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

// The layout is written as its name, so a config file says `layout = "cluster"`; reading goes
// through `FromStr`, so the marker's `cluster:v1` is accepted too.
#[cfg(feature = "serde")]
impl serde::Serialize for Layout {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Layout {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = Layout;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key layout: \"legacy\", \"cluster\" or \"cluster:v1\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Layout, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// A configuration mistake in a prefix or a name, found before anything is sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The prefix is empty: every key must carry the bot's prefix.
    #[error("the key prefix is empty")]
    EmptyPrefix,
    /// A `{` or `}` in a cluster-layout prefix would become or break a hash tag.
    #[error(
        "the prefix {prefix:?} contains {{ or }}, which the cluster layout reserves for hash tags"
    )]
    BraceInClusterPrefix {
        /// The refused prefix.
        prefix: String,
    },
    /// The legacy layout joins raw segments with `:`, so a `:` in a user id or a user-data
    /// namespace would make the entry's name read back as another user's or namespace's
    /// (`docs/key-layout.md`). The cluster layout holds any id.
    #[error(
        "the legacy layout cannot hold the {field} {value:?}: a ':' in it would make the key \
         name ambiguous; use the cluster layout, which also runs on a single node"
    )]
    LegacyColon {
        /// Which id (`user id`, `namespace`).
        field: &'static str,
        /// The refused id.
        value: String,
    },
    /// A durability table name must be non-empty and free of braces, since it is the hash tag.
    #[error("the durability table name {table:?} is empty or contains {{ or }}")]
    BadTableName {
        /// The refused table name.
        table: String,
    },
}

/// The kinds of record kept in 32 bucket indexes in the cluster layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordKind {
    /// Chat records (`ch`).
    Chat,
    /// Contact records (`ct`).
    Contact,
    /// Checkpoints (`cp`), which expire.
    Checkpoint,
    /// Schedules (`sc`), which carry a fencing token.
    Schedule,
}

impl RecordKind {
    /// Every record kind, in contract order.
    pub const ALL: [RecordKind; 4] = [
        RecordKind::Chat,
        RecordKind::Contact,
        RecordKind::Checkpoint,
        RecordKind::Schedule,
    ];

    /// The tag word of the cluster layout (`ch`, `ct`, `cp`, `sc`).
    pub fn tag(self) -> &'static str {
        match self {
            RecordKind::Chat => "ch",
            RecordKind::Contact => "ct",
            RecordKind::Checkpoint => "cp",
            RecordKind::Schedule => "sc",
        }
    }

    /// The namespace word of the legacy layout.
    pub fn legacy_name(self) -> &'static str {
        match self {
            RecordKind::Chat => "chat",
            RecordKind::Contact => "contact",
            RecordKind::Checkpoint => "checkpoint",
            RecordKind::Schedule => "schedule",
        }
    }
}

/// The keys of a per-chat turn queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TurnPart {
    /// The ticket counter.
    Seq,
    /// The queue of waiting tickets.
    Tix,
    /// The ticket being served.
    Serving,
    /// The holder, with a TTL.
    Owner,
    /// The last holder, reported to a waiter that may skip it.
    Last,
}

impl TurnPart {
    /// Every part, in contract order.
    pub const ALL: [TurnPart; 5] = [
        TurnPart::Seq,
        TurnPart::Tix,
        TurnPart::Serving,
        TurnPart::Owner,
        TurnPart::Last,
    ];

    /// The key suffix.
    pub fn name(self) -> &'static str {
        match self {
            TurnPart::Seq => "seq",
            TurnPart::Tix => "tix",
            TurnPart::Serving => "serving",
            TurnPart::Owner => "owner",
            TurnPart::Last => "last",
        }
    }
}

/// A validated prefix in a chosen layout: the source of every key the store uses.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Keyspace {
    layout: Layout,
    prefix: String,
}

impl Keyspace {
    /// Validates `prefix` for `layout`.
    pub fn new(layout: Layout, prefix: impl Into<String>) -> Result<Self, KeyError> {
        let prefix = prefix.into();
        if prefix.is_empty() {
            return Err(KeyError::EmptyPrefix);
        }
        if layout == Layout::Cluster && prefix.contains(['{', '}']) {
            return Err(KeyError::BraceInClusterPrefix { prefix });
        }
        Ok(Keyspace { layout, prefix })
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The prefix, as configured.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The text of a key under this prefix, ready for its pieces (see [`key!`]).
    fn key_text(&self) -> String {
        // Most keys fit, so the text is built in one allocation. It is not copied to an
        // allocation of its exact length (`exact`'s way for arguments): a key is cloned into
        // most commands, and `Bytes` allocates its shared handle at the first clone of an exact
        // buffer anyway, after a costlier promotion (callgrind of the million-key migration:
        // 2.6% more instructions).
        let mut key = String::with_capacity(self.prefix.len() + 64);
        key.push_str(&self.prefix);
        key.push(':');
        key
    }

    fn is_cluster(&self) -> bool {
        self.layout == Layout::Cluster
    }

    // --- messages -------------------------------------------------------------------------

    /// The message log of a chat: a sorted set, member = message id, score = time in ms.
    pub fn message_log(&self, chat: &str) -> Key {
        match self.layout {
            Layout::Legacy => key!(self, "msgs:", chat),
            Layout::Cluster => key!(self, "{m:", Enc(chat), "}:z"),
        }
    }

    /// A chat's log while `delete_chat` drains it, in the log's slot.
    pub fn message_drain(&self, chat: &str) -> Key {
        match self.layout {
            Layout::Legacy => key!(self, "msgs-deleting:", chat),
            Layout::Cluster => key!(self, "{m:", Enc(chat), "}:d"),
        }
    }

    /// One message's item.
    pub fn message_item(&self, chat: &str, id: &str) -> Key {
        match self.layout {
            Layout::Legacy => key!(self, "msg:", chat, ":", id),
            Layout::Cluster => key!(self, "{m:", Enc(chat), "}:i:", Enc(id)),
        }
    }

    /// One message's item, for an id read back from a log as bytes (a log another program
    /// wrote may hold ids that are not UTF-8): the legacy name holds the id's bytes as they
    /// are, the cluster one `enc` of them, byte by byte, as for any id. Equal to
    /// [`message_item`](Self::message_item) for a UTF-8 id.
    pub fn message_item_raw(&self, chat: &str, id: &[u8]) -> Key {
        match std::str::from_utf8(id) {
            Ok(id) => self.message_item(chat, id),
            Err(_) => match self.layout {
                Layout::Legacy => {
                    // The id's bytes as they are: not UTF-8, so not a piece of a `String`.
                    let mut key = self.key_text();
                    key.push_str("msg:");
                    key.push_str(chat);
                    key.push(':');
                    let mut key = key.into_bytes();
                    key.extend_from_slice(id);
                    Key::new(key)
                }
                Layout::Cluster => key!(self, "{m:", Enc(chat), "}:i:", Enc(id)),
            },
        }
    }

    // --- records: chats, contacts, checkpoints, schedules ---------------------------------

    /// A record of `kind`.
    pub fn record(&self, kind: RecordKind, id: &str) -> Key {
        match self.layout {
            Layout::Legacy => key!(self, kind.legacy_name(), ":", id),
            Layout::Cluster => key!(self, "{", kind.tag(), ":", bucket(id), "}:r:", Enc(id)),
        }
    }

    /// The index of the bucket that holds `id`, in the record's slot (cluster layout only).
    pub fn record_index_of(&self, kind: RecordKind, id: &str) -> Option<Key> {
        self.record_index(kind, bucket(id))
    }

    /// The index of bucket `b` of `kind` (cluster layout only; `None` in legacy or out of range).
    pub fn record_index(&self, kind: RecordKind, b: u8) -> Option<Key> {
        (self.is_cluster() && b < BUCKET_COUNT)
            .then(|| key!(self, "{", kind.tag(), ":", b, "}:idx"))
    }

    /// All bucket indexes of `kind`, in bucket order (empty in the legacy layout).
    pub fn record_indexes(&self, kind: RecordKind) -> Vec<Key> {
        (0..BUCKET_COUNT)
            .filter_map(|b| self.record_index(kind, b))
            .collect()
    }

    /// The `SCAN MATCH` pattern for records of `kind` (legacy layout only).
    pub fn record_pattern(&self, kind: RecordKind) -> Option<String> {
        (!self.is_cluster())
            .then(|| format!("{}:{}:*", glob_escape(&self.prefix), kind.legacy_name()))
    }

    // --- user data ------------------------------------------------------------------------

    /// One user-data entry (`ctx.user`).
    pub fn user_entry(&self, user: &str, ns: &str, key: &str) -> Key {
        match self.layout {
            Layout::Legacy => key!(self, "user:", user, ":", ns, ":", key),
            Layout::Cluster => key!(self, "{ud:", Enc(user), "}:e:", Enc(ns), ":", Enc(key)),
        }
    }

    /// A user's entry index, scored by expiry (cluster layout only).
    pub fn user_index(&self, user: &str) -> Option<Key> {
        self.is_cluster()
            .then(|| key!(self, "{ud:", Enc(user), "}:idx"))
    }

    /// The `SCAN MATCH` pattern for a user's entries, optionally in one namespace (legacy only).
    pub fn user_pattern(&self, user: &str, ns: Option<&str>) -> Option<String> {
        use super::encoding::glob_escape as g;
        (!self.is_cluster()).then(|| match ns {
            Some(ns) => format!("{}:user:{}:{}:*", g(&self.prefix), g(user), g(ns)),
            None => format!("{}:user:{}:*", g(&self.prefix), g(user)),
        })
    }

    // --- coordination ---------------------------------------------------------------------

    /// A lock's holder key.
    pub fn lock(&self, key: &str) -> Key {
        match self.layout {
            Layout::Legacy => key!(self, "lock:", key),
            Layout::Cluster => key!(self, "{lk:", Enc(key), "}:l"),
        }
    }

    /// A lock's fence counter, which is never deleted.
    pub fn lock_fence(&self, key: &str) -> Key {
        match self.layout {
            Layout::Legacy => key!(self, "fence:", key),
            Layout::Cluster => key!(self, "{lk:", Enc(key), "}:f"),
        }
    }

    /// One key of a chat's turn queue.
    pub fn turn(&self, chat: &str, part: TurnPart) -> Key {
        match self.layout {
            Layout::Legacy => key!(self, "co:turn:", chat, ":", part.name()),
            Layout::Cluster => key!(self, "co:{t:", Enc(chat), "}:", part.name()),
        }
    }

    /// A leadership's holder key.
    pub fn leader(&self, name: &str) -> Key {
        match self.layout {
            Layout::Legacy => key!(self, "co:leader:", name),
            Layout::Cluster => key!(self, "co:{ld:", Enc(name), "}"),
        }
    }

    /// A leadership's term counter, which is never deleted.
    pub fn leader_term(&self, name: &str) -> Key {
        match self.layout {
            Layout::Legacy => key!(self, "co:term:", name),
            Layout::Cluster => key!(self, "co:{ld:", Enc(name), "}:term"),
        }
    }

    // --- unchanged between layouts --------------------------------------------------------

    /// A replica's heartbeat (same name in both layouts).
    pub fn heartbeat(&self, replica: &str) -> Key {
        key!(self, "co:rep:", replica)
    }

    /// The `SCAN MATCH` pattern of every heartbeat.
    pub fn heartbeat_pattern(&self) -> String {
        format!("{}:co:rep:*", glob_escape(&self.prefix))
    }

    /// A chat's conversation state (same name in both layouts).
    pub fn conversation(&self, chat: &str) -> Key {
        key!(self, "conv:", chat)
    }

    /// A named cursor (same name in both layouts).
    pub fn cursor(&self, name: &str) -> Key {
        key!(self, "cursor:", name)
    }

    /// A named lease (same name in both layouts).
    pub fn lease(&self, name: &str) -> Key {
        key!(self, "lease:", name)
    }

    /// One key of a durability table; the table name is the hash tag in both layouts.
    pub fn durable(&self, table: &str, part: &str) -> Result<Key, KeyError> {
        if table.is_empty() || table.contains(['{', '}']) {
            return Err(KeyError::BadTableName {
                table: table.to_owned(),
            });
        }
        Ok(key!(self, "{durable:", table, "}:", part))
    }

    /// The layout marker, `p:{meta}:layout`, whose value is [`CLUSTER_V1`].
    pub fn marker(&self) -> Key {
        key!(self, "{meta}:layout")
    }

    /// This layout's lifecycle record under the prefix, `p:{meta}:lifecycle:<layout>` (a hash):
    /// the migration's account of this keyspace (`docs/migration.md`, "The lifecycle"). Both
    /// layouts keep theirs beside the marker, in the `{meta}` slot, so the two records of an
    /// in-place migration and the marker can be read in one call.
    pub fn lifecycle(&self) -> Key {
        key!(self, "{meta}:lifecycle:", self.layout.name())
    }

    /// The `SCAN MATCH` pattern of every key under the prefix.
    pub fn prefix_pattern(&self) -> String {
        format!("{}:*", glob_escape(&self.prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_names_round_trip() {
        for layout in [Layout::Legacy, Layout::Cluster] {
            assert_eq!(layout.to_string().parse::<Layout>(), Ok(layout));
            assert_eq!(layout.name().parse::<Layout>(), Ok(layout));
        }
        assert_eq!(CLUSTER_V1.parse::<Layout>(), Ok(Layout::Cluster));
    }

    #[test]
    fn layout_names_are_exact() {
        for text in [
            "",
            "Cluster",
            "LEGACY",
            " cluster",
            "cluster ",
            "cluster:v2",
            "v1",
        ] {
            let err = text.parse::<Layout>().unwrap_err();
            assert_eq!(err.text(), text);
            let message = err.to_string();
            assert!(message.contains(&format!("{text:?}")), "{message}");
            assert!(message.contains("\"legacy\""), "{message}");
            assert!(message.contains("\"cluster:v1\""), "{message}");
        }
    }

    #[test]
    fn cluster_keys_share_their_group_slot() {
        let ks = Keyspace::new(Layout::Cluster, "bot").unwrap();
        assert_eq!(ks.message_log("c1").to_string(), "bot:{m:c1}:z");
        assert_eq!(
            ks.message_item("c1", "m1").slot(),
            ks.message_log("c1").slot()
        );
        let rec = ks.record(RecordKind::Chat, "chat-1");
        assert_eq!(rec.to_string(), "bot:{ch:25}:r:chat-1");
        assert_eq!(
            ks.record_index_of(RecordKind::Chat, "chat-1")
                .unwrap()
                .to_string(),
            "bot:{ch:25}:idx"
        );
        assert_eq!(ks.marker().to_string(), "bot:{meta}:layout");
    }

    #[test]
    fn legacy_has_no_indexes() {
        let ks = Keyspace::new(Layout::Legacy, "bot").unwrap();
        assert!(ks.record_indexes(RecordKind::Chat).is_empty());
        assert_eq!(ks.user_index("u"), None);
        assert_eq!(
            ks.record_pattern(RecordKind::Chat).as_deref(),
            Some("bot:chat:*")
        );
    }

    #[test]
    fn raw_message_ids_keep_or_encode_their_bytes() {
        let id = b"m\xff:{x}";
        let legacy = Keyspace::new(Layout::Legacy, "bot").unwrap();
        assert_eq!(
            legacy.message_item_raw("c:1", id).as_bytes(),
            b"bot:msg:c:1:m\xff:{x}"
        );
        let cluster = Keyspace::new(Layout::Cluster, "bot").unwrap();
        let key = cluster.message_item_raw("c:1", id);
        assert_eq!(key.as_bytes(), b"bot:{m:c%3A1}:i:m%FF%3A%7Bx%7D");
        assert_eq!(key.slot(), cluster.message_log("c:1").slot());
        for layout in [Layout::Legacy, Layout::Cluster] {
            let ks = Keyspace::new(layout, "bot").unwrap();
            assert_eq!(
                ks.message_item_raw("c", b"m 1"),
                ks.message_item("c", "m 1")
            );
        }
    }

    #[test]
    fn durable_table_names_are_checked() {
        let ks = Keyspace::new(Layout::Cluster, "bot").unwrap();
        assert_eq!(
            ks.durable("in", "journal").unwrap().to_string(),
            "bot:{durable:in}:journal"
        );
        assert!(ks.durable("", "x").is_err());
        assert!(ks.durable("a}b", "x").is_err());
    }
}
