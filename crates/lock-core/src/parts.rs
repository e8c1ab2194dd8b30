//! The parts of a composite hold (a write lock's gate and slots, several permits, an
//! upgradeable read): every part is released whatever the others answer, and the loss of any
//! part is the loss of the hold.

use std::future::Future;

use futures_util::future::{join_all, select_all};
use tokio_util::sync::CancellationToken;

use crate::Result;

/// Run every release at once; the first error, after all of them ran.
pub(crate) async fn release_all<F: Future<Output = Result<()>>>(
    releases: impl IntoIterator<Item = F>,
) -> Result<()> {
    join_all(releases).await.into_iter().collect::<Result<Vec<()>>>().map(drop)
}

/// Run a release of parts nobody will hold (an acquisition that failed midway), logging (not
/// returning) a failure: the parts' leases free what it missed.
pub(crate) async fn release_quietly(what: &str, release: impl Future<Output = Result<()>>) {
    if let Err(e) = release.await {
        tracing::debug!(error = %e, "releasing part of {what} failed; its lease frees it");
    }
}

/// Resolves when any of the parts' lost tokens is cancelled (never, for no parts).
pub(crate) async fn any_lost(tokens: Vec<CancellationToken>) {
    if tokens.is_empty() {
        return std::future::pending().await;
    }
    select_all(tokens.into_iter().map(|t| Box::pin(t.cancelled_owned()))).await;
}

/// Gather a hold of several parts with `gather` until none of them is lost when it is handed
/// out: a part can run out (a fixed lease shorter than the wait for the others, a session
/// ended) while the others are awaited, and its key may be someone else's by then. Such a
/// gathering is given back (`give_back`) and gathered again, within the deadline `gather`
/// keeps; a single try (`once`) answers `None` instead.
pub(crate) async fn until_live<T, G, B>(
    once: bool,
    mut gather: impl FnMut() -> G,
    lost: impl Fn(&T) -> bool,
    give_back: impl Fn(T) -> B,
) -> Result<Option<T>>
where
    G: Future<Output = Result<Option<T>>>,
    B: Future<Output = ()>,
{
    loop {
        let Some(held) = gather().await? else { return Ok(None) };
        if !lost(&held) {
            return Ok(Some(held));
        }
        give_back(held).await;
        if once {
            return Ok(None);
        }
    }
}
