//! ZooKeeper lock directories as an operator sees them: a queue of sequential nodes, named
//! `<prefix>-lock-<sequence>` by this library and by Curator, and `<prefix>-__READ__<sequence>`
//! and `<prefix>-__WRIT__<sequence>` for the sides of a read-write lock; a semaphore's
//! directory holds `locks/` (its gate) and `leases/` (`<prefix>-lease-<sequence>`, a permit
//! each), as Curator's `InterProcessSemaphoreV2` keeps them.

/// What precedes the sequence in the name of a lock node or a lease.
const NAMES: [&str; 4] = ["-lock-", "-__READ__", "-__WRIT__", "-lease-"];

/// The child of a semaphore's directory holding its leases.
pub const LEASES: &str = "leases";

/// The node at the head of a lock directory's queue (a holder's) among its `children`: the
/// lock node with the lowest sequence number, or `None` when there is none. Among a semaphore's
/// leases, the oldest permit's.
pub fn head(children: &[String]) -> Option<&str> {
    let sequence =
        |c: &str| NAMES.iter().find_map(|n| c.rsplit_once(n)).and_then(|(_, seq)| seq.parse::<u64>().ok());
    children.iter().filter_map(|c| Some((sequence(c)?, c.as_str()))).min().map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_lowest_sequence_heads_the_queue() {
        let children: Vec<String> =
            ["b-lock-0000000012", "other", "a-lock-0000000010", "c-lock-x"].map(str::to_owned).into();
        assert_eq!(super::head(&children), Some("a-lock-0000000010"));
        assert_eq!(super::head(&children[1..2]), None);
        let rw: Vec<String> =
            ["_c_b-__WRIT__0000000003", "_c_a-__READ__0000000002"].map(str::to_owned).into();
        assert_eq!(super::head(&rw), Some("_c_a-__READ__0000000002"));
        let leases: Vec<String> =
            ["_c_b-s1-lease-0000000007", "_c_a-s0-lease-0000000005"].map(str::to_owned).into();
        assert_eq!(super::head(&leases), Some("_c_a-s0-lease-0000000005"));
    }
}
