//! The rwlock suite (cases named `rw_*`).

/// Expand the rwlock suite into one `#[tokio::test]` per case (see
/// [`primitive_tests!`](crate::primitive_tests)).
#[macro_export]
macro_rules! rwlock_tests {
    ($factory:expr) => {
        $crate::rwlock_tests!(@cases $factory; );
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let factory = $factory;
                $crate::primitives::rwlock::$case(&factory).await;
            }
        )*
    };
}
