//! A side's lifecycle record, `p:{meta}:lifecycle:<layout>` ([`Keyspace::lifecycle`]): its
//! fields, read and written. The migration decides from two of them
//! ([`crate::migrate::lifecycle`]); a store's `start()` stamps its own. It lives with the key
//! names because both sides of the crate read it, and neither may depend on the other.
//!
//! [`Keyspace::lifecycle`]: crate::Keyspace::lifecycle

use bytes::Bytes;

/// A side's part in the copy its record names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// No copy made this side: bots created it (a cluster-layout store started on an empty
    /// keyspace). It is live.
    Origin,
    /// The copy was made from this side.
    Source,
    /// The copy was made into this side.
    Target,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Origin => "origin",
            Role::Source => "source",
            Role::Target => "target",
        }
    }

    fn parse(text: &[u8]) -> Option<Role> {
        [Role::Origin, Role::Source, Role::Target]
            .into_iter()
            .find(|r| r.name().as_bytes() == text)
    }
}

/// Where a side stands in its copy, or in its deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A copy from or into this side began and has not completed (a target without this phase
    /// complete holds part of the data).
    Copying,
    /// The copy completed (a target holds every namespace; a cluster target carries the marker).
    Complete,
    /// A cleanup is deleting this side.
    Deleting,
    /// A cleanup deleted this side's data.
    Deleted,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Copying => "copying",
            Phase::Complete => "complete",
            Phase::Deleting => "deleting",
            Phase::Deleted => "deleted",
        }
    }

    fn parse(text: &[u8]) -> Option<Phase> {
        [
            Phase::Copying,
            Phase::Complete,
            Phase::Deleting,
            Phase::Deleted,
        ]
        .into_iter()
        .find(|p| p.name().as_bytes() == text)
    }

    /// Whether a cleanup began on the side.
    pub fn is_deletion(self) -> bool {
        matches!(self, Phase::Deleting | Phase::Deleted)
    }
}

/// One side's lifecycle record (a hash at [`Keyspace::lifecycle`](crate::Keyspace::lifecycle)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The id of the last copy this side took part in: the copy's source server time in ms when
    /// it began (`0` for an [`Role::Origin`] record).
    pub copy: u64,
    /// The copy before it, if any: a step that was killed after writing one side's record of a
    /// new copy but not the other's is recognised by it.
    pub prev: Option<u64>,
    /// This side's part in `copy`.
    pub role: Role,
    /// Where this side stands.
    pub phase: Phase,
    /// A target made to match its source exactly (a mirror): its source may be deleted before
    /// any bot starts on it. A copy-only target kept some of its older keys.
    pub exact: bool,
    /// The other side of `copy`, for people ("cluster keyspace \"bot\" on a cluster of 3
    /// masters").
    pub peer: String,
    /// Server time in ms when `phase` was last set.
    pub at_ms: i64,
    /// The copy this side held when bots last started on it: equal to `copy` once bots started
    /// here since that copy.
    pub started: Option<u64>,
    /// Server time in ms of that start.
    pub started_at_ms: Option<i64>,
    /// Every copy (the last [`LIVE_AFTER`]) this side held when bots started on it: the side
    /// went live after each of them. A later step reads it to know that this side was where
    /// the bots wrote after an older copy, even once newer copies came and went.
    pub live_after: Vec<u64>,
}

/// How many copies a record remembers bots starting after.
pub const LIVE_AFTER: usize = 16;

impl Record {
    /// The record a cluster-layout store writes when it starts on a keyspace no copy made.
    pub fn origin(now_ms: i64) -> Record {
        Record {
            copy: 0,
            prev: None,
            role: Role::Origin,
            phase: Phase::Complete,
            exact: true,
            peer: String::new(),
            at_ms: now_ms,
            started: Some(0),
            started_at_ms: Some(now_ms),
            live_after: vec![0],
        }
    }

    /// Whether bots started on this side while it held `copy`.
    pub fn live_after(&self, copy: u64) -> bool {
        self.started == Some(copy) || self.live_after.contains(&copy)
    }

    /// Whether bots started on this side since its copy: this side is where they write.
    pub fn started_since_copy(&self) -> bool {
        self.live_after(self.copy)
    }

    /// The hash fields of the record, in a fixed order.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            ("copy", self.copy.to_string()),
            ("role", self.role.name().to_owned()),
            ("phase", self.phase.name().to_owned()),
            ("exact", if self.exact { "1" } else { "0" }.to_owned()),
            ("peer", self.peer.clone()),
            ("at", self.at_ms.to_string()),
        ];
        if let Some(prev) = self.prev {
            out.push(("prev", prev.to_string()));
        }
        if let (Some(started), Some(at)) = (self.started, self.started_at_ms) {
            out.push(("started", started.to_string()));
            out.push(("started_at", at.to_string()));
        }
        if !self.live_after.is_empty() {
            let list: Vec<String> = self.live_after.iter().map(u64::to_string).collect();
            out.push(("live", list.join(",")));
        }
        out
    }

    /// Reads a record from its hash fields (a flat `HGETALL` reply); `Err` names what is wrong.
    pub fn parse(flat: &[Bytes]) -> Result<Record, String> {
        let field = |name: &str| -> Option<&Bytes> {
            flat.chunks(2)
                .find(|pair| pair.len() == 2 && pair[0].as_ref() == name.as_bytes())
                .map(|pair| &pair[1])
        };
        let number = |name: &str| -> Result<Option<u64>, String> {
            field(name)
                .map(|v| {
                    std::str::from_utf8(v)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| format!("field {name} is not a number"))
                })
                .transpose()
        };
        let time = |name: &str| -> Result<Option<i64>, String> {
            field(name)
                .map(|v| {
                    std::str::from_utf8(v)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| format!("field {name} is not a time"))
                })
                .transpose()
        };
        let copy = number("copy")?.ok_or("no copy field")?;
        let role = field("role")
            .and_then(|r| Role::parse(r))
            .ok_or("no known role")?;
        let phase = field("phase")
            .and_then(|p| Phase::parse(p))
            .ok_or("no known phase")?;
        Ok(Record {
            copy,
            prev: number("prev")?,
            role,
            phase,
            exact: field("exact").is_some_and(|e| e.as_ref() == b"1"),
            peer: field("peer")
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .unwrap_or_default(),
            at_ms: time("at")?.unwrap_or(0),
            started: number("started")?,
            started_at_ms: time("started_at")?,
            live_after: match field("live") {
                None => Vec::new(),
                Some(list) => std::str::from_utf8(list)
                    .ok()
                    .and_then(|t| t.split(',').map(|n| n.parse().ok()).collect())
                    .ok_or("field live is not a list of numbers")?,
            },
        })
    }
}

impl Record {
    /// What the record says, for people: the copy, its phase, and when bots last started.
    pub fn describe(&self) -> String {
        describe(self)
    }
}

fn describe(r: &Record) -> String {
    let mut text = match r.role {
        Role::Origin => "created by bots (no copy)".to_owned(),
        Role::Source => format!("source of the copy of {} to {}", when(r.copy), r.peer),
        Role::Target => format!(
            "{} copy of {} from {}",
            if r.exact { "mirror" } else { "copy-only" },
            when(r.copy),
            r.peer
        ),
    };
    if r.role != Role::Origin {
        text.push_str(&format!(", {} at {}", r.phase.name(), when_i(r.at_ms)));
    }
    match (r.started_since_copy(), r.started_at_ms) {
        (true, Some(at)) => text.push_str(&format!("; bots started here at {}", when_i(at))),
        (false, Some(at)) => text.push_str(&format!(
            "; no bot started here since (last at {})",
            when_i(at)
        )),
        _ => text.push_str("; no bot started here since"),
    }
    text
}

fn when(ms: u64) -> String {
    when_i(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// A server time in ms as UTC, `2026-12-01 21:30:05`: the core has no clock, but dates in
/// refusals are read by people.
fn when_i(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
