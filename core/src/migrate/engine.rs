//! The I/O vocabulary of the migration: batches of requests over an [`Executor`], `SCAN`
//! pages, reads of many keys in one script call, and writes grouped by slot.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::batch::Batch;
use crate::error::Error;
use crate::executor::Executor;
use crate::keys::Key;
use crate::plan::{misuse, Reply};
use crate::request::{Access, Arg, Request};
use crate::scan::{layout_of, masters_request, parse_page, Owners};
use crate::script::Script;
use crate::value::Value;

use super::{MIGRATE_MEMBERS, MIGRATE_READ};

/// A reply of a shape the migration does not accept.
fn unexpected(what: &str) -> Error {
    Error::UnexpectedReply {
        detail: what.to_owned(),
    }
}

/// Keys per read script call on a single node (a cluster groups by slot instead).
const READ_CHUNK: usize = 256;
/// Entries per write script call.
pub(super) const WRITE_CHUNK: usize = 256;

/// Sends `batch` and yields its replies, in order. A reply that is not a server error reply
/// (a lost connection, a timeout) ends the run: the migration is idempotent, so the operator
/// runs it again.
pub(super) async fn send<E: Executor>(e: &E, batch: Vec<Request>) -> Result<Vec<Reply>, Error> {
    let wanted = batch.len();
    let replies = e.run(Batch::new(batch)).await?;
    if replies.len() != wanted {
        return Err(misuse("a batch answered with the wrong number of replies"));
    }
    for reply in &replies {
        if let Err(e) = reply {
            if e.server().is_none() {
                return Err(e.clone());
            }
        }
    }
    Ok(replies)
}

/// Sends `batch`, failing on any error reply.
pub(super) async fn send_ok<E: Executor>(e: &E, batch: Vec<Request>) -> Result<Vec<Value>, Error> {
    send(e, batch).await?.into_iter().collect()
}

/// The masters to scan (`[None]` for a single node, else every master's address) and the
/// slots' owners (none on a single node), from one `CLUSTER SLOTS`: a pass scans the first,
/// and compares the second with a later reading to see whether slots moved meanwhile.
pub(super) async fn layout<E: Executor>(e: &E) -> Result<(Vec<Option<String>>, Owners), Error> {
    let reply = send(e, vec![masters_request()?]).await?.pop();
    layout_of(reply.ok_or_else(|| misuse("no reply to CLUSTER SLOTS"))?)
}

/// The server's clock in ms (`TIME`): the run's elapsed time is measured on the source's
/// clock, since the core has none of its own.
pub(super) async fn server_ms<E: Executor>(e: &E, node: &Option<String>) -> Result<i64, Error> {
    let mut builder = Request::cmd(Access::Read, "TIME");
    if let Some(node) = node {
        // One master's clock at both ends: the masters of a cluster are not in step.
        builder = builder.to_node(node.clone());
    }
    let time = builder.build()?;
    let value = send_ok(e, vec![time])
        .await?
        .pop()
        .ok_or_else(|| misuse("no reply to TIME"))?;
    let mut parts = value.into_array()?.into_iter();
    let (Some(seconds), Some(micros)) = (parts.next(), parts.next()) else {
        return Err(Error::UnexpectedReply {
            detail: "TIME did not answer [seconds, microseconds]".into(),
        });
    };
    Ok(seconds.as_i64()? * 1000 + micros.as_i64()? / 1000)
}

/// The time between two readings of [`server_ms`].
pub(super) fn elapsed(from_ms: i64, to_ms: i64) -> std::time::Duration {
    std::time::Duration::from_millis(u64::try_from(to_ms - from_ms).unwrap_or(0))
}

/// The number of keys of each node (`DBSIZE`), summed: the progress bar's total.
pub(super) async fn dbsize<E: Executor>(e: &E, nodes: &[Option<String>]) -> Result<u64, Error> {
    let mut batch = Vec::with_capacity(nodes.len());
    for node in nodes {
        let mut builder = Request::cmd(Access::Read, "DBSIZE");
        if let Some(node) = node {
            builder = builder.to_node(node.clone());
        }
        batch.push(builder.build()?);
    }
    let mut total = 0;
    for value in send_ok(e, batch).await? {
        total += u64::try_from(value.as_i64()?).unwrap_or(0);
    }
    Ok(total)
}

/// One `SCAN` page of `node`: the next cursor (`0` at the end) and the keys.
pub(super) async fn scan_page<E: Executor>(
    e: &E,
    node: &Option<String>,
    cursor: &Bytes,
    pattern: &str,
    count: u32,
) -> Result<(Bytes, Vec<Bytes>), Error> {
    let mut builder = Request::cmd(Access::Read, "SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(count.max(10));
    if let Some(node) = node {
        builder = builder.to_node(node.clone());
    }
    let value = send_ok(e, vec![builder.build()?])
        .await?
        .pop()
        .ok_or_else(|| misuse("no reply to SCAN"))?;
    parse_page(value)
}

/// A script call: checked to one slot on a cluster, or sent to the single node.
pub(super) fn script_call(
    cluster: bool,
    script: &'static Script,
    access: Access,
    keys: Vec<Key>,
    args: Vec<Bytes>,
) -> Result<Request, Error> {
    if cluster {
        Request::script(script, access, keys, args)
    } else {
        Ok(Request::single_node_script(script, access, keys, args))
    }
}

/// How to read a key (see `lua/migrate_read.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// A string.
    String,
    /// A hash.
    Hash,
    /// Any type, as a `DUMP` payload.
    Dump,
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Mode::String => "s",
            Mode::Hash => "h",
            Mode::Dump => "d",
        }
    }
}

/// A key's type, as `TYPE` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum KeyType {
    /// The key does not exist (gone since the scan, or a member without an item).
    None,
    /// A string.
    String,
    /// Any other type (hash, sorted set, ...), by name.
    Other(String),
}

impl KeyType {
    fn parse(name: String) -> KeyType {
        match name.as_str() {
            "none" => KeyType::None,
            "string" => KeyType::String,
            _ => KeyType::Other(name),
        }
    }

    /// Whether the key is gone.
    pub(super) fn is_none(&self) -> bool {
        *self == KeyType::None
    }
}

/// A key as read.
#[derive(Clone, Debug)]
pub(super) struct Read {
    /// The type ([`KeyType::None`] when the key is gone).
    pub kind: KeyType,
    /// The remaining time to live in ms; negative for none (-1) or gone (-2).
    pub pttl: i64,
    /// The value, when the key had the wanted type: bytes for a string or a dump, the flat
    /// field/value list for a hash.
    pub value: Option<Value>,
    /// The server's time in ms when it was read.
    pub now_ms: i64,
}

impl Read {
    /// The remaining TTL in ms, `None` without one.
    pub(super) fn ttl(&self) -> Option<i64> {
        (self.pttl >= 0).then_some(self.pttl.max(1))
    }

    /// The value as bytes.
    pub(super) fn bytes(&self) -> Option<Bytes> {
        match &self.value {
            Some(Value::Bulk(b)) | Some(Value::Status(b)) => Some(b.clone()),
            _ => None,
        }
    }

    /// The value as a hash.
    pub(super) fn hash(&self) -> Option<BTreeMap<Bytes, Bytes>> {
        let Some(Value::Array(items)) = &self.value else {
            return None;
        };
        let mut map = BTreeMap::new();
        for pair in items.chunks(2) {
            if let [Value::Bulk(k), Value::Bulk(v)] = pair {
                map.insert(k.clone(), v.clone());
            }
        }
        Some(map)
    }
}

fn decode_read(value: Value, now_ms: i64) -> Result<Read, Error> {
    let mut items = value.into_array()?.into_iter();
    let kind = KeyType::parse(
        items
            .next()
            .ok_or_else(|| unexpected("migrate_read entry without a type"))?
            .into_string()?,
    );
    let pttl = items.next().map(|v| v.as_i64()).transpose()?.unwrap_or(-2);
    Ok(Read {
        kind,
        pttl,
        value: items.next(),
        now_ms,
    })
}

/// Reads `keys` with their modes: one script call per chunk (single node) or per slot
/// (cluster). Yields one [`Read`] per key, in order.
pub(super) async fn read<E: Executor>(
    e: &E,
    cluster: bool,
    keys: &[(Key, Mode)],
) -> Result<Vec<Read>, Error> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let groups = groups(cluster, keys.len(), |i| keys[i].0.slot(), READ_CHUNK);
    let mut batch = Vec::with_capacity(groups.len());
    for group in &groups {
        let ks = group.iter().map(|&i| keys[i].0.clone()).collect();
        let args = group
            .iter()
            .map(|&i| Bytes::from_static(keys[i].1.arg().as_bytes()))
            .collect();
        batch.push(script_call(cluster, &MIGRATE_READ, Access::Read, ks, args)?);
    }
    let replies = send_ok(e, batch).await?;
    let mut out: Vec<Option<Read>> = vec![None; keys.len()];
    for (group, reply) in groups.iter().zip(replies) {
        let mut items = reply.into_array()?.into_iter();
        let now_ms = items
            .next()
            .ok_or_else(|| unexpected("migrate_read without the time"))?
            .as_i64()?;
        for (&i, item) in group.iter().zip(items) {
            out[i] = Some(decode_read(item, now_ms)?);
        }
    }
    out.into_iter()
        .map(|r| r.ok_or_else(|| unexpected("migrate_read answered too few entries")))
        .collect()
}

/// One multi-key command (`MGET`, `DEL`) over `keys`: checked to one slot on a cluster, sent
/// as it is to a single node, whose keys may hash anywhere.
fn multi_key<'k>(
    cluster: bool,
    access: Access,
    name: &'static str,
    keys: impl Iterator<Item = &'k Key>,
) -> Result<Request, Error> {
    let builder = keys.fold(Request::cmd(access, name), |b, key| b.key(key));
    if cluster {
        builder.build()
    } else {
        Ok(builder.build_for_single_node())
    }
}

/// Reads string values with `MGET`, one per chunk (single node) or per slot (cluster). A key
/// `MGET` answers nil for is asked its `TYPE`: gone (`none`) or of another type. Yields one
/// [`Read`] per key, without TTLs (message items have none).
pub(super) async fn read_strings<E: Executor>(
    e: &E,
    cluster: bool,
    keys: &[Key],
) -> Result<Vec<Read>, Error> {
    let groups = groups(cluster, keys.len(), |i| keys[i].slot(), READ_CHUNK);
    let mut batch = Vec::with_capacity(groups.len());
    for group in &groups {
        batch.push(multi_key(
            cluster,
            Access::Read,
            "MGET",
            group.iter().map(|&i| &keys[i]),
        )?);
    }
    let mut out: Vec<Read> = Vec::with_capacity(keys.len());
    out.resize_with(keys.len(), || Read {
        kind: KeyType::None,
        pttl: -2,
        value: None,
        now_ms: 0,
    });
    let mut missing = Vec::new();
    for (group, reply) in groups.iter().zip(send_ok(e, batch).await?) {
        let values = reply.into_array()?;
        if values.len() != group.len() {
            return Err(unexpected("MGET answered the wrong number of values"));
        }
        for (&i, value) in group.iter().zip(values) {
            if value == Value::Nil {
                missing.push(i);
            } else {
                out[i] = Read {
                    kind: KeyType::String,
                    pttl: -1,
                    value: Some(value),
                    now_ms: 0,
                };
            }
        }
    }
    let mut types = Vec::with_capacity(missing.len());
    for &i in &missing {
        types.push(Request::cmd(Access::Read, "TYPE").key(&keys[i]).build()?);
    }
    for (&i, kind) in missing.iter().zip(send_ok(e, types).await?) {
        out[i].kind = KeyType::parse(kind.into_string()?);
    }
    Ok(out)
}

/// Whether each sorted set holds its member: one script call per chunk (single node) or per
/// slot (cluster).
pub(super) async fn members<E: Executor>(
    e: &E,
    cluster: bool,
    pairs: &[(Key, Bytes)],
) -> Result<Vec<bool>, Error> {
    let groups = groups(cluster, pairs.len(), |i| pairs[i].0.slot(), READ_CHUNK);
    let mut batch = Vec::with_capacity(groups.len());
    for group in &groups {
        let keys = group.iter().map(|&i| pairs[i].0.clone()).collect();
        let args = group.iter().map(|&i| pairs[i].1.clone()).collect();
        batch.push(script_call(
            cluster,
            &MIGRATE_MEMBERS,
            Access::Read,
            keys,
            args,
        )?);
    }
    let mut out = vec![false; pairs.len()];
    for (group, reply) in groups.iter().zip(send_ok(e, batch).await?) {
        let answers = reply.into_array()?;
        if answers.len() != group.len() {
            return Err(unexpected(
                "migrate_members answered the wrong number of flags",
            ));
        }
        for (&i, answer) in group.iter().zip(answers) {
            out[i] = answer.as_i64()? == 1;
        }
    }
    Ok(out)
}

/// Splits `n` items into groups: by slot on a cluster (items of one slot together), or in
/// chunks on a single node; no group holds more than `chunk`.
pub(super) fn groups(
    cluster: bool,
    n: usize,
    slot: impl Fn(usize) -> u16,
    chunk: usize,
) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    if cluster {
        let mut by_slot: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for i in 0..n {
            by_slot.entry(slot(i)).or_default().push(i);
        }
        for (_, items) in by_slot {
            out.extend(items.chunks(chunk).map(<[usize]>::to_vec));
        }
    } else {
        let all: Vec<usize> = (0..n).collect();
        out.extend(all.chunks(chunk).map(<[usize]>::to_vec));
    }
    out
}

/// One entry of a grouped write: the keys it adds to its call, the arguments, and where its
/// code goes.
pub(super) struct Entry<T> {
    /// The slot of the entry's keys (the group key on a cluster).
    pub slot: u16,
    /// Keys that head the call (an index), the same for every entry of a group.
    pub head: Vec<Key>,
    /// Keys the entry contributes.
    pub keys: Vec<Key>,
    /// Arguments the entry contributes.
    pub args: Vec<Bytes>,
    /// What the caller wants back with the entry's code.
    pub tag: T,
}

/// Writes entries with `script`, grouped by slot (cluster) or in chunks (single node), at most
/// `chunk` entries per call. Each call's keys are the group's head keys and the entries' keys;
/// its arguments `head_args` and the entries'. Yields `(tag, code)` per entry, or `(tag, Err)`
/// for a call answered with an error reply (every entry of that call).
pub(super) async fn write<E: Executor, T>(
    e: &E,
    cluster: bool,
    script: &'static Script,
    entries: Vec<Entry<T>>,
    head_args: &[Bytes],
    chunk: usize,
) -> Result<Vec<(T, Result<i64, Error>)>, Error> {
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    // On a cluster the head keys (an index) belong to the group's slot; on a single node a
    // group must also share its head keys, so chunks are cut by head key too.
    let heads: Vec<Vec<Key>> = entries.iter().map(|e| e.head.clone()).collect();
    let mut order: BTreeMap<(Vec<u8>, u16), Vec<usize>> = BTreeMap::new();
    for (i, entry) in entries.iter().enumerate() {
        let head: Vec<u8> = heads[i]
            .iter()
            .flat_map(|k| k.as_bytes().to_vec())
            .collect();
        let slot = if cluster { entry.slot } else { 0 };
        order.entry((head, slot)).or_default().push(i);
    }
    let mut calls = Vec::new();
    let mut batch = Vec::new();
    for (_, members) in order {
        for chunk in members.chunks(chunk.clamp(1, WRITE_CHUNK)) {
            let mut keys = heads[chunk[0]].clone();
            let mut args = head_args.to_vec();
            for &i in chunk {
                keys.extend(entries[i].keys.iter().cloned());
                args.extend(entries[i].args.iter().cloned());
            }
            batch.push(script_call(cluster, script, Access::Write, keys, args)?);
            calls.push(chunk.to_vec());
        }
    }
    let replies = send(e, batch).await?;
    let mut codes: Vec<Option<Result<i64, Error>>> = (0..entries.len()).map(|_| None).collect();
    for (call, reply) in calls.iter().zip(replies) {
        match reply {
            Ok(value) => {
                let values = value.into_array()?;
                if values.len() != call.len() {
                    return Err(unexpected(
                        "a write script answered the wrong number of codes",
                    ));
                }
                for (&i, v) in call.iter().zip(values) {
                    codes[i] = Some(v.as_i64());
                }
            }
            Err(err) => {
                for &i in call {
                    codes[i] = Some(Err(err.clone()));
                }
            }
        }
    }
    Ok(entries
        .into_iter()
        .zip(codes)
        .map(|(entry, code)| {
            (
                entry.tag,
                code.unwrap_or_else(|| Err(misuse("a write without a code"))),
            )
        })
        .collect())
}

/// How many of `keys` exist (what a dry run would delete).
pub(super) async fn existing<E: Executor>(e: &E, keys: &[Key]) -> Result<u64, Error> {
    let mut batch = Vec::with_capacity(keys.len());
    for key in keys {
        batch.push(Request::cmd(Access::Read, "EXISTS").key(key).build()?);
    }
    let mut n = 0;
    for v in send_ok(e, batch).await? {
        n += u64::try_from(v.as_i64()?).unwrap_or(0);
    }
    Ok(n)
}

/// `DEL` of `keys`, grouped by slot (cluster) or in chunks (single node).
pub(super) async fn delete<E: Executor>(
    e: &E,
    cluster: bool,
    keys: Vec<Key>,
) -> Result<u64, Error> {
    if keys.is_empty() {
        return Ok(0);
    }
    let groups = groups(cluster, keys.len(), |i| keys[i].slot(), 512);
    let mut batch = Vec::with_capacity(groups.len());
    for group in &groups {
        batch.push(multi_key(
            cluster,
            Access::Write,
            "DEL",
            group.iter().map(|&i| &keys[i]),
        )?);
    }
    let mut deleted = 0;
    for value in send_ok(e, batch).await? {
        deleted += u64::try_from(value.as_i64()?).unwrap_or(0);
    }
    Ok(deleted)
}

/// A counter's or token's text when it is a canonical decimal 64-bit integer (no sign but `-`,
/// no leading zero, no space): what the scripts compare exactly as text. `None` otherwise.
pub(super) fn canonical_int(bytes: &[u8]) -> Option<Bytes> {
    let text = std::str::from_utf8(bytes).ok()?;
    let value: i64 = text.parse().ok()?;
    (value.to_string() == text).then(|| Bytes::copy_from_slice(bytes))
}

/// The TTL argument of a write script: ms, or empty for none.
pub(super) fn ttl_arg(ttl: Option<i64>) -> Bytes {
    match ttl {
        Some(ms) => ms.into_arg(),
        None => Bytes::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_groups_by_slot_and_a_node_by_chunk() {
        let slots = [5u16, 9, 5, 5, 9];
        assert_eq!(
            groups(true, 5, |i| slots[i], 2),
            vec![vec![0, 2], vec![3], vec![1, 4]]
        );
        assert_eq!(
            groups(false, 5, |i| slots[i], 2),
            vec![vec![0, 1], vec![2, 3], vec![4]]
        );
        assert!(groups(true, 0, |_| 0, 2).is_empty());
    }

    #[test]
    fn only_the_canonical_text_of_an_integer_is_one() {
        for good in ["0", "-1", "9223372036854775807", "-9223372036854775808"] {
            assert_eq!(
                canonical_int(good.as_bytes()).as_deref(),
                Some(good.as_bytes())
            );
        }
        for bad in [
            "",
            "+1",
            "01",
            "-0",
            "1.0",
            " 1",
            "9223372036854775808",
            "x",
        ] {
            assert_eq!(canonical_int(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(ttl_arg(None), "");
        assert_eq!(ttl_arg(Some(250)), "250");
    }
}
