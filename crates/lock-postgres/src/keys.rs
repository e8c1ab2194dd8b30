//! Lock names to advisory-lock keys.
//!
//! PostgreSQL's advisory locks are named by one 64-bit integer per database. A lock name maps
//! to the first 8 bytes, big-endian, of the SHA-256 of its UTF-8 bytes, read as a signed
//! `bigint`. The map is fixed (no seed, no process state): every process and every version of
//! this crate computes the same key for the same name, and so does
//! `('x' || substr(encode(sha256(convert_to(name, 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint`
//! in SQL.
//!
//! Two names with the same key (a collision, about one pair in 4·10⁹ among 6·10⁴ names, by
//! the birthday bound) share one lock: holding one excludes the other. That costs waiting,
//! never safety: one name still never has two holders. Their fencing counters stay separate
//! (they are kept by name).

use sha2::{Digest, Sha256};

/// The advisory-lock key of `name`.
pub fn advisory_key(name: &str) -> i64 {
    let digest = Sha256::digest(name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// The key as `pg_locks` shows a `bigint` advisory lock: `classid` the high 32 bits, `objid`
/// the low 32 bits (both `oid`), `objsubid = 1`.
pub(crate) fn lock_ids(key: i64) -> (i64, i64) {
    let k = key as u64;
    (i64::from((k >> 32) as u32), i64::from(k as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fixed() {
        // sha256("k") = 8254c329a92850f6...; pinned so a change of the map is seen.
        assert_eq!(advisory_key("k"), i64::from_be_bytes([0x82, 0x54, 0xc3, 0x29, 0xa9, 0x28, 0x50, 0xf6]));
        assert_ne!(advisory_key("job-1"), advisory_key("job-2"));
        assert_eq!(lock_ids(-1), (0xffff_ffff, 0xffff_ffff));
        assert_eq!(lock_ids(0x0000_0001_0000_0002), (1, 2));
    }
}
