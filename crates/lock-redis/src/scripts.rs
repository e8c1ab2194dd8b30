//! The Lua scripts (files under `scripts/`), hashed once and sent with EVALSHA
//! (`redis::Script` loads them on `NOSCRIPT`).

use std::sync::LazyLock;

use redis::Script;

/// Prelude of every acquire script: the fencing counter.
const FENCE: &str = include_str!("../scripts/fence.lua");
/// Prelude of the hash-mode acquire scripts: nesting and the first hold.
const HOLD: &str = include_str!("../scripts/hold.lua");
/// Prelude of the scripts that wait for or free a lock: the wait set and the hand-over.
const HANDOFF: &str = include_str!("../scripts/handoff.lua");
/// Prelude of the holder's own steps (notes, raising the fence): who holds a lock, any layout.
const HOLDER: &str = include_str!("../scripts/holder.lua");

fn with(preludes: &[&str], body: &str) -> Script {
    let mut src = preludes.concat();
    src.push_str(body);
    Script::new(&src)
}

pub(crate) static ACQUIRE_SIMPLE: LazyLock<Script> =
    LazyLock::new(|| with(&[FENCE, HANDOFF], include_str!("../scripts/acquire_simple.lua")));
pub(crate) static ACQUIRE_REENTRANT: LazyLock<Script> =
    LazyLock::new(|| with(&[FENCE, HOLD, HANDOFF], include_str!("../scripts/acquire_reentrant.lua")));
pub(crate) static ACQUIRE_FAIR: LazyLock<Script> =
    LazyLock::new(|| with(&[FENCE, HOLD, HANDOFF], include_str!("../scripts/acquire_fair.lua")));
pub(crate) static ACQUIRE_PLAIN: LazyLock<Script> =
    LazyLock::new(|| with(&[FENCE], include_str!("../scripts/acquire_plain.lua")));
pub(crate) static RELEASE_PLAIN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/release_plain.lua")));
pub(crate) static RELEASE_SIMPLE: LazyLock<Script> =
    LazyLock::new(|| with(&[HANDOFF], include_str!("../scripts/release_simple.lua")));
pub(crate) static RELEASE_HASH: LazyLock<Script> =
    LazyLock::new(|| with(&[HANDOFF], include_str!("../scripts/release_hash.lua")));
pub(crate) static RENEW_SIMPLE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/renew_simple.lua")));
pub(crate) static RENEW_HASH: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/renew_hash.lua")));
pub(crate) static CANCEL_SIMPLE: LazyLock<Script> =
    LazyLock::new(|| with(&[HANDOFF], include_str!("../scripts/cancel_simple.lua")));
pub(crate) static CANCEL_HASH: LazyLock<Script> =
    LazyLock::new(|| with(&[HANDOFF], include_str!("../scripts/cancel_hash.lua")));
pub(crate) static SET_NOTE: LazyLock<Script> =
    LazyLock::new(|| with(&[HOLDER], include_str!("../scripts/set_note.lua")));
pub(crate) static RAISE_FENCE: LazyLock<Script> =
    LazyLock::new(|| with(&[FENCE, HOLDER], include_str!("../scripts/raise_fence.lua")));
pub(crate) static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/inspect.lua")));
