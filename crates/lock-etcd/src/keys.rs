//! The key layout of a lock's queue (where each side's keys go, what each waits for) and the
//! operations of an attempt's transaction: split from `recipe.rs`, which sends them.

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use lock_core::backend::Side;

/// The key ranges of a transaction's answer, in the order of its operations.
pub(crate) fn ranges(resp: &TxnResponse) -> Vec<Vec<KeyValue>> {
    resp.op_responses()
        .into_iter()
        .map(|r| match r {
            TxnOpResponse::Get(mut g) => g.take_kvs(),
            _ => Vec::new(),
        })
        .collect()
}

/// Where an attempt of `side` puts its key under the lock's prefix `dir`: a read-write lock's
/// readers under `<dir>read/` and writers under `<dir>write/` (the layout of etcd's own
/// `recipes.RWMutex`), a mutex's attempts right under `dir` (`<lease>_<n>`, hex: never `read/`
/// or `write/`). One create revision orders them all: a writer or a mutex waits for every key
/// created before its own, a reader only for the writers' ones.
pub(crate) fn side_dir(dir: &str, side: Side) -> String {
    match side {
        Side::Read => format!("{dir}read/"),
        Side::Write => format!("{dir}write/"),
        _ => dir.to_owned(),
    }
}

/// The prefix whose keys an attempt of `side` under `dir` waits for: a reader only the writers'.
pub(crate) fn waits_for(dir: &str, side: Side) -> String {
    if side.is_shared() { side_dir(dir, Side::Write) } else { dir.to_owned() }
}

/// Whether a key under the lock's prefix `dir` is a reader's.
pub(crate) fn is_reader(dir: &str, key: &[u8]) -> bool {
    key.strip_prefix(dir.as_bytes()).is_some_and(|rest| rest.starts_with(b"read/"))
}

/// The first key (lowest create revision) under a lock's prefix: its holder.
pub(crate) fn first_created(dir: &str) -> TxnOp {
    let opts = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
    TxnOp::get(dir, Some(opts.with_limit(1).with_keys_only()))
}

/// Keys ahead of a new attempt that the put's transaction reads, at most: with all of them
/// known, a waiter learns it is first from the deletes its client's watch sees, without a read
/// after its predecessor goes. A longer queue is followed key by key, with a read per step.
pub(crate) const AHEAD_MAX: usize = 32;

/// The last keys (highest create revisions first) under a lock's prefix: the end of its queue,
/// [`AHEAD_MAX`] and one more, so that a longer queue shows as one.
pub(crate) fn last_created(dir: &str) -> TxnOp {
    let opts = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Descend);
    TxnOp::get(dir, Some(opts.with_limit(AHEAD_MAX as i64 + 1).with_keys_only()))
}

/// An attempt's put of `name` under `lease`, between its reads: what it will wait for, read
/// before the put (for a reader the first writer's key, else the last key of all), and the
/// holder, read after.
pub(crate) fn queue_ops(dir: &str, side: Side, name: &str, lease: i64) -> [TxnOp; 3] {
    [
        if side.is_shared() { first_created(&waits_for(dir, side)) } else { last_created(dir) },
        TxnOp::put(name, "", Some(PutOptions::new().with_lease(lease))),
        first_created(dir),
    ]
}

/// The operations of an attempt's transaction, and whether they may queue the key on the
/// waiting lease (`session::waiting`). With a waiting lease the server picks the lease in the
/// same transaction (nested: etcd 3.3 and later), so a free lock still costs one round trip:
/// with nothing ahead the key holds at once, under the session lease; else it waits, under the
/// waiting lease. etcd compares every key of a range and an empty range as one zero key, so
/// `create_revision == 0` over the prefix holds exactly when it is empty.
pub(crate) fn attempt_ops(
    dir: &str,
    side: Side,
    name: &str,
    session: i64,
    waiting: Option<i64>,
) -> Vec<TxnOp> {
    match waiting {
        Some(waiting) => {
            let nothing_ahead =
                Compare::create_revision(waits_for(dir, side), CompareOp::Equal, 0).with_prefix();
            vec![TxnOp::txn(
                Txn::new()
                    .when([nothing_ahead])
                    .and_then(queue_ops(dir, side, name, session))
                    .or_else(queue_ops(dir, side, name, waiting)),
            )]
        }
        None => queue_ops(dir, side, name, session).to_vec(),
    }
}
