//! The Lua scripts (files under `scripts/`), hashed once and sent with EVALSHA
//! (`redis::Script` loads them on `NOSCRIPT`).

use std::sync::LazyLock;

use redis::Script;

/// Prelude of every acquire script: the fencing counter.
const FENCE: &str = include_str!("../scripts/fence.lua");
/// Prelude of the hash-mode acquire scripts: nesting and the first hold.
const HOLD: &str = include_str!("../scripts/hold.lua");

fn with_fence(body: &str) -> Script {
    Script::new(&[FENCE, body].concat())
}

fn with_hold(body: &str) -> Script {
    Script::new(&[FENCE, HOLD, body].concat())
}

pub(crate) static ACQUIRE_SIMPLE: LazyLock<Script> =
    LazyLock::new(|| with_fence(include_str!("../scripts/acquire_simple.lua")));
pub(crate) static ACQUIRE_REENTRANT: LazyLock<Script> =
    LazyLock::new(|| with_hold(include_str!("../scripts/acquire_reentrant.lua")));
pub(crate) static ACQUIRE_FAIR: LazyLock<Script> =
    LazyLock::new(|| with_hold(include_str!("../scripts/acquire_fair.lua")));
pub(crate) static RELEASE_SIMPLE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/release_simple.lua")));
pub(crate) static RELEASE_HASH: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/release_hash.lua")));
pub(crate) static RENEW_SIMPLE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/renew_simple.lua")));
pub(crate) static RENEW_HASH: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/renew_hash.lua")));
pub(crate) static CANCEL_HASH: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/cancel_hash.lua")));
pub(crate) static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/inspect.lua")));
