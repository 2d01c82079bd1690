//! Named leases with tokens that never go backwards.

use std::time::Duration;

use crate::error::Error;
use crate::keys::Keyspace;
use crate::plan::{single, Single};
use crate::request::{Access, Arg, Request};
use crate::scripts::LEASE;
use crate::ttl::ttl_ms;

use super::fence::Replicated;
use super::{grant, held, require};

pub(super) fn lease_request(
    ks: &Keyspace,
    op: &str,
    name: &str,
    holder: &str,
    ttl: Option<Duration>,
    token: u64,
) -> Result<Request, Error> {
    // A release takes no TTL (the script ignores ARGV[3] then); "1" keeps the argument count.
    let ttl = match ttl {
        Some(ttl) => ttl_ms(ttl, "ttl")?,
        None => 1,
    };
    Request::script_in(
        ks,
        &LEASE,
        Access::Write,
        vec![ks.lease(name)],
        vec![
            op.into_arg(),
            holder.into_arg(),
            ttl.into_arg(),
            token.into_arg(),
        ],
    )
}

/// Acquires the lease `name` for `holder`. Yields its token (greater than any token handed out
/// before, even after expiry; the same token when `holder` takes its live lease again) or
/// `None` while another holder's lease is live.
pub fn lease_acquire(
    ks: &Keyspace,
    name: &str,
    holder: &str,
    ttl: Duration,
) -> Result<Single<Option<u64>>, Error> {
    let request = lease_request(ks, "acquire", name, holder, Some(ttl), 0)?;
    Ok(single("lease_acquire", request, grant))
}

/// Extends a live lease; [`Error::NotHolder`] when it expired or passed to another holder.
pub fn lease_renew(
    ks: &Keyspace,
    name: &str,
    holder: &str,
    token: u64,
    ttl: Duration,
) -> Result<Single<()>, Error> {
    let request = lease_request(ks, "renew", name, holder, Some(ttl), token)?;
    let what = format!("lease {name:?}");
    Ok(single("lease_renew", request, move |v| {
        require(held(v)?, what)
    }))
}

/// Ends a lease early; yields whether `holder` still held it (live, with that token). The token
/// counter stays.
pub fn lease_release(
    ks: &Keyspace,
    name: &str,
    holder: &str,
    token: u64,
) -> Result<Single<bool>, Error> {
    let request = lease_request(ks, "release", name, holder, None, token)?;
    Ok(single("lease_release", request, held))
}

/// [`lease_acquire`] that counts only once `replicas` replicas acknowledged the grant.
pub fn lease_acquire_replicated(
    ks: &Keyspace,
    name: &str,
    holder: &str,
    ttl: Duration,
    replicas: u32,
    timeout: Duration,
) -> Result<Replicated, Error> {
    let grant = lease_request(ks, "acquire", name, holder, Some(ttl), 0)?;
    let (ks, name_owned, holder) = (ks.clone(), name.to_owned(), holder.to_owned());
    Replicated::new(
        "lease_acquire",
        grant,
        Box::new(move |token| lease_request(&ks, "release", &name_owned, &holder, None, token)),
        replicas,
        timeout,
        format!("lease {name:?}"),
    )
}
