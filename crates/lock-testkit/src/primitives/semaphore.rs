//! The semaphore suite (cases named `sem_*`).

/// Expand the semaphore suite into one `#[tokio::test]` per case (see
/// [`primitive_tests!`](crate::primitive_tests)).
#[macro_export]
macro_rules! semaphore_tests {
    ($factory:expr) => {
        $crate::semaphore_tests!(@cases $factory; );
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let factory = $factory;
                $crate::primitives::semaphore::$case(&factory).await;
            }
        )*
    };
}
