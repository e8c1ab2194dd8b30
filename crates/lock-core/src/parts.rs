//! Releasing the parts of a composite hold (a write lock's gate and slots, several permits):
//! every part is released whatever the others answer.

use std::future::Future;

use futures_util::future::join_all;

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
