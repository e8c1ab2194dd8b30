//! The leader suite (cases named `leader_*`).

/// Expand the leader suite into one `#[tokio::test]` per case (see
/// [`primitive_tests!`](crate::primitive_tests)).
#[macro_export]
macro_rules! leader_tests {
    ($factory:expr) => {
        $crate::leader_tests!(@cases $factory; );
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let factory = $factory;
                $crate::primitives::leader::$case(&factory).await;
            }
        )*
    };
}
