//! The contenders' nodes in a lock directory: what ours are called and which names, Curator's,
//! kazoo's and ours, stand in the one queue, in sequence order (the head holds the lock).

use lock_core::backend::Side;

/// Curator's node names between the `_c_<uuid>-` protection prefix and the sequence: its
/// `InterProcessMutex` (and our mutex), and the two sides of its `InterProcessReadWriteLock`
/// (and ours), which name readers and writers apart so that either kind of client sees both.
const LOCK_NAME: &str = "lock-";
const READ_NAME: &str = "__READ__";
const WRITE_NAME: &str = "__WRIT__";

/// What precedes the sequence number in the name of a node that contends for the lock:
/// Curator's `InterProcessMutex` and ours (`_c_<uuid>-lock-<seq>`), Curator's read and write
/// sides and ours (`_c_<uuid>-__READ__<seq>`, `-__WRIT__`), kazoo's `Lock`/`WriteLock`
/// (`<uuid>__lock__<seq>`) and kazoo's `ReadLock` (`<uuid>__rlock__<seq>`). A node ahead of
/// ours is waited for whoever made it: all are numbered by the same per-directory counter, so
/// one order holds for all (see the README on which mixes are safe in the other direction).
const CONTENDERS: [&str; 5] = ["-lock-", "__lock__", "__rlock__", READ_NAME, WRITE_NAME];

/// The contenders that are readers: they exclude writers, not each other.
const READERS: [&str; 2] = [READ_NAME, "__rlock__"];

/// Whether a contender's node is a reader's.
pub(crate) fn is_reader(name: &str) -> bool {
    let head = name.trim_end_matches(|c: char| c.is_ascii_digit());
    READERS.iter().any(|r| head.ends_with(r))
}

/// The name our node for `side` gets between the protection prefix and the sequence.
pub(crate) fn node_name(side: Side) -> &'static str {
    match side {
        Side::Read => READ_NAME,
        Side::Write => WRITE_NAME,
        _ => LOCK_NAME,
    }
}

/// The sequence number of a contender's node name; `None` for other children.
fn sequence(name: &str) -> Option<i64> {
    let head = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let digits = &name[head.len()..];
    if digits.is_empty() || !CONTENDERS.iter().any(|p| head.ends_with(p)) {
        return None;
    }
    digits.parse().ok()
}

/// The lock nodes among `children`, in queue order (the head holds the lock).
pub(crate) fn queue(children: Vec<String>) -> Vec<(i64, String)> {
    let mut queue: Vec<(i64, String)> =
        children.into_iter().filter_map(|c| sequence(&c).map(|s| (s, c))).collect();
    queue.sort_unstable();
    queue
}

#[cfg(test)]
mod tests {
    use super::{is_reader, queue, sequence};

    #[test]
    fn curator_and_kazoo_nodes_share_one_order() {
        let ours = "_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-lock-0000000003";
        assert_eq!(sequence(ours), Some(3));
        assert_eq!(sequence("_c_1-lock-0000000012"), Some(12));
        assert_eq!(sequence("3f9ac1e0d2b84c5f8e7a6b5c4d3e2f10__lock__0000000001"), Some(1));
        assert_eq!(sequence("3f9ac1e0d2b84c5f8e7a6b5c4d3e2f10__rlock__0000000007"), Some(7));
        for foreign in ["leases", "__lock__", "lock-", "x-lock-", "a-lock-12b", "lease-0000000001"] {
            assert_eq!(sequence(foreign), None, "{foreign}");
        }
        let children = vec![
            "_c_b-lock-0000000004".to_owned(),
            "ab__lock__0000000002".to_owned(),
            "leases".to_owned(),
            "_c_a-lock-0000000003".to_owned(),
            "cd__rlock__0000000010".to_owned(),
        ];
        let order: Vec<i64> = queue(children).into_iter().map(|(s, _)| s).collect();
        assert_eq!(order, [2, 3, 4, 10]);
    }

    #[test]
    fn curator_read_write_nodes_queue_with_the_rest() {
        let reader = "_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-__READ__0000000005";
        let writer = "_c_0f2c0a57-5fd4-4d6b-9a38-3b3c4f5e6a7b-__WRIT__0000000006";
        assert_eq!((sequence(reader), sequence(writer)), (Some(5), Some(6)));
        assert!(is_reader(reader) && is_reader("ab__rlock__0000000001"));
        assert!(
            !is_reader(writer) && !is_reader("_c_1-lock-0000000012") && !is_reader("ab__lock__0000000002")
        );
    }
}
