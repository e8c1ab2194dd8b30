//! Guarded writes to the user's own Redis keys.
//!
//! A holder paused past its lease can wake and write after the next holder did; the lock
//! cannot stop that write, the data's store can. [`set`] and [`delete`] run one script that
//! raises the key's watermark to the writer's fence and writes, or refuses a fence older than
//! one already admitted and writes nothing. The watermark is the key [`fence_key`] names,
//! in the data key's Cluster hash slot, so the script touches one slot.
//!
//! ```no_run
//! # async fn demo(mut conn: redis::aio::MultiplexedConnection, guard: lock_core::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
//! let fence = guard.fence().expect("a fenced lock");
//! // Refused (FenceError::Stale) when a newer holder wrote first: the lock was lost.
//! lock_redis::fenced::set(&mut conn, "balance:42", "70", fence).await?;
//! # Ok(()) }
//! ```

use std::sync::LazyLock;

use lock_core::FencingToken;
use lock_core::fenced::{FenceError, as_i64, judge};
use redis::aio::ConnectionLike;
use redis::{RedisError, Script, ToRedisArgs};

/// What the watermark key adds to the data key.
const SUFFIX: &str = ":dlock-fence";

/// KEYS: watermark, data. ARGV: fence, "set" or "del", value. Answers the stored watermark.
/// Fences are compared as decimal strings (longer is larger), since Lua's numbers are doubles.
/// Raising to the greater and writing the same value are idempotent, so a resend is harmless.
static GUARDED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local seen = redis.call('GET', KEYS[1])
local f = ARGV[1]
if seen and (#seen > #f or (#seen == #f and seen > f)) then return seen end
redis.call('SET', KEYS[1], f)
if ARGV[2] == 'set' then redis.call('SET', KEYS[2], ARGV[3]) else redis.call('DEL', KEYS[2]) end
return f
",
    )
});

/// The key that keeps `key`'s watermark: in the same Cluster hash slot. A key with no hash tag
/// is wrapped in one (`{key}:dlock-fence`); a key with a tag keeps it (`key:dlock-fence`). A key
/// with a `}` but no tag has no such neighbour, and is refused.
pub fn fence_key<E>(key: &str) -> Result<String, FenceError<E>> {
    let tagged = key.find('{').is_some_and(|open| key[open + 1..].find('}').is_some_and(|len| len > 0));
    if tagged {
        Ok(format!("{key}{SUFFIX}"))
    } else if key.contains('}') {
        Err(FenceError::Invalid {
            reason: format!("key {key:?} has a '}}' but no hash tag: no key shares its Cluster slot"),
        })
    } else {
        Ok(format!("{{{key}}}{SUFFIX}"))
    }
}

/// Sets `key` to `value` if `fence` is not older than the highest admitted for `key`.
pub async fn set<C, V>(
    conn: &mut C,
    key: &str,
    value: V,
    fence: FencingToken,
) -> Result<(), FenceError<RedisError>>
where
    C: ConnectionLike + Send,
    V: ToRedisArgs + Send + Sync,
{
    guarded(conn, key, fence, "set", value).await
}

/// Deletes `key` if `fence` is not older than the highest admitted for `key`. The watermark
/// stays, so a stale holder cannot bring the key back.
pub async fn delete<C>(conn: &mut C, key: &str, fence: FencingToken) -> Result<(), FenceError<RedisError>>
where
    C: ConnectionLike + Send,
{
    guarded(conn, key, fence, "del", "").await
}

async fn guarded<C, V>(
    conn: &mut C,
    key: &str,
    fence: FencingToken,
    op: &str,
    value: V,
) -> Result<(), FenceError<RedisError>>
where
    C: ConnectionLike + Send,
    V: ToRedisArgs + Send + Sync,
{
    as_i64(fence)?;
    let mark = fence_key(key)?;
    let stored: String = GUARDED
        .key(&mark)
        .key(key)
        .arg(fence.0)
        .arg(op)
        .arg(value)
        .invoke_async(conn)
        .await
        .map_err(FenceError::Store)?;
    let stored = stored.parse().map(FencingToken).map_err(|_| FenceError::Invalid {
        reason: format!("the watermark {mark:?} holds {stored:?}, not a fence"),
    })?;
    judge(key, fence, stored)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(key: &str) -> Option<String> {
        fence_key::<()>(key).ok()
    }

    #[test]
    fn the_watermark_shares_the_key_slot() {
        assert_eq!(mark("balance").as_deref(), Some("{balance}:dlock-fence"));
        assert_eq!(mark("user:{7}:balance").as_deref(), Some("user:{7}:balance:dlock-fence"));
        assert_eq!(mark("a{b").as_deref(), Some("{a{b}:dlock-fence"));
        assert_eq!(mark("{}x"), None, "an empty tag hashes the whole key, which '}}' would cut");
        assert_eq!(mark("a}b"), None);
    }
}
