//! Who owns a message item: the lists (logs and drains) that name it. A legacy item's name
//! can read as several chats' messages, so the copy, the prune pass and the cleanup all ask.

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::{Key, Keyspace};
use crate::request::{Access, Request};

use super::engine::{members, send_ok};
use super::names::{item_readings, Name};

/// Who owns each item of `items` (legacy items by every reading of their names, cluster items
/// by their chat): per item `Some(true)` for an orphan (no log or drain names it and it still
/// exists), `Some(false)` when a list names it, `None` when it is gone; and per item, which of
/// its readings (in [`item_readings`] order, the first being the shortest chat) a list names.
pub(super) async fn owners_of_items<E: Executor>(
    source: &E,
    cluster: bool,
    ks: &Keyspace,
    items: &[(Bytes, Name)],
) -> Result<(Vec<Option<bool>>, Vec<Vec<bool>>), Error> {
    // Logs first; a drain is asked only for the readings no log names (most items have one
    // reading, named by its log).
    let mut pairs = Vec::new();
    let mut spans = Vec::with_capacity(items.len());
    let mut readings = Vec::new();
    for (_, name) in items {
        let start = pairs.len();
        let of_item: Vec<(&str, &[u8])> = match name {
            Name::LegacyItem { rest } => item_readings(rest).collect(),
            Name::Item { chat, id } => vec![(chat.as_str(), id.as_ref())],
            _ => Vec::new(),
        };
        for (chat, id) in of_item {
            let id = Bytes::copy_from_slice(id);
            pairs.push((ks.message_log(chat), id.clone()));
            readings.push((chat, id));
        }
        spans.push(start..pairs.len());
    }
    let mut named = members(source, cluster, &pairs).await?;
    let unnamed: Vec<usize> = (0..named.len()).filter(|&i| !named[i]).collect();
    let drains: Vec<(Key, Bytes)> = unnamed
        .iter()
        .map(|&i| (ks.message_drain(readings[i].0), readings[i].1.clone()))
        .collect();
    for (&i, in_drain) in unnamed.iter().zip(members(source, cluster, &drains).await?) {
        named[i] = in_drain;
    }
    // An item no list names may have just been dropped with its member (a cleanup on a page
    // read while the previous one was deleted): only one that still exists is an orphan. A
    // drop removes member and item together, so asking after the members is safe.
    let unowned: Vec<usize> = spans
        .iter()
        .enumerate()
        .filter(|(_, span)| !named[(*span).clone()].iter().any(|n| *n))
        .map(|(i, _)| i)
        .collect();
    let mut exists = Vec::with_capacity(unowned.len());
    for &i in &unowned {
        exists.push(
            Request::cmd(Access::Read, "EXISTS")
                .key(Key::new(items[i].0.clone()))
                .build()?,
        );
    }
    let mut orphan: Vec<Option<bool>> = vec![Some(false); items.len()];
    for (&i, answer) in unowned.iter().zip(send_ok(source, exists).await?) {
        orphan[i] = (answer.as_i64()? > 0).then_some(true);
    }
    let owners = spans.into_iter().map(|span| named[span].to_vec()).collect();
    Ok((orphan, owners))
}

/// The lists (logs and drains, with the member to look for) other than `chat`'s own log (or
/// drain) that may name the same legacy item as message `id` of `chat`: its own drain (or log)
/// and, with `readings` (legacy item names, where `<chat>:<id>` can be another chat's
/// message too), both lists of every other reading. A message dropped from one list keeps its
/// item while any of them names it. Cluster-layout items belong to one chat: pass `false`.
pub(super) fn other_owners(
    ks: &Keyspace,
    chat: &str,
    id: &[u8],
    drain: bool,
    readings: bool,
) -> Vec<(Key, Bytes)> {
    let own = Bytes::copy_from_slice(id);
    let mut out = vec![if drain {
        (ks.message_log(chat), own)
    } else {
        (ks.message_drain(chat), own)
    }];
    if readings {
        let rest = [chat.as_bytes(), b":", id].concat();
        for (c, i) in item_readings(&rest) {
            if c == chat && i == id {
                continue;
            }
            let member = Bytes::copy_from_slice(i);
            out.push((ks.message_log(c), member.clone()));
            out.push((ks.message_drain(c), member));
        }
    }
    out
}
