//! Input limits shared by every backend.

use std::time::Duration;

use crate::LockError;

/// Longest accepted key, in bytes. Fits a MySQL `VARBINARY(255)` primary key, a ZooKeeper node
/// name and a Redis key with room for prefixes.
pub const MAX_KEY_BYTES: usize = 255;
/// Shortest accepted lease: below this, one round trip can outlast the lease.
pub const MIN_LEASE: Duration = Duration::from_millis(10);
/// Longest accepted lease (30 days). Longer holds use the watchdog.
pub const MAX_LEASE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Longest accepted bounded wait (365 days); wait without a bound instead.
pub const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);
/// Lease used when the caller gives none: renewed by the watchdog (Redisson's default).
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);

/// Check a key: non-empty, at most [`MAX_KEY_BYTES`], no control characters.
///
/// Control characters are refused because ZooKeeper rejects some in node names and they make
/// logs ambiguous; every other byte sequence of valid UTF-8 is the backend's job to carry.
pub fn validate_key(key: &str) -> Result<(), LockError> {
    let len = key.len();
    if key.is_empty() {
        return Err(LockError::InvalidKey { reason: "key is empty", len });
    }
    if len > MAX_KEY_BYTES {
        return Err(LockError::InvalidKey { reason: "key is longer than 255 bytes", len });
    }
    if key.chars().any(char::is_control) {
        return Err(LockError::InvalidKey { reason: "key contains a control character", len });
    }
    Ok(())
}

/// Check a note for [`Notes::set_note`](crate::backend::Notes::set_note): at most
/// [`MAX_NOTE_BYTES`](crate::backend::MAX_NOTE_BYTES), no control characters.
pub fn validate_note(note: &str) -> Result<(), LockError> {
    if note.len() > crate::backend::MAX_NOTE_BYTES {
        return Err(LockError::InvalidConfig {
            reason: format!("note of {} bytes is longer than {}", note.len(), crate::backend::MAX_NOTE_BYTES),
        });
    }
    if note.chars().any(char::is_control) {
        return Err(LockError::InvalidConfig { reason: "note contains a control character".into() });
    }
    Ok(())
}

/// Check a lease against [`MIN_LEASE`] and [`MAX_LEASE`].
pub fn validate_lease(lease: Duration) -> Result<(), LockError> {
    if lease.is_zero() {
        return Err(LockError::InvalidLease { lease, reason: "lease is zero" });
    }
    if lease < MIN_LEASE {
        return Err(LockError::InvalidLease { lease, reason: "lease is shorter than 10ms" });
    }
    if lease > MAX_LEASE {
        return Err(LockError::InvalidLease { lease, reason: "lease is longer than 30 days" });
    }
    Ok(())
}

/// Check a bounded wait against [`MAX_WAIT`]. A zero wait means "try once".
pub fn validate_wait(wait: Duration) -> Result<(), LockError> {
    if wait > MAX_WAIT {
        return Err(LockError::InvalidWait { wait, reason: "wait is longer than 365 days" });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(validate_key("a").is_ok());
        assert!(validate_key("with space ' \" -- ; {tag} ünïcødé 🔒").is_ok());
        assert!(matches!(validate_key(""), Err(LockError::InvalidKey { len: 0, .. })));
        assert!(validate_key(&"k".repeat(MAX_KEY_BYTES)).is_ok());
        assert!(matches!(validate_key(&"k".repeat(256)), Err(LockError::InvalidKey { len: 256, .. })));
        assert!(validate_key("nul\0byte").is_err());
        assert!(validate_key("new\nline").is_err());
    }

    #[test]
    fn leases_and_waits() {
        assert!(validate_lease(Duration::ZERO).is_err());
        assert!(validate_lease(Duration::from_millis(9)).is_err());
        assert!(validate_lease(Duration::from_millis(10)).is_ok());
        assert!(validate_lease(Duration::MAX).is_err());
        assert!(validate_wait(Duration::ZERO).is_ok());
        assert!(validate_wait(Duration::MAX).is_err());
    }
}
