//! For session-bound stores, where a hold lives exactly as long as one server session on a
//! connection taken out of the pool for the hold's life (MySQL's row locks and `GET_LOCK`,
//! PostgreSQL's advisory locks): what every such backend needs, written once so that a fix to
//! it is made once.
//!
//! - [`Sessions`]: the hold table (nesting of one owner without a round trip, every guard's
//!   lost signal), renewal as a ping, notes through the keeper, and release.
//! - The keeper, a task per hold: bounded pings, `Uncertain` at the first unanswered period,
//!   `Lost` at the last confirmed request's *send* plus the server's idle bound less the drift
//!   margin ([`Link`] bounds every request on a holding connection by that rule).
//! - [`Granted`]: what a grant counts from, a waited one included
//!   ([`waited_grant_anchor`](super::waited_grant_anchor)).
//! - [`capabilities`]: what such a store can do.
//! - [`Trips`]: round trips, counted for tests.
//! - [`Pinned`]: the holding connection, closed unless its hold ended cleanly; [`Warm`]: clean
//!   ones kept for the next hold.
//! - Bounds: [`answered_by`] (every request answered by an instant), [`server_idle`] (the
//!   server's idle bound for a keep-alive period), [`cancellable_wait`] (a wait in the server's
//!   queue cancelled from elsewhere when its caller gives up).
//! - Building a pooled store: [`Source`], the defaults, [`connect_first`], [`endpoint`];
//!   [`PoolSettings`] and [`pool_builder!`], its builder's pool and hold settings and their
//!   setters; [`DriverSettings`] and [`refuse_tls_without_feature`], its URL's driver options.
//!
//! The backend supplies only its driver calls through [`SessionDriver`]: a ping, the end of a
//! hold, and storing a note.

mod bound;
mod capability;
mod driver;
mod grant;
mod holds;
mod keeper;
mod link;
#[cfg(test)]
mod model;
mod pinned;
mod pool;
mod setup;
mod table;
mod trips;
mod url;
mod warm;

#[cfg(test)]
mod tests;

pub use crate::pool_builder;
pub use bound::{MIN_SERVER_IDLE, Waited, answered_by, cancellable_wait, no_answer, server_idle};
pub use capability::{capabilities, capabilities_with};
pub use driver::{Ending, Noted, SessionDriver};
pub use grant::Granted;
pub use holds::Sessions;
pub use link::Link;
pub use pinned::Pinned;
pub use pool::PoolSettings;
pub use setup::{
    DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_KEEPALIVE, DEFAULT_MAX_CONNECTIONS, MIN_KEEPALIVE, Source,
    connect_first, endpoint, no_source,
};
pub use trips::Trips;
pub use url::{DriverSettings, refuse_tls_without_feature};
pub use warm::{Kept, WARM_MAX, Warm};
