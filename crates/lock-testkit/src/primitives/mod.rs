//! Suites for the primitives the core builds on any [`LockBackend`](lock_core::LockBackend):
//! the read-write lock, the semaphore, leader election and the count-down latch. Each suite takes a
//! [`Factory`](crate::Factory) like the mutex suite; [`primitive_tests!`](crate::primitive_tests)
//! instantiates all three in one line, next to `conformance_tests!`.

pub mod latch;
pub mod leader;
pub mod rw_fair;
mod rw_lost;
pub mod rwlock;
mod sem_calls;
mod sem_holder;
mod sem_many;
mod sem_store;
pub mod semaphore;

/// Expand every primitive suite (read-write lock, semaphore, leader election, latch) into
/// `#[tokio::test]`s, named `rw_*`, `sem_*`, `leader_*` and `latch_*`. The argument is evaluated in each
/// test, as for [`conformance_tests!`](crate::conformance_tests).
#[macro_export]
macro_rules! primitive_tests {
    ($factory:expr) => {
        $crate::rwlock_tests!($factory);
        $crate::semaphore_tests!($factory);
        $crate::leader_tests!($factory);
        $crate::latch_tests!($factory);
    };
}
