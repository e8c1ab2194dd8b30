//! What a session-bound store built on this toolkit can do.

use crate::backend::Capability;

/// The capabilities of a session-bound store that waits in its server's own queue and keeps
/// its holds in [`Sessions`](super::Sessions): renewal is a ping, a second acquisition by the
/// owner nests in the hold table, the lease is the session, and the store draws fencing tokens
/// from a counter of its own. A store adds what it has besides (`fair`, `failover_safe`), and
/// hands out its notes, which go through the keeper ([`Sessions::set_note`](super::Sessions::set_note)).
pub fn capabilities() -> Capability {
    let mut c = Capability::NONE;
    c.renew = true;
    c.fencing = true;
    c.reentrant = true;
    c.native_wait = true;
    c.session_bound = true;
    c
}

/// [`capabilities`] with shared holds if `shared`, and fencing tokens only if `fenced` (a store
/// may be built without them).
pub fn capabilities_with(shared: bool, fenced: bool) -> Capability {
    let mut c = capabilities();
    c.shared = shared;
    c.fencing = fenced;
    c
}
