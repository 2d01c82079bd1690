//! Key names read back: which datum of which layout a key under the prefix holds.
//!
//! Every rule here is the inverse of [`Keyspace`] and is checked
//! against it by round-trip tests. A name that does not read back exactly (an `enc` segment
//! that is not canonical, a record in the wrong bucket, a user-data name with too few parts) is
//! [`Name::Unknown`]: counted, never guessed at.
//!
//! The legacy layout's names join raw segments with `:`, so two of them need a rule:
//!
//! - A message item `p:msg:<chat>:<id>` cannot be read back on its own: `a:b:c` is chat `a`
//!   with id `b:c`, or chat `a:b` with id `c`. It stays [`Name::LegacyItem`] with the whole rest;
//!   the migration takes messages from the logs and uses [`item_readings`] only to find the
//!   logs that may own an item.
//! - A user-data entry `p:user:<user>:<ns>:<key>` is read as user up to the first `:`, namespace
//!   up to the second, key the rest. That is the only reading because the legacy layout refuses
//!   a `:` in a user id or a namespace ([`KeyError::LegacyColon`](crate::keys::KeyError)).

use bytes::Bytes;
use percent_encoding::percent_decode_str;

use crate::keys::{bucket, enc};
use crate::keys::{Keyspace, Layout, RecordKind, TurnPart};

/// What a key under the prefix holds. Ids are the raw (decoded) ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Name {
    /// A chat's message log (both layouts).
    Log {
        /// The chat.
        chat: String,
    },
    /// A chat's log being drained by an interrupted `delete_chat` (both layouts).
    Drain {
        /// The chat.
        chat: String,
    },
    /// A legacy message item: `rest` is `<chat>:<id>`, which may have several readings. Bytes,
    /// not text: a log another program wrote may name ids that are not UTF-8, and their items
    /// must be found by their exact names.
    LegacyItem {
        /// Everything after `msg:`.
        rest: Bytes,
    },
    /// A cluster-layout message item.
    Item {
        /// The chat.
        chat: String,
        /// The message id (decoded; bytes, as for [`Name::LegacyItem`]).
        id: Bytes,
    },
    /// A chat, contact, checkpoint or schedule record.
    Record {
        /// The kind.
        kind: RecordKind,
        /// The record id.
        id: String,
    },
    /// A bucket index (cluster layout).
    RecordIndex {
        /// The kind.
        kind: RecordKind,
        /// The bucket.
        bucket: u8,
    },
    /// A user-data entry.
    UserEntry {
        /// The user.
        user: String,
        /// The namespace.
        ns: String,
        /// The entry's key.
        key: String,
    },
    /// A user's entry index (cluster layout).
    UserIndex {
        /// The user.
        user: String,
    },
    /// A lock's holder.
    LockHolder {
        /// The lock.
        key: String,
    },
    /// A lock's fence counter.
    Fence {
        /// The lock.
        key: String,
    },
    /// One key of a chat's turn queue.
    Turn {
        /// The chat.
        chat: String,
        /// Which key.
        part: TurnPart,
    },
    /// A leadership's holder.
    LeaderHolder {
        /// The leadership.
        name: String,
    },
    /// A leadership's term counter.
    Term {
        /// The leadership.
        name: String,
    },
    /// A replica's heartbeat (same name in both layouts).
    Heartbeat,
    /// A conversation state (same name in both layouts).
    Conversation,
    /// A cursor (same name in both layouts).
    Cursor,
    /// A lease (same name in both layouts).
    Lease,
    /// A part of a durability table (same name in both layouts).
    Durable {
        /// The table.
        table: String,
    },
    /// The layout marker.
    Marker,
    /// A layout's lifecycle record (`{meta}:lifecycle:<layout>`, the same name in both
    /// readings).
    Lifecycle {
        /// Whose record.
        layout: Layout,
    },
    /// Under the prefix, but no name of this layout.
    Unknown,
}

impl Name {
    /// Whether both layouts use this name (heartbeats, conversations, cursors, leases,
    /// durability tables, the marker).
    pub fn is_shared(&self) -> bool {
        matches!(
            self,
            Name::Heartbeat
                | Name::Conversation
                | Name::Cursor
                | Name::Lease
                | Name::Durable { .. }
                | Name::Marker
                | Name::Lifecycle { .. }
        )
    }
}

fn text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok()
}

/// The part of `key` after `prefix:`, as text.
fn rest_of<'k>(ks: &Keyspace, key: &'k [u8]) -> Option<&'k str> {
    let rest = key
        .strip_prefix(ks.prefix().as_bytes())?
        .strip_prefix(b":")?;
    text(rest)
}

/// The shared names, the same in both layouts.
fn shared(rest: &str) -> Option<Name> {
    if rest.starts_with("co:rep:") {
        return Some(Name::Heartbeat);
    }
    if rest.starts_with("conv:") {
        return Some(Name::Conversation);
    }
    if rest.starts_with("cursor:") {
        return Some(Name::Cursor);
    }
    if rest.starts_with("lease:") {
        return Some(Name::Lease);
    }
    if rest == "{meta}:layout" {
        return Some(Name::Marker);
    }
    if let Some(layout) = rest.strip_prefix("{meta}:lifecycle:") {
        return [Layout::Legacy, Layout::Cluster]
            .into_iter()
            .find(|l| l.name() == layout)
            .map(|layout| Name::Lifecycle { layout });
    }
    if let Some(tail) = rest.strip_prefix("{durable:") {
        let (table, _part) = tail.split_once("}:")?;
        if !table.is_empty() && !table.contains(['{', '}']) {
            return Some(Name::Durable {
                table: table.to_owned(),
            });
        }
    }
    None
}

fn turn_part(name: &str) -> Option<TurnPart> {
    TurnPart::ALL.into_iter().find(|p| p.name() == name)
}

fn record_kind_legacy(word: &str) -> Option<RecordKind> {
    RecordKind::ALL
        .into_iter()
        .find(|k| k.legacy_name() == word)
}

fn record_kind_tag(word: &str) -> Option<RecordKind> {
    RecordKind::ALL.into_iter().find(|k| k.tag() == word)
}

/// Reads `key` as a name of `ks`'s layout.
pub fn of(ks: &Keyspace, key: &[u8]) -> Name {
    match ks.layout() {
        Layout::Legacy => legacy(ks, key),
        Layout::Cluster => cluster(ks, key),
    }
}

/// Whether `key` is a name of `ks`'s layout of its own: not unknown there, and not one of the
/// names both layouts share.
pub fn is_own(ks: &Keyspace, key: &[u8]) -> bool {
    let name = of(ks, key);
    name != Name::Unknown && !name.is_shared()
}

/// Reads a legacy-layout key (`ks` names the prefix). Cluster-layout keys are `Unknown` here
/// except the shared names.
pub fn legacy(ks: &Keyspace, key: &[u8]) -> Name {
    let Some(rest) = rest_of(ks, key) else {
        // An item whose id is not UTF-8 still names a message (the only legacy name whose
        // variable part can come from a log's member as raw bytes).
        let item = key
            .strip_prefix(ks.prefix().as_bytes())
            .and_then(|r| r.strip_prefix(b":msg:"))
            .filter(|rest| item_readings(rest).next().is_some());
        return match item {
            Some(rest) => Name::LegacyItem {
                rest: Bytes::copy_from_slice(rest),
            },
            None => Name::Unknown,
        };
    };
    if let Some(name) = shared(rest) {
        return name;
    }
    let owned = |s: &str| s.to_owned();
    if let Some(chat) = rest.strip_prefix("msgs:") {
        return Name::Log { chat: owned(chat) };
    }
    if let Some(chat) = rest.strip_prefix("msgs-deleting:") {
        return Name::Drain { chat: owned(chat) };
    }
    if let Some(item) = rest.strip_prefix("msg:") {
        if item.contains(':') {
            return Name::LegacyItem {
                rest: Bytes::copy_from_slice(item.as_bytes()),
            };
        }
        return Name::Unknown;
    }
    if let Some(tail) = rest.strip_prefix("user:") {
        let mut parts = tail.splitn(3, ':');
        return match (parts.next(), parts.next(), parts.next()) {
            (Some(user), Some(ns), Some(key)) => Name::UserEntry {
                user: owned(user),
                ns: owned(ns),
                key: owned(key),
            },
            _ => Name::Unknown,
        };
    }
    if let Some(key) = rest.strip_prefix("lock:") {
        return Name::LockHolder { key: owned(key) };
    }
    if let Some(key) = rest.strip_prefix("fence:") {
        return Name::Fence { key: owned(key) };
    }
    if let Some(tail) = rest.strip_prefix("co:turn:") {
        // The part is a fixed word at the end, so a chat id may hold `:`.
        if let Some((chat, part)) = tail.rsplit_once(':') {
            if let Some(part) = turn_part(part) {
                return Name::Turn {
                    chat: owned(chat),
                    part,
                };
            }
        }
        return Name::Unknown;
    }
    if let Some(name) = rest.strip_prefix("co:leader:") {
        return Name::LeaderHolder { name: owned(name) };
    }
    if let Some(name) = rest.strip_prefix("co:term:") {
        return Name::Term { name: owned(name) };
    }
    if let Some((word, id)) = rest.split_once(':') {
        if let Some(kind) = record_kind_legacy(word) {
            return Name::Record {
                kind,
                id: owned(id),
            };
        }
    }
    Name::Unknown
}

/// Decodes an `enc` segment; `None` unless it is exactly what `enc` makes of the decoded id.
pub fn dec(segment: &str) -> Option<String> {
    let decoded = percent_decode_str(segment).decode_utf8().ok()?.into_owned();
    (enc(&decoded) == segment).then_some(decoded)
}

/// [`dec`] to bytes, which need not be UTF-8 (a message id): `None` unless the segment is
/// exactly what `enc` makes of them.
pub fn dec_bytes(segment: &str) -> Option<Bytes> {
    let decoded: Vec<u8> = percent_decode_str(segment).collect();
    let canonical = crate::keys::enc_bytes(&decoded).to_string() == segment;
    canonical.then(|| Bytes::from(decoded))
}

/// Reads a cluster-layout key. Legacy-layout keys are `Unknown` here except the shared names.
pub fn cluster(ks: &Keyspace, key: &[u8]) -> Name {
    let Some(rest) = rest_of(ks, key) else {
        return Name::Unknown;
    };
    // (A cluster-layout name is all text: `enc` leaves no byte that is not ASCII.)
    if let Some(name) = shared(rest) {
        return name;
    }
    cluster_tagged(rest).unwrap_or(Name::Unknown)
}

fn cluster_tagged(rest: &str) -> Option<Name> {
    if let Some(tail) = rest.strip_prefix("co:{") {
        let (tag, after) = tail.split_once('}')?;
        if let Some(chat) = tag.strip_prefix("t:") {
            let part = turn_part(after.strip_prefix(':')?)?;
            return Some(Name::Turn {
                chat: dec(chat)?,
                part,
            });
        }
        let name = dec(tag.strip_prefix("ld:")?)?;
        return match after {
            "" => Some(Name::LeaderHolder { name }),
            ":term" => Some(Name::Term { name }),
            _ => None,
        };
    }
    let tail = rest.strip_prefix('{')?;
    let (tag, after) = tail.split_once('}')?;
    let after = after.strip_prefix(':')?;
    let (word, seg) = tag.split_once(':')?;
    match word {
        "m" => {
            let chat = dec(seg)?;
            match after {
                "z" => Some(Name::Log { chat }),
                "d" => Some(Name::Drain { chat }),
                _ => Some(Name::Item {
                    chat,
                    id: dec_bytes(after.strip_prefix("i:")?)?,
                }),
            }
        }
        "ud" => {
            let user = dec(seg)?;
            if after == "idx" {
                return Some(Name::UserIndex { user });
            }
            let (ns, key) = after.strip_prefix("e:")?.split_once(':')?;
            Some(Name::UserEntry {
                user,
                ns: dec(ns)?,
                key: dec(key)?,
            })
        }
        "lk" => {
            let key = dec(seg)?;
            match after {
                "l" => Some(Name::LockHolder { key }),
                "f" => Some(Name::Fence { key }),
                _ => None,
            }
        }
        word => {
            let kind = record_kind_tag(word)?;
            let b: u8 = seg.parse().ok()?;
            if seg != b.to_string() || b >= crate::keys::BUCKET_COUNT {
                return None;
            }
            if after == "idx" {
                return Some(Name::RecordIndex { kind, bucket: b });
            }
            let id = dec(after.strip_prefix("r:")?)?;
            (bucket(&id) == b).then_some(Name::Record { kind, id })
        }
    }
}

/// Every reading of a legacy item's rest (`<chat>:<id>`): one per `:` whose chat part is text
/// (a log's name, which must be UTF-8 to be read at all), shortest chat first.
pub fn item_readings(rest: &[u8]) -> impl Iterator<Item = (&str, &[u8])> {
    rest.iter()
        .enumerate()
        .filter(|(_, b)| **b == b':')
        .filter_map(move |(at, _)| Some((std::str::from_utf8(&rest[..at]).ok()?, &rest[at + 1..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(ks: &Keyspace) -> Vec<(crate::keys::Key, Name)> {
        let s = |x: &str| x.to_owned();
        let mut out = vec![
            (ks.message_log("a:b"), Name::Log { chat: s("a:b") }),
            (ks.message_drain("c"), Name::Drain { chat: s("c") }),
            (ks.lock("k:1"), Name::LockHolder { key: s("k:1") }),
            (ks.lock_fence("k"), Name::Fence { key: s("k") }),
            (
                ks.turn("c:x", TurnPart::Serving),
                Name::Turn {
                    chat: s("c:x"),
                    part: TurnPart::Serving,
                },
            ),
            (ks.leader("l"), Name::LeaderHolder { name: s("l") }),
            (ks.leader_term("l:2"), Name::Term { name: s("l:2") }),
            (ks.heartbeat("r"), Name::Heartbeat),
            (ks.conversation("c"), Name::Conversation),
            (ks.cursor("n"), Name::Cursor),
            (ks.lease("n"), Name::Lease),
            (
                ks.durable("t", "journal").unwrap(),
                Name::Durable { table: s("t") },
            ),
            (ks.marker(), Name::Marker),
            (
                ks.lifecycle(),
                Name::Lifecycle {
                    layout: ks.layout(),
                },
            ),
            (
                ks.user_entry("u", "n", "k:1"),
                Name::UserEntry {
                    user: s("u"),
                    ns: s("n"),
                    key: s("k:1"),
                },
            ),
        ];
        for kind in RecordKind::ALL {
            out.push((
                ks.record(kind, "id:{1}"),
                Name::Record {
                    kind,
                    id: s("id:{1}"),
                },
            ));
        }
        out
    }

    #[test]
    fn legacy_names_read_back() {
        let ks = Keyspace::new(Layout::Legacy, "p:x").unwrap();
        for (key, name) in names(&ks) {
            assert_eq!(legacy(&ks, key.as_bytes()), name, "{key}");
        }
        assert_eq!(
            legacy(&ks, ks.message_item("a", "b:c").as_bytes()),
            Name::LegacyItem {
                rest: "a:b:c".into()
            }
        );
        assert_eq!(
            legacy(&ks, ks.message_item_raw("a", b"\xff:x").as_bytes()),
            Name::LegacyItem {
                rest: Bytes::from_static(b"a:\xff:x")
            }
        );
        assert_eq!(legacy(&ks, b"p:x:user:u:n"), Name::Unknown);
        assert_eq!(legacy(&ks, b"p:x:msg:nocolon"), Name::Unknown);
        assert_eq!(legacy(&ks, b"p:x:co:turn:c:other"), Name::Unknown);
        assert_eq!(legacy(&ks, b"p:x:{m:c}:z"), Name::Unknown);
        assert_eq!(legacy(&ks, b"other:chat:1"), Name::Unknown);
    }

    #[test]
    fn cluster_names_read_back() {
        let ks = Keyspace::new(Layout::Cluster, "p:x").unwrap();
        for (key, name) in names(&ks) {
            assert_eq!(cluster(&ks, key.as_bytes()), name, "{key}");
        }
        assert_eq!(
            cluster(&ks, ks.message_item("a:b", "c").as_bytes()),
            Name::Item {
                chat: "a:b".into(),
                id: "c".into()
            }
        );
        assert_eq!(
            cluster(&ks, ks.message_item_raw("a", b"\xff").as_bytes()),
            Name::Item {
                chat: "a".into(),
                id: Bytes::from_static(b"\xff")
            }
        );
        assert_eq!(
            cluster(&ks, ks.user_index("u").unwrap().as_bytes()),
            Name::UserIndex { user: "u".into() }
        );
        assert_eq!(
            cluster(
                &ks,
                ks.record_index(RecordKind::Chat, 7).unwrap().as_bytes()
            ),
            Name::RecordIndex {
                kind: RecordKind::Chat,
                bucket: 7
            }
        );
        // Not canonical, wrong bucket, unknown parts: never guessed at.
        assert_eq!(cluster(&ks, b"p:x:{m:a%3ab}:z"), Name::Unknown);
        assert_eq!(cluster(&ks, b"p:x:{ch:0}:r:chat-1"), Name::Unknown);
        assert_eq!(cluster(&ks, b"p:x:{ch:07}:idx"), Name::Unknown);
        assert_eq!(cluster(&ks, b"p:x:{lk:k}:x"), Name::Unknown);
        assert_eq!(cluster(&ks, b"p:x:chat:1"), Name::Unknown);
    }

    #[test]
    fn item_readings_split_at_every_colon() {
        let readings: Vec<_> = item_readings(b"a:b:c").collect();
        assert_eq!(readings, vec![("a", &b"b:c"[..]), ("a:b", &b"c"[..])]);
        assert_eq!(
            item_readings(b":").collect::<Vec<_>>(),
            vec![("", &b""[..])]
        );
        // A chat part that is not text is no reading: no log can have that name.
        let raw: Vec<_> = item_readings(b"a:\xff:c").collect();
        assert_eq!(raw, vec![("a", &b"\xff:c"[..])]);
    }
}
