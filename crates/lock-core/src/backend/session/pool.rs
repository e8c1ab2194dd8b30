//! The settings a pooled session store's builder keeps for its pool and its holds: one value,
//! so that the defaults, the bounds and which setting wins are decided once for every store.

use std::future::Future;
use std::time::Duration;

use super::setup::{
    DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_KEEPALIVE, DEFAULT_MAX_CONNECTIONS, MIN_KEEPALIVE, connect_first,
};
use crate::LockError;

/// Pool size, acquire timeout, keep-alive period and schema creation as a builder was told
/// them; its public setters delegate here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolSettings {
    max_connections: u32,
    acquire_timeout: Duration,
    keepalive: Option<Duration>,
    create_schema: bool,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            keepalive: None,
            create_schema: true,
        }
    }
}

impl PoolSettings {
    /// Size of the pool the builder opens, at least 2: a held lock pins one connection, and
    /// acquiring it needs another.
    pub fn set_max_connections(&mut self, n: u32) {
        self.max_connections = n.max(2);
    }

    /// How long to wait for a pooled connection.
    pub fn set_acquire_timeout(&mut self, timeout: Duration) {
        self.acquire_timeout = timeout;
    }

    /// Keep-alive period of a held lock's connection, at least [`MIN_KEEPALIVE`]. It wins over
    /// one from the URL ([`keepalive`](Self::keepalive)).
    pub fn set_keepalive(&mut self, every: Duration) {
        self.keepalive = Some(every.max(MIN_KEEPALIVE));
    }

    /// Whether `build` creates the schema.
    pub fn set_create_schema(&mut self, create: bool) {
        self.create_schema = create;
    }

    /// Size of the pool the builder opens.
    pub fn max_connections(&self) -> u32 {
        self.max_connections
    }

    /// How long to wait for a pooled connection (and for the first one, [`connect_first`](Self::connect_first)).
    pub fn acquire_timeout(&self) -> Duration {
        self.acquire_timeout
    }

    /// The keep-alive period set on the builder, if any.
    pub fn keepalive_set(&self) -> Option<Duration> {
        self.keepalive
    }

    /// The keep-alive period in force: the one set on the builder, else `from_url` (bounded
    /// below as a set one is), else [`DEFAULT_KEEPALIVE`].
    pub fn keepalive(&self, from_url: Option<Duration>) -> Duration {
        self.keepalive.or(from_url.map(|k| k.max(MIN_KEEPALIVE))).unwrap_or(DEFAULT_KEEPALIVE)
    }

    /// Whether `build` creates the schema.
    pub fn create_schema(&self) -> bool {
        self.create_schema
    }

    /// [`connect_first`] within the acquire timeout.
    ///
    /// # Errors
    /// As [`connect_first`].
    pub async fn connect_first<C, E>(
        &self,
        backend: &'static str,
        connect: impl Future<Output = Result<C, E>>,
        classify: impl FnOnce(E) -> LockError,
    ) -> crate::Result<C> {
        connect_first(backend, self.acquire_timeout, connect, classify).await
    }
}

/// The public setters every pooled session store's builder has, inside `impl MyBuilder` for a
/// builder whose fields `source` and `settings` are a [`Source`](super::Source) and a
/// [`PoolSettings`]: where connections come from (`url`, `connect_options`, `pool`) and the
/// pool's and holds' settings (`max_connections`, `acquire_timeout`, `keepalive`,
/// `create_schema`). The store writes the docs of `url` and `pool`, which are its own.
///
/// ```ignore
/// impl PgLockBuilder {
///     lock_core::backend::session::pool_builder! {
///         /// Connect with a URL: ...
///         url;
///         /// Use an existing pool (yours). ...
///         pool: PgPool, connect: PgConnectOptions, lock: PgLock;
///     }
/// }
/// ```
#[macro_export]
macro_rules! pool_builder {
    (
        $(#[$url_doc:meta])* url;
        $(#[$pool_doc:meta])* pool: $pool:ty, connect: $options:ty, lock: $lock:ident;
    ) => {
        $(#[$url_doc])*
        pub fn url(mut self, url: impl Into<String>) -> Self {
            self.source = $crate::backend::session::Source::Url(url.into());
            self
        }

        /// Connect with ready-made connect options.
        pub fn connect_options(mut self, options: $options) -> Self {
            self.source = $crate::backend::session::Source::Options(Box::new(options));
            self
        }

        $(#[$pool_doc])*
        pub fn pool(mut self, pool: $pool) -> Self {
            self.source = $crate::backend::session::Source::Pool(pool);
            self
        }

        /// Size of the pool the builder opens (default 32, at least 2; ignored with
        /// [`pool`](Self::pool)).
        pub fn max_connections(mut self, n: u32) -> Self {
            self.settings.set_max_connections(n);
            self
        }

        /// How long to wait for a pooled connection (default 5 s; ignored with
        /// [`pool`](Self::pool)).
        pub fn acquire_timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.settings.set_acquire_timeout(timeout);
            self
        }

        /// Keep-alive ping period of a held lock's connection (default 2 s, at least 10 ms).
        /// The server ends a holding session silent for three periods (at least 2 s).
        pub fn keepalive(mut self, every: ::std::time::Duration) -> Self {
            self.settings.set_keepalive(every);
            self
        }

        /// Create the schema (`CREATE TABLE IF NOT EXISTS`) in `build` (default `true`). Turn it
        /// off when the application's database user may not create tables, and run
        #[doc = concat!("[`", stringify!($lock), "::migrate`]")]
        /// (or the SQL in the crate's `sql/` directory) with a privileged user instead.
        pub fn create_schema(mut self, create: bool) -> Self {
            self.settings.set_create_schema(create);
            self
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_defaults_and_which_keepalive_wins() {
        let mut s = PoolSettings::default();
        assert_eq!(
            (s.max_connections(), s.acquire_timeout(), s.create_schema()),
            (32, DEFAULT_ACQUIRE_TIMEOUT, true)
        );
        assert_eq!(s.keepalive(None), DEFAULT_KEEPALIVE);
        assert_eq!(s.keepalive(Some(Duration::ZERO)), MIN_KEEPALIVE);
        s.set_max_connections(1);
        assert_eq!(s.max_connections(), 2);
        s.set_keepalive(Duration::from_millis(1));
        assert_eq!(s.keepalive_set(), Some(MIN_KEEPALIVE));
        assert_eq!(s.keepalive(Some(Duration::from_secs(9))), MIN_KEEPALIVE);
    }
}
