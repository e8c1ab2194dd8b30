//! What the facade, the `dlock` command, the bench and the docs know about one store.
//!
//! Each backend crate exports one [`Descriptor`]; the facade registers it with one line, and
//! from then on `from_url`, the command's `--url` help and scheme list, the bench's default
//! targets and the README's backend table come from the registered list. Nothing outside the
//! crate names the store again, so a new store cannot be half wired.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::Result;
use crate::backend::LockBackend;

/// A connected backend, as every caller that picks the store at run time holds it.
pub type Connected = Arc<dyn LockBackend>;

/// Connecting to a URL of one of the store's schemes.
pub type Connect = for<'a> fn(&'a str) -> Pin<Box<dyn Future<Output = Result<Connected>> + Send + 'a>>;

/// One store, as the rest of the project sees it.
#[derive(Clone, Copy)]
pub struct Descriptor {
    /// Short name, the same as the facade's cargo feature: `"file"`.
    pub name: &'static str,
    /// The URL schemes it answers, lowercase: `&["file"]`.
    pub schemes: &'static [&'static str],
    /// The URL forms with their options, as help and the backend table show them.
    pub urls: &'static str,
    /// What the store is, in one line.
    pub summary: &'static str,
    /// Connect to a URL of one of [`schemes`](Self::schemes).
    pub connect: Connect,
    /// The modes a URL selects with `?mode=`, each a separate target of the bench; empty for
    /// a store with one.
    pub modes: &'static [&'static str],
    /// A store this process can make without a server (a temporary directory, an in-process
    /// table), which the bench and smoke checks use; `None` for a store behind a server.
    pub local: Option<fn() -> std::io::Result<Local>>,
    /// At most this many locks in the bench's watchdog scenario, where a hold is costly (a
    /// pinned connection, a durable write); `None`: as the scenario decides.
    pub watchdog_locks: Option<usize>,
    /// Where a hold's lease is the client session's rather than each lock's (ZooKeeper's
    /// session timeout, etcd's session lease): the URL option that sets it, so that a caller
    /// choosing a lease (`dlock run --lease`) chooses how soon a dead holder's locks free.
    pub session_lease: Option<SessionLease>,
}

/// The URL option that sets a store's session lease, and the server's lower bound on it.
#[derive(Debug, Clone, Copy)]
pub struct SessionLease {
    /// The query option: `"session_timeout"`.
    pub option: &'static str,
    /// What the server does with a shorter one, in words for help text.
    pub floor: &'static str,
}

impl SessionLease {
    /// `url` with the session lease set to `lease`, unless the URL sets it already (its own
    /// option wins: it is the more specific of the two).
    pub fn apply(&self, url: &str, lease: std::time::Duration) -> String {
        let query = url.split_once('?').map_or("", |(_, q)| q);
        let given = query.split('&').any(|kv| {
            let name = kv.split_once('=').map_or(kv, |(k, _)| k);
            name == self.option || name.strip_prefix(self.option).is_some_and(|rest| rest == "_ms")
        });
        if given {
            return url.to_owned();
        }
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}{}={}ms", self.option, lease.as_millis())
    }
}

impl Descriptor {
    /// Whether `scheme` (any case) is one of this store's.
    pub fn answers(&self, scheme: &str) -> bool {
        self.schemes.iter().any(|s| s.eq_ignore_ascii_case(scheme))
    }

    /// The row of the README's backend table: schemes and options, what it is, the feature.
    pub fn table_row(&self) -> String {
        format!("| {} | {} | `{}` |", self.urls, self.summary, self.name)
    }
}

impl fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Descriptor")
            .field("name", &self.name)
            .field("schemes", &self.schemes)
            .finish_non_exhaustive()
    }
}

/// A store made for this process: its URL, and what keeps it alive (dropping it removes it).
pub struct Local {
    /// The URL every client of the store connects with.
    pub url: String,
    /// Owned until the store is no longer used: a temporary directory, a table.
    pub keep: Box<dyn Any + Send>,
}

impl fmt::Debug for Local {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Local").field("url", &self.url).finish_non_exhaustive()
    }
}

/// The header of the README's backend table, whose rows are [`Descriptor::table_row`].
pub const TABLE_HEADER: &str = "| URL | store | feature |\n|---|---|---|";

/// The backend table of `stores`, as the README carries it.
pub fn table(stores: &[&Descriptor]) -> String {
    let rows: Vec<String> = stores.iter().map(|d| d.table_row()).collect();
    format!("{TABLE_HEADER}\n{}\n", rows.join("\n"))
}
