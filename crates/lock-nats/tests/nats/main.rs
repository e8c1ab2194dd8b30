//! Every suite on the NATS backend, in one test binary (linking is much of CI's time): the
//! conformance suite against the binary's shared nats-server (clients direct, and each behind
//! a proxy whose connection a case cuts), the primitive suites, and the history and generative
//! checkers on private servers under a kill / restart / pause / blackhole / cut nemesis.
//! With `LOCK_TEST_REQUIRE=1` a missing nats-server fails instead of skipping.

mod faults;
mod records;
mod resend;
mod schedules;
mod tls;

/// The shared server's clients, or a skip.
macro_rules! factory {
    () => {
        match lock_nats_testing::NatsFactory::on_shared() {
            Some(f) => f,
            None => return,
        }
    };
}

mod plain {
    lock_testkit::conformance_tests!(factory!());
    lock_testkit::primitive_tests!(factory!());
}

/// The cases that sever a hold, with the holder's connection cut first (it reconnects, then
/// finds its key gone).
mod cut {
    use lock_testkit::{LoseBy, Loss};
    lock_testkit::conformance_tests!(@cases LoseBy::new(factory!().proxied(), Loss::CutThenSever);
        renew_extends_lease, lost_signal_fires, watchdog_keeps_lock);
}
