//! For backend authors: the trait every store implements and the toolkit shared by backends.
//!
//! Users of the library need only the crate root ([`Locker`](crate::Locker), guards, errors).
//! A backend crate implements [`LockBackend`] with one atomic attempt, compare-and-delete,
//! compare-and-extend and inspection, and hands out the optional capabilities its store has
//! ([`Notify`], [`WaitQueue`], [`Notes`], [`RaiseFence`], [`Records`], [`Admin`]); waiting,
//! retries, deadlines, guards, the watchdog and the lost signal come from the core. The
//! toolkit below is what every backend otherwise writes again: [`Cleanup`] for cancelled
//! attempts, the poison-tolerant [`Mutex`], [`UrlOptions`], [`redact`], [`NotifyHub`],
//! [`Backoff`] and [`millis`], for session-bound stores the keeper and hold table of
//! [`session`], for stores reached through one client of a cluster the endpoints, URL and
//! settings of [`cluster`], and for stores that queue waiters by a sequence or revision the
//! recipe of [`queue`]; and the [`registry::Descriptor`] through which the facade, the command,
//! the bench and the docs know a store. `docs/ARCHITECTURE.md` has the recipe for a new backend.

use std::time::Duration;

use tokio::time::Instant;

use crate::LockError;

mod attempt;
mod backoff;
mod capability;
mod cleanup;
pub mod cluster;
mod confirmed;
mod contended;
mod info;
mod lock_backend;
mod names;
mod notify;
mod optional;
mod options;
pub mod queue;
mod records;
pub mod redact;
pub mod registry;
mod runtime;
pub mod session;
mod sync;
#[cfg(feature = "tls")]
mod tls;

#[doc(inline)]
pub use crate::forward_to;
#[doc(inline)]
pub use crate::hand_out;
pub use attempt::{AcquireRequest, Attempt, Grant, RenewItem, Side};
pub use backoff::{Backoff, jitter, retry_cleanup};
pub use capability::Capability;
pub use cleanup::{Cleanup, settle_cleanups, spawn_cleanup};
pub use confirmed::Confirmed;
pub use contended::{Contended, MIN_WAIT, may_wait};
pub use info::{LockInfo, PermitInfo};
pub use lock_backend::LockBackend;
pub use names::percent_decode;
pub(crate) use notify::{Epoch, EpochRx};
pub use notify::{NotifyHub, Subscription};
pub use optional::{Admin, MAX_NOTE_BYTES, Notes, Notify, RaiseFence, Records, WaitQueue};
pub use options::{UrlOptions, parse_duration};
pub use records::{LocalRecord, Record, RecordOp};
pub use runtime::DropInRuntime;
pub use sync::Mutex;
#[cfg(feature = "tls")]
pub use tls::ensure_tls_provider;

/// Most leases sent in one renew call (Redisson renews up to 100 keys per script call).
pub const RENEW_BATCH: usize = 100;

/// `d` in whole milliseconds, rounded up and at least 1 (for `PX`/`PEXPIRE` arguments, where 0
/// means "no expiry" or an error, and rounding down would shorten a lease).
pub fn millis(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

/// When a session-bound hold must be given up unless a later request has been answered: the
/// server ends a session `server_idle` after the last request it answered, and that request was
/// sent no earlier than `confirmed` (its send time); the core's drift margin covers the rates
/// of the two clocks.
pub fn session_give_up(confirmed: Instant, server_idle: Duration) -> Instant {
    confirmed + session_span(server_idle)
}

/// How long after a confirmed send a session of `server_idle` surely lives: the bound less the
/// drift margin.
pub(crate) fn session_span(server_idle: Duration) -> Duration {
    confirmed::span(server_idle, (crate::DRIFT_MARGIN_RATE, crate::DRIFT_MARGIN_FLOOR))
}

/// What a session-bound hold granted after a wait in the server's queue counts from: the
/// waiting request's send (`wait_sent`), or `None` when the grant must first be confirmed by a
/// request sent after it arrived (then that request's send is the anchor).
///
/// The server starts its idle clock when it sends the grant, somewhere between `wait_sent` and
/// the grant's arrival (`arrived`). The arrival is later than the server's send by the link's
/// one-way delay, which no drift margin covers: counting from it, a holder behind a slow link
/// would be told of the loss after the server freed the lock. `wait_sent` is the latest time
/// known to precede the server's clock, so it is the anchor. Answered within one keep-alive
/// period of it, the hold keeps the budget of any hold (its first ping due one period after
/// its anchor). A longer wait would leave little or nothing of the server's idle bound, so
/// the grant is handed out only once confirmed.
pub fn waited_grant_anchor(wait_sent: Instant, arrived: Instant, keepalive: Duration) -> Option<Instant> {
    (arrived < wait_sent + keepalive).then_some(wait_sent)
}

/// The error of a backend that cannot do `what` (such as inspecting a lock without taking it).
pub fn unsupported(backend: &'static str, what: &'static str) -> LockError {
    LockError::Unsupported { backend, what }
}
