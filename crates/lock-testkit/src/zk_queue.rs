//! ZooKeeper lock directories as an operator sees them: a queue of sequential nodes, named
//! `<prefix>-lock-<sequence>` by this library and by Curator.

/// The node at the head of a lock directory's queue (the holder's) among its `children`: the
/// `-lock-` node with the lowest sequence number, or `None` when there is none.
pub fn head(children: &[String]) -> Option<&str> {
    children
        .iter()
        .filter_map(|c| Some((c.rsplit_once("-lock-")?.1.parse::<u64>().ok()?, c.as_str())))
        .min()
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_lowest_sequence_heads_the_queue() {
        let children: Vec<String> =
            ["b-lock-0000000012", "other", "a-lock-0000000010", "c-lock-x"].map(str::to_owned).into();
        assert_eq!(super::head(&children), Some("a-lock-0000000010"));
        assert_eq!(super::head(&children[1..2]), None);
    }
}
