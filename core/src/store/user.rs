//! User data (`ctx.user`): values per user, namespace and key, with an optional time to live.
//!
//! In the cluster layout a user's entries and their index share the user's slot. The index is a
//! sorted set whose member names the entry, `enc(ns) ":" enc(key)` (unambiguous: `enc` leaves
//! no `:`), scored by the entry's expiry in ms of server time (`+inf` for none); a listing first
//! drops the members whose expiry has passed, so expired entries leave listings when their keys
//! expire. A write changes the entry and its member in one script.
//!
//! The legacy layout has no index: listing and clearing `SCAN` the user's pattern. Its key names
//! are raw (`p:user:<user>:<ns>:<key>`), so they are ambiguous when a user id or namespace holds
//! a `:` (user `a`'s pattern also matches user `a:b`'s entries): that is the historical layout,
//! kept as it was; the cluster layout has no such aliasing.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use percent_encoding::percent_decode_str;

use crate::error::Error;
use crate::keys::enc_bytes;
use crate::keys::Keyspace;
use crate::plan::{misuse, single, Plan, Reply, Single, Step};
use crate::request::{Access, Arg, Request};
use crate::scan::{scan, Scan};
use crate::value::Value;

use super::{forward, one, ttl_arg, values, MAX_PAGE};
use crate::page::Limit;
use crate::scripts::DELETE_INDEXED_CHUNK;
use crate::scripts::{DELETE_INDEXED, LIST_EXPIRING_INDEX, SET_EXPIRING_INDEXED};

/// One entry of a user's data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserEntry {
    /// The namespace.
    pub ns: String,
    /// The key within the namespace.
    pub key: String,
    /// The value, as stored.
    pub value: Bytes,
}

/// Where a listing of a user's data goes on: the namespace and key of the last entry of a page
/// (entries are listed by namespace, then key).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserDataCursor {
    /// The namespace.
    pub ns: String,
    /// The key within the namespace.
    pub key: String,
}

/// One page of a user's entries, sorted by namespace then key; `next` is where the next page
/// starts, `None` after the last page.
pub type UserDataPage = crate::page::Page<UserEntry, UserDataCursor>;

/// The index member of an entry: `enc(ns) ":" enc(key)`, as sent; the migration writes and
/// prunes the same members.
pub(crate) fn member(ns: &str, key: &str) -> Bytes {
    let (ns, key) = (enc_bytes(ns.as_bytes()), enc_bytes(key.as_bytes()));
    crate::exact::format_bytes(format_args!("{ns}:{key}"))
}

/// The namespace and key of an index member; `None` for a member this store did not write.
fn parse_member(member: &str) -> Option<(String, String)> {
    let (ns, key) = member.split_once(':')?;
    let decode = |s: &str| {
        percent_decode_str(s)
            .decode_utf8()
            .ok()
            .map(|c| c.into_owned())
    };
    Some((decode(ns)?, decode(key)?))
}

/// Refuses, in the legacy layout, a user id or namespace holding `:`: its entries' names
/// (`p:user:<user>:<ns>:<key>`) would read back as another user's or namespace's, and a
/// listing of user `a` would also match user `a:b`. The cluster layout encodes every segment
/// and holds any id.
pub fn check_legacy_ids(ks: &Keyspace, user: &str, ns: Option<&str>) -> Result<(), Error> {
    if ks.layout() != crate::keys::Layout::Legacy {
        return Ok(());
    }
    for (field, value) in [("user id", Some(user)), ("namespace", ns)] {
        if let Some(value) = value.filter(|v| v.contains(':')) {
            return Err(crate::keys::KeyError::LegacyColon {
                field,
                value: value.to_owned(),
            }
            .into());
        }
    }
    Ok(())
}

/// Stores an entry, expiring after `ttl` (`None`: never).
pub fn set_user_data(
    ks: &Keyspace,
    user: &str,
    ns: &str,
    key: &str,
    value: Bytes,
    ttl: Option<Duration>,
) -> Result<Single<()>, Error> {
    check_legacy_ids(ks, user, Some(ns))?;
    let entry = ks.user_entry(user, ns, key);
    let request = match ks.user_index(user) {
        Some(index) => Request::script_in(
            ks,
            &SET_EXPIRING_INDEXED,
            Access::Write,
            vec![entry, index],
            vec![member(ns, key), value, ttl_arg(ttl)?],
        )?,
        None => super::set_with_ttl(&entry, value, ttl)?,
    };
    Ok(single("set_user_data", request, |_| Ok(())))
}

/// Reads an entry.
pub fn get_user_data(
    ks: &Keyspace,
    user: &str,
    ns: &str,
    key: &str,
) -> Result<Single<Option<Bytes>>, Error> {
    check_legacy_ids(ks, user, Some(ns))?;
    let request = Request::cmd(Access::Read, "GET")
        .key(ks.user_entry(user, ns, key))
        .build()?;
    Ok(single("get_user_data", request, Value::into_opt_bytes))
}

/// Deletes an entry; yields `true` when it existed.
pub fn delete_user_data(
    ks: &Keyspace,
    user: &str,
    ns: &str,
    key: &str,
) -> Result<Single<bool>, Error> {
    check_legacy_ids(ks, user, Some(ns))?;
    let entry = ks.user_entry(user, ns, key);
    let request = match ks.user_index(user) {
        Some(index) => Request::script_in(
            ks,
            &DELETE_INDEXED,
            Access::Write,
            vec![entry, index],
            vec![member(ns, key)],
        )?,
        None => Request::cmd(Access::Write, "DEL").key(entry).build()?,
    };
    Ok(single("delete_user_data", request, super::positive))
}

/// The `(ns, key)` of the legacy keys a scan found, for `user` and optionally one namespace.
fn legacy_entries(
    ks: &Keyspace,
    user: &str,
    ns: Option<&str>,
    keys: &[Bytes],
) -> Vec<(String, String)> {
    // The key of the empty namespace and key is `p:user:<user>::`; without its last `:` it is
    // the head of every entry of the user.
    let all = ks.user_entry(user, "", "");
    let user_head = &all.as_bytes()[..all.as_bytes().len().saturating_sub(1)];
    let mut entries = Vec::new();
    for key in keys {
        let Some(rest) = key
            .strip_prefix(user_head)
            .and_then(|rest| std::str::from_utf8(rest).ok())
        else {
            continue;
        };
        let parsed = match ns {
            Some(ns) => rest
                .strip_prefix(ns)
                .and_then(|r| r.strip_prefix(':'))
                .map(|k| (ns.to_owned(), k.to_owned())),
            None => rest
                .split_once(':')
                .map(|(n, k)| (n.to_owned(), k.to_owned())),
        };
        entries.extend(parsed);
    }
    entries
}

/// The pattern of a user's legacy keys.
fn legacy_scan(ks: &Keyspace, user: &str, ns: Option<&str>) -> Scan {
    scan(ks.user_pattern(user, ns).unwrap_or_default(), usize::MAX)
}

/// Lists a user's entries, in one namespace or all, sorted by namespace then key: the page of
/// `limit` after `after`, and the cursor of the next one.
pub fn list_user_data(
    ks: &Keyspace,
    user: &str,
    ns: Option<&str>,
    after: Option<&UserDataCursor>,
    limit: Limit,
) -> ListUserData {
    ListUserData {
        ks: ks.clone(),
        user: user.to_owned(),
        ns: ns.map(str::to_owned),
        after: after.cloned(),
        limit: limit.items(),
        next: None,
        state: ListState::Start,
    }
}

/// The plan of [`list_user_data`]: the live members of the user's index (cluster) or a scan
/// (legacy), sorted, then the values of the page (one `MGET` in the user's slot, or one `GET`
/// per key in the legacy layout). An entry deleted or expired in between is left out.
#[derive(Debug)]
pub struct ListUserData {
    ks: Keyspace,
    user: String,
    ns: Option<String>,
    after: Option<UserDataCursor>,
    limit: usize,
    /// The cursor of the next page, once the page's ids are known.
    next: Option<UserDataCursor>,
    state: ListState,
}

#[derive(Debug)]
enum ListState {
    Start,
    Index,
    Scanning(Scan),
    Fetching { groups: Vec<Vec<(String, String)>> },
    Finished,
}

impl ListUserData {
    fn begin(&mut self) -> Result<Step<UserDataPage>, Error> {
        match self.ks.user_index(&self.user) {
            Some(index) => {
                let request = Request::script_in(
                    &self.ks,
                    &LIST_EXPIRING_INDEX,
                    Access::Write,
                    vec![index],
                    Vec::new(),
                )?;
                self.state = ListState::Index;
                Ok(Step::Send(request.into()))
            }
            None => {
                let mut scan = legacy_scan(&self.ks, &self.user, self.ns.as_deref());
                let step = scan.start();
                self.state = ListState::Scanning(scan);
                self.scanned(step)
            }
        }
    }

    fn scanned(&mut self, step: Step<Vec<Bytes>>) -> Result<Step<UserDataPage>, Error> {
        match forward(step) {
            Ok(keys) => {
                let entries = legacy_entries(&self.ks, &self.user, self.ns.as_deref(), &keys);
                self.fetch(entries)
            }
            Err(step) => Ok(step),
        }
    }

    fn fetch(&mut self, entries: Vec<(String, String)>) -> Result<Step<UserDataPage>, Error> {
        let mut sorted: Vec<(String, String)> = entries
            .into_iter()
            .filter(|(ns, _)| self.ns.as_ref().is_none_or(|want| want == ns))
            .filter(|(ns, key)| {
                self.after
                    .as_ref()
                    .is_none_or(|after| (ns.as_str(), key.as_str()) > (&after.ns, &after.key))
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .take(self.limit + 1)
            .collect();
        if sorted.len() > self.limit {
            sorted.truncate(self.limit);
            self.next = sorted.last().map(|(ns, key)| UserDataCursor {
                ns: ns.clone(),
                key: key.clone(),
            });
        }
        if sorted.is_empty() {
            self.state = ListState::Finished;
            return Ok(Step::Done(Ok(UserDataPage {
                items: Vec::new(),
                next: None,
            })));
        }
        // Entries of one user share a slot in the cluster layout; legacy keys do not.
        let per_request = match self.ks.user_index(&self.user) {
            Some(_) => MAX_PAGE,
            None => 1,
        };
        let groups: Vec<Vec<(String, String)>> =
            sorted.chunks(per_request).map(<[_]>::to_vec).collect();
        let batch = groups
            .iter()
            .map(|group| {
                group
                    .iter()
                    .fold(Request::cmd(Access::Read, "MGET"), |b, (ns, key)| {
                        b.key(self.ks.user_entry(&self.user, ns, key))
                    })
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.state = ListState::Fetching { groups };
        Ok(Step::Send(batch.into()))
    }

    fn on_replies(
        &mut self,
        state: ListState,
        replies: Vec<Reply>,
    ) -> Result<Step<UserDataPage>, Error> {
        match state {
            ListState::Index => {
                let members = one(replies)?.into_array()?;
                let mut entries = Vec::with_capacity(members.len());
                for m in members {
                    entries.extend(parse_member(&m.into_string()?));
                }
                self.fetch(entries)
            }
            ListState::Scanning(mut scan) => {
                let step = scan.resume(replies);
                self.state = ListState::Scanning(scan);
                self.scanned(step)
            }
            ListState::Fetching { groups } => {
                let replies = values(replies, groups.len())?;
                let mut out = Vec::new();
                for (group, reply) in groups.into_iter().zip(replies) {
                    for ((ns, key), value) in group.into_iter().zip(reply.into_array()?) {
                        if let Some(value) = value.into_opt_bytes()? {
                            out.push(UserEntry { ns, key, value });
                        }
                    }
                }
                Ok(Step::Done(Ok(UserDataPage {
                    items: out,
                    next: self.next.take(),
                })))
            }
            ListState::Start | ListState::Finished => {
                Err(misuse("ListUserData resumed out of order"))
            }
        }
    }
}

impl Plan for ListUserData {
    type Output = UserDataPage;

    fn operation(&self) -> &'static str {
        "list_user_data"
    }

    fn start(&mut self) -> Step<UserDataPage> {
        match self.state {
            ListState::Start => self.begin().unwrap_or_else(|e| Step::Done(Err(e))),
            _ => Step::Done(Err(misuse("ListUserData::start called twice"))),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<UserDataPage> {
        let state = std::mem::replace(&mut self.state, ListState::Finished);
        self.on_replies(state, replies)
            .unwrap_or_else(|e| Step::Done(Err(e)))
    }
}

/// Deletes a user's entries, in one namespace or all. Yields how many existed.
pub fn clear_user_data(ks: &Keyspace, user: &str, ns: Option<&str>) -> ClearUserData {
    ClearUserData {
        ks: ks.clone(),
        user: user.to_owned(),
        ns: ns.map(str::to_owned),
        state: ClearState::Start,
    }
}

/// The plan of [`clear_user_data`]: the members of the user's index (cluster) or a scan
/// (legacy), then one batch of deletions: `delete_indexed_chunk` calls of up to 1000 entries,
/// each removing entries and members together (cluster), or one `DEL` per key (legacy). Entries
/// created after the members were read are kept; one written again meanwhile may go.
#[derive(Debug)]
pub struct ClearUserData {
    ks: Keyspace,
    user: String,
    ns: Option<String>,
    state: ClearState,
}

#[derive(Debug)]
enum ClearState {
    Start,
    Index,
    Scanning(Scan),
    Deleting { calls: usize },
    Finished,
}

impl ClearUserData {
    fn begin(&mut self) -> Result<Step<u64>, Error> {
        match self.ks.user_index(&self.user) {
            Some(index) => {
                let request = Request::cmd(Access::Read, "ZRANGE")
                    .key(&index)
                    .arg(0u32)
                    .arg(-1i64)
                    .build()?;
                self.state = ClearState::Index;
                Ok(Step::Send(request.into()))
            }
            None => {
                let mut scan = legacy_scan(&self.ks, &self.user, self.ns.as_deref());
                let step = scan.start();
                self.state = ClearState::Scanning(scan);
                self.scanned(step)
            }
        }
    }

    fn scanned(&mut self, step: Step<Vec<Bytes>>) -> Result<Step<u64>, Error> {
        let keys = match forward(step) {
            Ok(keys) => keys,
            Err(step) => return Ok(step),
        };
        let batch = legacy_entries(&self.ks, &self.user, self.ns.as_deref(), &keys)
            .iter()
            .map(|(ns, key)| {
                Request::cmd(Access::Write, "DEL")
                    .key(self.ks.user_entry(&self.user, ns, key))
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.delete(batch)
    }

    fn delete(&mut self, batch: Vec<Request>) -> Result<Step<u64>, Error> {
        if batch.is_empty() {
            self.state = ClearState::Finished;
            return Ok(Step::Done(Ok(0)));
        }
        self.state = ClearState::Deleting { calls: batch.len() };
        Ok(Step::Send(batch.into()))
    }

    fn on_members(&mut self, members: Vec<Value>) -> Result<Step<u64>, Error> {
        let mut chosen = Vec::new();
        for m in members {
            let m = m.into_string()?;
            if let Some((ns, key)) = parse_member(&m) {
                if self.ns.as_ref().is_none_or(|want| *want == ns) {
                    chosen.push((m, ns, key));
                }
            }
        }
        let index = self.ks.user_index(&self.user);
        let batch = chosen
            .chunks(MAX_PAGE)
            .map(|chunk| {
                let mut keys = Vec::with_capacity(chunk.len() + 1);
                keys.extend(index.clone());
                keys.extend(
                    chunk
                        .iter()
                        .map(|(_, ns, key)| self.ks.user_entry(&self.user, ns, key)),
                );
                let args = chunk
                    .iter()
                    .map(|(m, _, _)| m.as_str().into_arg())
                    .collect();
                Request::script_in(&self.ks, &DELETE_INDEXED_CHUNK, Access::Write, keys, args)
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.delete(batch)
    }

    fn on_replies(&mut self, state: ClearState, replies: Vec<Reply>) -> Result<Step<u64>, Error> {
        match state {
            ClearState::Index => self.on_members(one(replies)?.into_array()?),
            ClearState::Scanning(mut scan) => {
                let step = scan.resume(replies);
                self.state = ClearState::Scanning(scan);
                self.scanned(step)
            }
            ClearState::Deleting { calls } => {
                let mut deleted = 0u64;
                for v in values(replies, calls)? {
                    deleted += u64::try_from(v.as_i64()?).unwrap_or(0);
                }
                Ok(Step::Done(Ok(deleted)))
            }
            ClearState::Start | ClearState::Finished => {
                Err(misuse("ClearUserData resumed out of order"))
            }
        }
    }
}

impl Plan for ClearUserData {
    type Output = u64;

    fn operation(&self) -> &'static str {
        "clear_user_data"
    }

    fn start(&mut self) -> Step<u64> {
        match self.state {
            ClearState::Start => self.begin().unwrap_or_else(|e| Step::Done(Err(e))),
            _ => Step::Done(Err(misuse("ClearUserData::start called twice"))),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<u64> {
        let state = std::mem::replace(&mut self.state, ClearState::Finished);
        self.on_replies(state, replies)
            .unwrap_or_else(|e| Step::Done(Err(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_round_trip() {
        for (ns, key) in [("", ""), ("a:b", "c"), ("a", "b:c"), ("%", "😀 {x}*")] {
            assert_eq!(
                parse_member(std::str::from_utf8(&member(ns, key)).unwrap()),
                Some((ns.to_owned(), key.to_owned()))
            );
        }
        assert_ne!(member("a:b", "c"), member("a", "b:c"));
        assert_eq!(parse_member("no-separator"), None);
    }
}
