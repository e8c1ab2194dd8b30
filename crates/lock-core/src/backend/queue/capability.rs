//! What a queue store built on this recipe can do.

use crate::backend::Capability;

/// The capabilities of a store that queues waiters in its server by sequence or revision
/// through [`acquire`](super::acquire): those of a session-bound store
/// ([`session::capabilities`](crate::backend::session::capabilities): every hold lives on the
/// client's session or lease and waits in the server's queue, the owner nests in
/// [`QueueHolds`](super::QueueHolds), the entry's creation number is the fencing token and
/// its value the note), fair, since the first entry in line holds, and `refusal_writes`, since
/// every attempt creates its entry. A store adds what it has besides (`failover_safe`).
pub fn capabilities() -> Capability {
    let mut c = crate::backend::session::capabilities();
    c.fair = true;
    c.refusal_writes = true;
    c
}
