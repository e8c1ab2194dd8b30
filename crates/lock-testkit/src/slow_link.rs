//! A session-bound hold granted after a wait, over a slow link: the holder must not hold a lock
//! the server has already freed. The server starts its idle clock when it sends the grant; a
//! client that counted from the grant's arrival would outlive its session by the link's delay.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::Mutex;
use lock_core::{LockGuard, Locker, Result};
use tokio::time::Instant;

use crate::poll::{eventually, within};
use crate::proxy::Proxy;

/// How late the grant reaches the slow client: far over any drift margin, well under the
/// server's idle bound.
pub const TO_CLIENT: Duration = Duration::from_millis(600);
/// How late anything the slow client sends after its grant reaches the server: past the
/// server's idle bound, so its session ends however the client counts.
pub const TO_SERVER: Duration = Duration::from_secs(10);
/// How long the observer waits in the server's queue.
const WAIT: Duration = Duration::from_secs(10);

/// `first` (direct) holds `key`; `slow`, connected through `proxy`, then `observer` (direct)
/// wait for it in the server's queue (`queued()` counts the waiting sessions). The link turns
/// slow ([`TO_CLIENT`] towards `slow`, [`TO_SERVER`] away from it) and `first` releases: the
/// server grants `slow`, and ends its session `server_idle` after sending the grant, since
/// nothing `slow` sends arrives in time; `observer` gets the key then. At that moment `slow`
/// must hold no guard, or only a lost one; and `slow`'s acquisition ends without a live hold.
pub async fn waited_grant_over_a_slow_link<F, Fut>(
    first: &Locker,
    slow: &Locker,
    observer: &Locker,
    proxy: &Proxy,
    key: &str,
    queued: F,
    server_idle: Duration,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = usize>,
{
    let g = first.try_lock(key).await.expect("try").expect("free");
    let got: Arc<Mutex<Option<Result<LockGuard>>>> = Arc::default();
    let (s, k, slot) = (slow.clone(), key.to_owned(), got.clone());
    // Past its grant, the slow client may retry until its deadline (a lost connection is a
    // temporary error), through a link that answers nothing now: keep the deadline short.
    let slow_wait = server_idle + Duration::from_secs(1);
    let slow_task = tokio::spawn(async move {
        let r = s.lock(&k).wait(slow_wait).acquire().await;
        *slot.lock() = Some(r);
    });
    eventually(Duration::from_secs(5), "the slow client waits in the server's queue", || {
        let n = queued();
        async move { n.await == 1 }
    })
    .await;
    let (o, k) = (observer.clone(), key.to_owned());
    let observer_task = tokio::spawn(async move {
        let r = o.lock(&k).wait(WAIT).acquire().await;
        (Instant::now(), r)
    });
    eventually(Duration::from_secs(5), "the observer waits behind it", || {
        let n = queued();
        async move { n.await == 2 }
    })
    .await;

    proxy.delay(TO_SERVER, TO_CLIENT);
    let released_at = Instant::now();
    g.release().await.expect("release");
    let limit = server_idle + Duration::from_secs(3);
    let (granted_at, observed) = within(limit, "the observer's grant", observer_task).await.expect("join");
    let observed = observed.expect("the observer gets the key when the slow client's session ends");
    if let Some(Ok(held)) = &*got.lock() {
        assert!(
            held.is_lost(),
            "the slow client still held the lock ({:?}) when another client got it, {:?} after the release",
            held.state(),
            granted_at - released_at,
        );
    }
    // The slow client was granted first: the observer's grant waited for its session to end.
    let after = granted_at - released_at;
    assert!(after >= server_idle / 2, "the observer got the key {after:?} after the release");
    observed.release().await.expect("release");

    within(limit, "the slow client's acquisition ends", slow_task).await.expect("join");
    // An error is fine: the connection it was granted on is gone.
    if let Ok(held) = got.lock().take().expect("answered") {
        assert!(held.is_lost(), "the slow client holds a freed lock: {:?}", held.state());
    }
}

/// A proxy in front of the server of `url` (`scheme://[user[:password]@]host:port/...`), and
/// `url` through it.
///
/// # Panics
/// When `url` names no reachable `host:port`.
pub async fn proxied(url: &str) -> (Proxy, String) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let host_port = rest.split(['/', '?']).next().unwrap_or(rest);
    let target = tokio::net::lookup_host(host_port)
        .await
        .ok()
        .and_then(|mut a| a.next())
        .unwrap_or_else(|| panic!("no address for {host_port:?}"));
    let proxy = Proxy::start(target).await.expect("proxy");
    let via = url.replacen(host_port, &proxy.addr().to_string(), 1);
    (proxy, via)
}
