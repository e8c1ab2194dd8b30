//! Release notifications: one KV watch per client, of every lock key (`l.>`), started by the
//! client's first waiter and shared by all its keys; a delete marker wakes one waiter of its
//! key through the [`NotifyHub`].
//!
//! Not one watch per waiter: each watch is a JetStream consumer on the server, and creating
//! one costs a round trip and server state. The price of one watch for all keys is that it
//! also carries every grant and renewal of the bucket to this client once it has waited.
//! An expiry by max age makes no event on a 2.9 server: a waiter also wakes at the end of the
//! holder's lease (`Attempt::Held { retry_after }`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::kv::{Operation, Store};
use futures_util::StreamExt;
use lock_core::backend::{Backoff, NotifyHub, Subscription};
use lock_core::{LockError, Result};
use tokio::sync::{Mutex as AsyncMutex, oneshot};
use tokio::task::JoinHandle;

use crate::error::{self, bounded};
use crate::keys::lock_of;
use crate::markers::Markers;

/// The client's watch and the waiters it wakes.
#[derive(Debug)]
pub(crate) struct Notifier {
    hub: NotifyHub,
    /// The watch task, once a waiter started it; aborted with the client.
    task: AsyncMutex<Option<JoinHandle<()>>>,
    /// Whether the watch is live on the server now (a release from now on is heard).
    live: Arc<AtomicBool>,
    /// Delete markers seen (a test hook's figure).
    pub events: Arc<AtomicU64>,
    /// Where the watch notes the delete markers it delivers.
    markers: Arc<Markers>,
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().take() {
            task.abort();
        }
    }
}

impl Notifier {
    pub fn new(markers: Arc<Markers>) -> Notifier {
        Notifier {
            hub: NotifyHub::new(),
            task: AsyncMutex::new(None),
            live: Arc::default(),
            events: Arc::default(),
            markers,
        }
    }

    /// Register a waiter on `key`, starting the watch first if it is not running: the
    /// subscription is returned only once the watch is live, so a release after it is heard.
    ///
    /// # Errors
    /// Temporary when the watch cannot be created in `timeout`.
    pub async fn subscribe(&self, kv: &Store, key: &str, timeout: Duration) -> Result<Subscription> {
        let (sub, _) = self.hub.subscribe(key);
        let mut task = self.task.lock().await;
        if task.as_ref().is_none_or(JoinHandle::is_finished) {
            let (ready_tx, ready_rx) = oneshot::channel();
            let watch = Watch {
                kv: kv.clone(),
                hub: self.hub.clone(),
                live: self.live.clone(),
                events: self.events.clone(),
                markers: self.markers.clone(),
            };
            *task = Some(tokio::spawn(watch.run(ready_tx)));
            let ready =
                async { ready_rx.await.unwrap_or_else(|_| Err(error::temporary("nats watch ended"))) };
            if let Err(e) = bounded(timeout, ready).await {
                if let Some(t) = task.take() {
                    t.abort();
                }
                return Err(e);
            }
        }
        Ok(sub)
    }

    /// Whether the watch is live: every release of every key is heard from now on.
    pub fn listening(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }
}

struct Watch {
    kv: Store,
    hub: NotifyHub,
    live: Arc<AtomicBool>,
    events: Arc<AtomicU64>,
    markers: Arc<Markers>,
}

impl Watch {
    /// Watch `l.>` until aborted; after a failure, wake every waiter (a release may have been
    /// missed while the watch was down) and watch again, with backoff.
    async fn run(self, ready: oneshot::Sender<Result<(), LockError>>) {
        let mut ready = Some(ready);
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
        loop {
            match self.kv.watch("l.>").await {
                Ok(mut entries) => {
                    self.live.store(true, Ordering::Release);
                    if let Some(r) = ready.take() {
                        let _ = r.send(Ok(()));
                    }
                    while let Some(entry) = entries.next().await {
                        let Ok(entry) = entry else { break };
                        if matches!(entry.operation, Operation::Delete | Operation::Purge)
                            && let Some(key) = lock_of(&entry.key)
                        {
                            self.events.fetch_add(1, Ordering::Relaxed);
                            self.markers.put(&entry.key, entry.revision);
                            self.hub.notify_one(&key);
                        }
                    }
                    tracing::debug!("nats lock watch ended; watching again");
                }
                Err(e) => {
                    tracing::debug!(error = %e, "nats lock watch could not start");
                    if let Some(r) = ready.take() {
                        let _ = r.send(Err(error::driver(e, true)));
                        return;
                    }
                }
            }
            self.live.store(false, Ordering::Release);
            self.hub.notify_all();
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }
}
