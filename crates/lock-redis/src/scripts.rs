//! The Lua scripts (files under `scripts/`), hashed once and sent with EVALSHA (loaded on
//! `NOSCRIPT`; see `call.rs`).

use std::sync::LazyLock;

use crate::call::Lua as Script;
use crate::prelude::assemble;

/// Prelude of every acquire script: the fencing counter.
const FENCE: &str = include_str!("../scripts/fence.lua");
/// Prelude of the hash-mode acquire scripts: nesting and the first hold.
const HOLD: &str = include_str!("../scripts/hold.lua");
/// Prelude of the scripts that wait for or free a lock: the marks of what already ran (one
/// capped set per lock), the wait set and the hand-over, then the read-write lock's read
/// phases (which use the parts before, and the hand-over them), and the end of a wait.
const HANDOFF: &str = concat!(
    include_str!("../scripts/marks.lua"),
    include_str!("../scripts/handoff.lua"),
    include_str!("../scripts/read_phases.lua"),
    include_str!("../scripts/wait_end.lua")
);
/// Prelude of the interop modes' scripts that tell our holds from the other library's.
const OURS: &str = include_str!("../scripts/ours.lua");
/// Prelude of the holder's own steps (notes, raising the fence): who holds a lock, any layout.
const HOLDER: &str = include_str!("../scripts/holder.lua");

fn with(preludes: &[&str], body: &str) -> Script {
    Script::new(&assemble(preludes, body))
}

/// A script that publishes (the hand-over, a release), in two flavours: `PUBLISH` for one
/// server, `SPUBLISH` for a cluster, where a release's channel is a sharded channel in the
/// lock's slot (`<lock>:released`), served by the node that owns the lock, and a cluster
/// client hears it only there.
pub(crate) struct Publishing {
    plain: Script,
    sharded: Script,
}

impl Publishing {
    /// The flavour for a cluster (`sharded`) or one server.
    pub(crate) fn get(&self, sharded: bool) -> &Script {
        if sharded { &self.sharded } else { &self.plain }
    }
}

fn publishing(preludes: &[&str], body: &str) -> Publishing {
    let src = assemble(preludes, body);
    let sharded = src.replace("redis.call('PUBLISH', ", "redis.call('SPUBLISH', ");
    Publishing { plain: Script::new(&src), sharded: Script::new(&sharded) }
}

pub(crate) static ACQUIRE_SIMPLE: LazyLock<Publishing> =
    LazyLock::new(|| publishing(&[FENCE, HANDOFF], include_str!("../scripts/acquire_simple.lua")));
pub(crate) static ACQUIRE_REENTRANT: LazyLock<Publishing> =
    LazyLock::new(|| publishing(&[FENCE, HANDOFF, HOLD], include_str!("../scripts/acquire_reentrant.lua")));
pub(crate) static ACQUIRE_FAIR: LazyLock<Publishing> =
    LazyLock::new(|| publishing(&[FENCE, HANDOFF, HOLD], include_str!("../scripts/acquire_fair.lua")));
pub(crate) static ACQUIRE_PLAIN: LazyLock<Script> =
    LazyLock::new(|| with(&[FENCE], include_str!("../scripts/acquire_plain.lua")));
pub(crate) static RELEASE_PLAIN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/release_plain.lua")));
pub(crate) static RELEASE_SIMPLE: LazyLock<Publishing> =
    LazyLock::new(|| publishing(&[FENCE, HANDOFF], include_str!("../scripts/release_simple.lua")));
pub(crate) static RELEASE_HASH: LazyLock<Publishing> =
    LazyLock::new(|| publishing(&[FENCE, HANDOFF], include_str!("../scripts/release_hash.lua")));
pub(crate) static RENEW_SIMPLE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/renew_simple.lua")));
pub(crate) static RENEW_HASH: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/renew_hash.lua")));
pub(crate) static CANCEL_SIMPLE: LazyLock<Publishing> =
    LazyLock::new(|| publishing(&[FENCE, HANDOFF], include_str!("../scripts/cancel_simple.lua")));
pub(crate) static CANCEL_HASH: LazyLock<Publishing> =
    LazyLock::new(|| publishing(&[FENCE, HANDOFF], include_str!("../scripts/cancel_hash.lua")));
pub(crate) static RECORD: LazyLock<Publishing> =
    LazyLock::new(|| publishing(&[], include_str!("../scripts/record.lua")));
pub(crate) static SET_NOTE: LazyLock<Script> =
    LazyLock::new(|| with(&[FENCE, HANDOFF, HOLDER], include_str!("../scripts/set_note.lua")));
pub(crate) static EVICT: LazyLock<Publishing> =
    LazyLock::new(|| publishing(&[FENCE, HANDOFF], include_str!("../scripts/evict.lua")));
pub(crate) static EVICT_PLAIN: LazyLock<Script> =
    LazyLock::new(|| with(&[OURS], include_str!("../scripts/evict_plain.lua")));
pub(crate) static RAISE_FENCE: LazyLock<Script> =
    LazyLock::new(|| with(&[FENCE, HOLDER], include_str!("../scripts/raise_fence.lua")));
pub(crate) static ACQUIRE_SHARED: LazyLock<Script> =
    LazyLock::new(|| with(&[FENCE, HANDOFF], include_str!("../scripts/acquire_shared.lua")));
pub(crate) static RELEASE_SHARED: LazyLock<Publishing> =
    LazyLock::new(|| publishing(&[FENCE, HANDOFF], include_str!("../scripts/release_shared.lua")));
pub(crate) static RENEW_SHARED: LazyLock<Script> =
    LazyLock::new(|| with(&[FENCE, HANDOFF], include_str!("../scripts/renew_shared.lua")));
pub(crate) static INSPECT_SHARED: LazyLock<Script> =
    LazyLock::new(|| with(&[FENCE, HANDOFF], include_str!("../scripts/inspect_shared.lua")));
pub(crate) static INSPECT: LazyLock<Script> =
    LazyLock::new(|| with(&[OURS], include_str!("../scripts/inspect.lua")));

#[cfg(test)]
mod tests {
    use super::*;

    /// Every publishing script has PUBLISH calls, and its cluster flavour has none left (a
    /// PUBLISH on a cluster would go to every node and no SSUBSCRIBE would hear it).
    #[test]
    fn the_cluster_flavour_publishes_sharded_only() {
        for p in [
            &*ACQUIRE_SIMPLE,
            &*ACQUIRE_REENTRANT,
            &*ACQUIRE_FAIR,
            &*RELEASE_SIMPLE,
            &*RELEASE_HASH,
            &*RELEASE_SHARED,
            &*CANCEL_SIMPLE,
            &*CANCEL_HASH,
        ] {
            let (plain, sharded) = (p.get(false), p.get(true));
            assert!(!sharded.source().contains("'PUBLISH'"), "a PUBLISH call the cluster flavour misses");
            // A script whose assembled text publishes nothing has one flavour.
            let publishes = plain.source().contains("redis.call('PUBLISH', ");
            assert_eq!(publishes, plain.get_hash() != sharded.get_hash());
        }
        assert!(RELEASE_SIMPLE.get(false).source().contains("redis.call('PUBLISH', "));
    }

    /// The scripts the crate sends leave out what they do not call: the simple mode's acquire
    /// creates none of the read phases' or the permits' closures.
    #[test]
    fn a_script_leaves_out_what_it_does_not_call() {
        let sent = ACQUIRE_SIMPLE.get(false).source();
        assert!(sent.contains("local function next_fence(") && sent.contains("local function register("));
        assert!(
            !sent.contains("local function hand_permit(") && !sent.contains("local function claim_read(")
        );
    }

    /// Every prelude the crate has parses as definitions only: none is sent whole.
    #[test]
    fn the_crates_preludes_are_definitions_only() {
        let preludes =
            [("FENCE", FENCE), ("HOLD", HOLD), ("HANDOFF", HANDOFF), ("OURS", OURS), ("HOLDER", HOLDER)];
        for (name, prelude) in preludes {
            assert!(
                crate::prelude::definitions_only(prelude),
                "{name} has a top-level line that defines nothing"
            );
        }
    }
}
