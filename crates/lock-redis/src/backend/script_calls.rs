//! The release and cancel scripts, as both an attempt's cleanup and the `LockBackend` impl
//! send them.

use std::time::Duration;

use lock_core::backend::millis;
use lock_core::{FencingToken, OwnerToken, Result};

use crate::call::Token;
use crate::conn::RedisConnection;
use crate::error::classify;
use crate::keys::KeyNames;
use crate::options::Mode;
use crate::scripts;

/// How long python-redis-lock's signal list lives after a release pushed it: that library's
/// default `signal_expire` (1000 ms), so our release leaves the list exactly as its own does.
const PRL_SIGNAL_EXPIRE: Duration = Duration::from_millis(1000);

/// `release_simple.lua`: delete the lock if its value starts with `owner` and hand it over to
/// one waiter; `(2, waiter named or "")` when deleted (or when a copy of this release already
/// deleted it), `(0, "")` otherwise.
pub(super) async fn release_simple(
    mut conn: RedisConnection,
    names: &KeyNames,
    owner: &str,
    claim_ms: u64,
) -> Result<(i64, String)> {
    scripts::RELEASE_SIMPLE
        .get(conn.sharded())
        .key(names.lock())
        .key(names.waiters())
        .key(names.queue())
        .key(names.fence())
        .arg(owner)
        .arg(names.channel())
        .arg(claim_ms)
        .arg(Token(OwnerToken::random()))
        .invoke_async(&mut conn)
        .await
        .map_err(classify)
}

/// `release_plain.lua`: delete the lock if its value starts with `token` (an owner token, or
/// owner token and nonce), push python-redis-lock's signal in that mode, publish for our own
/// waiters; 1 when deleted.
pub(super) async fn release_plain(mut conn: RedisConnection, names: &KeyNames, token: &str) -> Result<i64> {
    let mut inv = scripts::RELEASE_PLAIN.prepare_invoke();
    inv.key(names.lock());
    if let Some(signal) = &names.signal() {
        inv.key(signal);
    }
    inv.arg(token).arg(names.channel()).arg(millis(PRL_SIGNAL_EXPIRE));
    inv.invoke_async(&mut conn).await.map_err(classify)
}

/// `evict_plain.lua`: in an interop mode, delete the hold of ours whose fence is `fence` and
/// wake waiters as `release_plain` does; `true` when deleted.
pub(super) async fn evict_plain(
    mut conn: RedisConnection,
    names: &KeyNames,
    fence: FencingToken,
) -> Result<bool> {
    let mut inv = scripts::EVICT_PLAIN.prepare_invoke();
    inv.key(names.lock()).key(names.fence());
    if let Some(signal) = &names.signal() {
        inv.key(signal);
    }
    inv.arg(fence.0).arg(names.channel()).arg(millis(PRL_SIGNAL_EXPIRE));
    let evicted: i64 = inv.invoke_async(&mut conn).await.map_err(classify)?;
    Ok(evicted == 1)
}

/// The mode's cancel script (`cancel_simple.lua`, `cancel_hash.lua`) for `owner`: with a
/// `nonce`, undoes the grant or hold made by the attempt with that nonce and nothing else;
/// without, leaves the wait set (and the fair queue) as the waiter `tag` and gives up a hold
/// handed to it, unless this client took it (`taken`: the fence it took, or ''). Both take the
/// same arguments, their keys in their own order.
#[allow(clippy::too_many_arguments)] // the script's own arguments, named
pub(super) async fn cancel(
    mode: Mode,
    mut conn: RedisConnection,
    names: &KeyNames,
    owner: &str,
    nonce: &str,
    claim_ms: u64,
    tag: &str,
    taken: &str,
) -> Result<()> {
    let (script, keys) = match mode {
        Mode::Simple => (
            scripts::CANCEL_SIMPLE.get(conn.sharded()),
            [names.lock(), names.waiters(), names.queue(), names.fence()],
        ),
        Mode::Reentrant | Mode::Fair => (
            scripts::CANCEL_HASH.get(conn.sharded()),
            [names.lock(), names.queue(), names.waiters(), names.fence()],
        ),
        // No wait set to leave; an interop attempt's own cleanup is `arm_plain`.
        Mode::RedisPy | Mode::PythonRedisLock => return Ok(()),
    };
    let mut inv = script.prepare_invoke();
    for k in keys {
        inv.key(k);
    }
    let _: i64 = inv
        .arg(owner)
        .arg(nonce)
        .arg(names.channel())
        .arg(claim_ms)
        .arg(tag)
        .arg(taken)
        .invoke_async(&mut conn)
        .await
        .map_err(classify)?;
    Ok(())
}
