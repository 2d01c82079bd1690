//! The copy of one page's message logs and drains, with the items their members name: in
//! waves of logs, each log in pages, one wave read from the source while the one before it is
//! written to the target. Also what the copy and the cleanup both ask of a message item: which
//! lists own it.

use std::collections::{BTreeSet, VecDeque};

use bytes::Bytes;

use crate::error::Error;
use crate::executor::Executor;
use crate::keys::{Key, Layout};
use crate::request::{Access, Request};

use super::engine::{members, read_strings, send, send_ok, write, Entry, Read, WRITE_CHUNK};
use super::names::{item_readings, Name};
use super::owners::owners_of_items;
use super::pair::{tally, Pair, Settings};
use super::{MigrationReport, Namespace, CHAT_WAVE, MIGRATE_MESSAGES};

/// Messages read from a log per page.
const LOG_PAGE: i64 = 1000;

impl<S: Executor, T: Executor> Pair<'_, S, T> {
    /// Finds the owners of the items of a page: orphans (no log or drain names them), and for
    /// legacy items with several readings, foreign and shared items.
    pub(super) async fn check_items(
        &self,
        report: &mut MigrationReport,
        items: Vec<(Bytes, Name)>,
    ) -> Result<(), Error> {
        let pair = self;
        let (orphans, owners) =
            owners_of_items(pair.source, pair.src_cluster, &pair.src, &items).await?;
        for ((key, _), (orphan, owners)) in items.iter().zip(orphans.into_iter().zip(owners)) {
            let Some(orphan) = orphan else {
                continue; // gone since the scan
            };
            if orphan {
                report.orphans += 1;
                report.example("orphans", key);
                continue;
            }
            let count = owners.iter().filter(|o| **o).count();
            if !owners[0] {
                report.foreign_items += 1;
            }
            if count > 1 {
                report.shared_items += 1;
            }
        }
        Ok(())
    }

    /// Copies the messages of `logs` (and drains), in waves of [`CHAT_WAVE`] logs, each log in
    /// pages of [`LOG_PAGE`]: while one wave is written to the target, the next is read from the
    /// source.
    pub(super) async fn messages(
        &self,
        settings: &Settings,
        report: &mut MigrationReport,
        logs: Vec<(String, bool)>,
    ) -> Result<(), Error> {
        let mut queue: VecDeque<LogPage> = logs
            .into_iter()
            .map(|(chat, drain)| LogPage {
                chat,
                drain,
                start: 0,
            })
            .collect();
        let mut ready: Option<Vec<FetchedLog>> = None;
        loop {
            let current = match ready.take() {
                Some(current) => current,
                None if queue.is_empty() => return Ok(()),
                None => self.fetch(report, take_wave(&mut queue)).await?,
            };
            let next = take_wave(&mut queue);
            if next.is_empty() {
                let more = self.store(settings, report, current).await?;
                queue.extend(more);
                continue;
            }
            let (mut stored_report, mut fetched_report) = (report.part(), report.part());
            let (stored, fetched) = futures_util::future::join(
                self.store(settings, &mut stored_report, current),
                self.fetch(&mut fetched_report, next),
            )
            .await;
            report.absorb(stored_report);
            report.absorb(fetched_report);
            queue.extend(stored?);
            ready = Some(fetched?);
        }
    }

    /// Reads a wave of log pages and their items from the source.
    async fn fetch(
        &self,
        report: &mut MigrationReport,
        wave: Vec<LogPage>,
    ) -> Result<Vec<FetchedLog>, Error> {
        let pair = self;
        let mut batch = Vec::with_capacity(wave.len());
        for log in &wave {
            batch.push(
                Request::cmd(Access::Read, "ZRANGE")
                    .key(pair.src_log(&log.chat, log.drain))
                    .arg(log.start)
                    .arg(log.start + LOG_PAGE - 1)
                    .arg("WITHSCORES")
                    .build()?,
            );
        }
        let replies = send(pair.source, batch).await?;
        let mut fetched = Vec::with_capacity(wave.len());
        for (log, reply) in wave.into_iter().zip(replies) {
            let Ok(flat) = reply.and_then(|v| v.into_array()) else {
                report.unreadable_key(pair.src_log(&log.chat, log.drain).as_bytes());
                continue;
            };
            let mut members = Vec::with_capacity(flat.len() / 2);
            for pair in flat.chunks(2) {
                if let [id, score] = pair {
                    members.push((id.clone().into_bytes()?, score.clone().into_bytes()?));
                }
            }
            fetched.push(FetchedLog {
                page: log,
                members,
                values: Vec::new(),
                clashes: BTreeSet::new(),
                shared: BTreeSet::new(),
                member_only: BTreeSet::new(),
            });
        }
        let mut items = Vec::new();
        for log in &fetched {
            for (id, _) in &log.members {
                // The member's own bytes name its item: an id that is not UTF-8 still finds it.
                items.push(pair.src.message_item_raw(&log.page.chat, id));
            }
        }
        let mut values = read_strings(pair.source, pair.src_cluster, &items)
            .await?
            .into_iter();
        for log in &mut fetched {
            log.values = values.by_ref().take(log.members.len()).collect();
            if log.values.len() != log.members.len() {
                return Err(Error::UnexpectedReply {
                    detail: "MGET answered fewer values than members".into(),
                });
            }
        }
        self.mark_shared_items(&mut fetched).await?;
        Ok(fetched)
    }

    /// Writes a fetched wave to the target; yields the next page of every log whose page was
    /// full. A mirror removes the target's copy of a member whose item is gone at the source.
    async fn store(
        &self,
        settings: &Settings,
        report: &mut MigrationReport,
        wave: Vec<FetchedLog>,
    ) -> Result<Vec<LogPage>, Error> {
        let pair = self;
        let (entries, dangling) = wave_entries(pair, report, &wave);
        let (overwrite, dry) = settings.flags();
        let head = [overwrite, dry];
        let (t, c) = (pair.target, pair.tgt_cluster);
        let done = write(t, c, &MIGRATE_MESSAGES, entries, &head, WRITE_CHUNK).await?;
        // A negative code: the target's log is in the way (another type), left as it is.
        let item = |(i, _, id): &Message| pair.src.message_item_raw(&wave[*i].page.chat, id);
        tally(report, done, |(_, ns, _)| *ns, item)?;
        if settings.mirror {
            // Members without an item carry no message: the target drops its copy of them.
            for (log, ids) in wave.iter().zip(&dangling) {
                let gone = self.target_holds(&log.page, ids).await?;
                pair.drop_messages(&log.page.chat, log.page.drain, &gone, report)
                    .await?;
            }
        }
        Ok(wave.iter().filter_map(FetchedLog::next_page).collect())
    }

    /// Which of `ids` the target's log (or drain) of `page` holds.
    async fn target_holds(&self, page: &LogPage, ids: &[Bytes]) -> Result<Vec<Bytes>, Error> {
        let pair = self;
        let log = pair.tgt_log(&page.chat, page.drain);
        let asked: Vec<(Key, Bytes)> = ids.iter().map(|id| (log.clone(), id.clone())).collect();
        let held = members(pair.target, pair.tgt_cluster, &asked).await?;
        Ok(ids
            .iter()
            .zip(held)
            .filter(|(_, h)| *h)
            .map(|(id, _)| id.clone())
            .collect())
    }

    /// Marks the messages that share one target item with another message of the source, so
    /// that each item is written once, by a rule that does not depend on which message comes
    /// first (a dry run, which cannot see its own writes, then counts what the real run does):
    ///
    /// - an id in both a chat's log and its drain: the drain's entry adds only its member (the
    ///   log's message writes the item);
    /// - legacy target only: two messages whose legacy item names are one key (`a` + `b:c` and
    ///   `a:b` + `c`). With equal values the reading with the shortest chat writes the item and
    ///   the others are `shared`; with different values the legacy layout cannot hold them, and
    ///   each is a clash.
    async fn mark_shared_items(&self, wave: &mut [FetchedLog]) -> Result<(), Error> {
        let pair = self;
        let mut pairs = Vec::new();
        let mut asked = Vec::new();
        for (i, log) in wave.iter().enumerate() {
            if !log.page.drain {
                continue;
            }
            for (position, (id, _)) in log.members.iter().enumerate() {
                pairs.push((pair.src.message_log(&log.page.chat), id.clone()));
                asked.push((i, position));
            }
        }
        for ((i, position), in_log) in asked
            .into_iter()
            .zip(members(pair.source, pair.src_cluster, &pairs).await?)
        {
            if in_log {
                wave[i].member_only.insert(position);
            }
        }
        if pair.tgt.layout() != Layout::Legacy {
            return Ok(());
        }
        let mut pairs = Vec::new();
        let mut gets = Vec::new();
        let mut asked = Vec::new();
        for (i, log) in wave.iter().enumerate() {
            let chat = &log.page.chat;
            for (position, (id, _)) in log.members.iter().enumerate() {
                let rest = [chat.as_bytes(), b":", id].concat();
                for (other_chat, other_id) in item_readings(&rest) {
                    if other_chat == chat {
                        continue;
                    }
                    let member = Bytes::copy_from_slice(other_id);
                    pairs.push((pair.src.message_log(other_chat), member.clone()));
                    pairs.push((pair.src.message_drain(other_chat), member));
                    gets.push(
                        Request::cmd(Access::Read, "GET")
                            .key(pair.src.message_item_raw(other_chat, other_id))
                            .build()?,
                    );
                    asked.push((i, position, other_chat.len() < chat.len()));
                }
            }
        }
        let named = members(pair.source, pair.src_cluster, &pairs).await?;
        let others = send_ok(pair.source, gets).await?;
        for ((named, other), (i, position, shorter)) in named.chunks(2).zip(others).zip(asked) {
            let other = other.into_opt_bytes()?;
            // Another message without an item (dangling) writes nothing: no clash.
            if !named.iter().any(|n| *n) || other.is_none() {
                continue;
            }
            if wave[i].values[position].bytes() != other {
                wave[i].clashes.insert(position);
            } else if shorter {
                wave[i].shared.insert(position);
            }
        }
        Ok(())
    }
}

/// A message write's tag: its log's place in the wave, its namespace, its id.
type Message = (usize, Namespace, Bytes);

/// The message writes of a fetched wave, and per log the members whose item is gone (counted
/// as dangling). What a legacy target cannot hold is counted, not written; a drain's message
/// that its log also names, and a message whose legacy item another one writes, add only
/// their member.
fn wave_entries<S, T>(
    pair: &Pair<'_, S, T>,
    report: &mut MigrationReport,
    wave: &[FetchedLog],
) -> (Vec<Entry<Message>>, Vec<Vec<Bytes>>) {
    let mut entries = Vec::new();
    let mut dangling: Vec<Vec<Bytes>> = vec![Vec::new(); wave.len()];
    for (i, log) in wave.iter().enumerate() {
        let (chat, drain) = (&log.page.chat, log.page.drain);
        let ns = if drain {
            Namespace::Drains
        } else {
            Namespace::Messages
        };
        let target_log = pair.tgt_log(chat, drain);
        for (position, ((id, score), value)) in log.members.iter().zip(&log.values).enumerate() {
            let src_item = || pair.src.message_item_raw(chat, id);
            if value.kind.is_none() {
                report.dangling += 1;
                dangling[i].push(id.clone());
                continue;
            }
            if log.clashes.contains(&position) {
                report.unrepresentable += 1;
                report.example("unrepresentable", src_item().as_bytes());
                continue;
            }
            let Some(bytes) = value.bytes() else {
                report.unreadable_key(src_item().as_bytes());
                continue;
            };
            if log.shared.contains(&position) {
                report.shared_items += 1;
            }
            let member_only = log.member_only.contains(&position) || log.shared.contains(&position);
            let item = pair.tgt.message_item_raw(chat, id);
            entries.push(Entry {
                slot: item.slot(),
                head: vec![target_log.clone()],
                args: vec![
                    id.clone(),
                    score.clone(),
                    if member_only { Bytes::new() } else { bytes },
                    Bytes::from_static(if member_only { b"0" } else { b"1" }),
                ],
                keys: vec![item],
                tag: (i, ns, id.clone()),
            });
        }
    }
    (entries, dangling)
}

/// The next page of one log (or drain) to copy.
struct LogPage {
    chat: String,
    drain: bool,
    start: i64,
}

/// A log page read from the source: its members, their items, and the members a legacy target
/// cannot hold.
struct FetchedLog {
    page: LogPage,
    members: Vec<(Bytes, Bytes)>,
    values: Vec<Read>,
    /// Positions whose item another message of the source holds with another value.
    clashes: BTreeSet<usize>,
    /// Positions whose item the message of a shorter chat id writes (same value).
    shared: BTreeSet<usize>,
    /// Drain positions whose id the chat's log also names: only the member is written.
    member_only: BTreeSet<usize>,
}

impl FetchedLog {
    /// The log's next page, when this one was full.
    fn next_page(&self) -> Option<LogPage> {
        (self.members.len() as i64 == LOG_PAGE).then(|| LogPage {
            chat: self.page.chat.clone(),
            drain: self.page.drain,
            start: self.page.start + LOG_PAGE,
        })
    }
}

/// Up to [`CHAT_WAVE`] log pages from the front of the queue.
fn take_wave(queue: &mut VecDeque<LogPage>) -> Vec<LogPage> {
    let n = queue.len().min(CHAT_WAVE);
    queue.drain(..n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Keyspace;
    use crate::migrate::engine::KeyType;
    use crate::value::Value;

    fn item(value: Option<&str>) -> Read {
        Read {
            kind: match value {
                Some(_) => KeyType::String,
                None => KeyType::None,
            },
            pttl: -1,
            value: value.map(|v| Value::Bulk(Bytes::copy_from_slice(v.as_bytes()))),
            now_ms: 0,
        }
    }

    #[test]
    fn a_wave_writes_each_item_once_and_counts_what_it_cannot_write() {
        let pair = Pair {
            source: &(),
            target: &(),
            src: Keyspace::new(Layout::Cluster, "p").unwrap(),
            tgt: Keyspace::new(Layout::Legacy, "p").unwrap(),
            src_cluster: true,
            tgt_cluster: false,
            dry_run: false,
        };
        let ids = ["m0", "m1", "m2", "m3", "m4"];
        let log = |drain: bool, values: Vec<Read>| FetchedLog {
            page: LogPage {
                chat: "c".into(),
                drain,
                start: 0,
            },
            members: ids
                .iter()
                .take(values.len())
                .map(|id| (Bytes::from_static(id.as_bytes()), Bytes::from_static(b"7")))
                .collect(),
            values,
            clashes: BTreeSet::from([1]),
            shared: BTreeSet::from([2]),
            member_only: BTreeSet::from([3]),
        };
        let values = || {
            vec![
                item(Some("a")),
                item(Some("b")),
                item(Some("c")),
                item(Some("d")),
                item(None),
            ]
        };
        let wave = [log(false, values()), log(true, values())];
        let mut report = MigrationReport::new(Layout::Cluster, false);
        let (entries, dangling) = wave_entries(&pair, &mut report, &wave);
        // Per log: m0 written with its item, m1 clashes, m2 and m3 add only their member, m4
        // has no item.
        let written: Vec<(usize, &[u8], &[u8])> = entries
            .iter()
            .map(|e| (e.tag.0, e.args[0].as_ref(), e.args[3].as_ref()))
            .collect();
        assert_eq!(
            written,
            [
                (0, &b"m0"[..], &b"1"[..]),
                (0, b"m2", b"0"),
                (0, b"m3", b"0"),
                (1, b"m0", b"1"),
                (1, b"m2", b"0"),
                (1, b"m3", b"0"),
            ]
        );
        assert_eq!(entries[0].head, vec![pair.tgt.message_log("c")]);
        assert_eq!(entries[3].head, vec![pair.tgt.message_drain("c")]);
        assert_eq!(entries[1].args[2], "");
        assert_eq!(entries[0].args[2], "a");
        assert_eq!(dangling, vec![vec![Bytes::from_static(b"m4")]; 2]);
        assert_eq!((report.dangling, report.unrepresentable), (2, 2));
        assert_eq!(report.shared_items, 2);
        assert_eq!(wave[0].next_page().map(|p| p.start), None);
    }
}
