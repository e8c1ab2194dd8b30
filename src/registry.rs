//! The registered stores: one line per backend crate, `"feature" [schemes] => crate`.
//!
//! The line re-exports the crate (under its feature) and puts its
//! [`DESCRIPTOR`](lock_core::backend::registry::Descriptor) in [`stores`], from which
//! [`from_url`](crate::from_url), the `dlock` command's help, the bench's default targets and
//! the README's backend table are made. The schemes are repeated here only so that a URL of a
//! store compiled out gets [`LockError::FeatureNotEnabled`](crate::LockError) instead of
//! "unknown scheme"; a test checks they match the descriptor's.

use lock_core::backend::registry::Descriptor;

macro_rules! stores {
    ($($feature:literal [$($scheme:literal),+] => $krate:ident,)+) => {
        $(
            #[cfg(feature = $feature)]
            #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
            pub use $krate;
        )+

        /// Every store compiled into this build, the in-process one first.
        static STORES: &[&Descriptor] = &[
            #[cfg(feature = "memory")]
            &lock_core::MemoryBackend::DESCRIPTOR,
            $(
                #[cfg(feature = $feature)]
                &$krate::DESCRIPTOR,
            )+
        ];

        /// Every store this facade knows, compiled in or not: its feature and schemes.
        pub(crate) static KNOWN: &[(&str, &[&str])] = &[("memory", &["memory"]), $(($feature, &[$($scheme),+]),)+];
    };
}

stores! {
    "redis" ["redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "redlock"] => lock_redis,
    "mysql" ["mysql", "mariadb"] => lock_mysql,
    "postgres" ["postgres", "postgresql"] => lock_postgres,
    "zk" ["zk", "zookeeper", "zks"] => lock_zk,
    "etcd" ["etcd", "etcds"] => lock_etcd,
    "file" ["file"] => lock_file,
    "nats" ["nats", "nats+tls"] => lock_nats,
}

/// The stores compiled into this build (by cargo feature), in the order the docs list them.
pub fn stores() -> &'static [&'static Descriptor] {
    STORES
}

/// The store whose schemes include `scheme` (any case), if it is compiled in.
pub fn store_for(scheme: &str) -> Option<&'static Descriptor> {
    STORES.iter().copied().find(|d| d.answers(scheme))
}

/// The cargo feature of a known store's `scheme`, compiled in or not.
pub(crate) fn feature_of(scheme: &str) -> Option<&'static str> {
    KNOWN.iter().find(|(_, schemes)| schemes.iter().any(|s| s.eq_ignore_ascii_case(scheme))).map(|(f, _)| *f)
}

/// Every scheme of every known store, for the message that lists what a URL may start with.
pub(crate) fn known_schemes() -> Vec<&'static str> {
    KNOWN.iter().flat_map(|(_, schemes)| schemes.iter().copied()).collect()
}

#[cfg(all(test, feature = "stores"))]
mod tests {
    use super::*;

    #[test]
    fn every_known_store_is_registered_with_its_schemes() {
        let registered: Vec<(&str, &[&str])> = STORES.iter().map(|d| (d.name, d.schemes)).collect();
        assert_eq!(registered, KNOWN, "the registration lines' schemes must be the descriptors'");
    }

    /// The README's table is this registry's: a new store's row is added by running this test
    /// and pasting what it prints.
    #[test]
    fn readme_backend_table_is_the_registry() {
        let readme = include_str!("../README.md");
        let (begin, end) = ("<!-- stores: made from dlock::stores() -->\n", "<!-- /stores -->");
        let at = readme.find(begin).expect("the README marks its backend table") + begin.len();
        let table = &readme[at..at + readme[at..].find(end).expect("the table's end marker")];
        let expected = lock_core::backend::registry::table(STORES);
        assert_eq!(table, expected, "README.md's backend table should read:\n{expected}");
    }
}
