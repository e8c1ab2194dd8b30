//! Every statement has a client-side bound: against a paused (SIGSTOPped) server, a release,
//! an acquisition with a deadline and a try answer by the deadline or within the server's idle
//! bound, not when the server wakes up.
//!
//! Run: `cargo test -p lock-postgres --test postgres bounds::`.

use std::sync::Arc;
use std::time::Duration;

use lock_postgres_testing::PgServer;
use lock_testkit::server::or_skip;
use lock_testkit::stall::{Bounds, paused_server_answers_in_time};

use crate::common;
use common::{key, lockers};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_release_wait_and_try_answer_in_time() {
    let Some(server) = or_skip("postgres", PgServer::start()) else { return };
    let server = Arc::new(server);
    let url = server.url();
    let [a, b] = lockers(&url).await;
    // The test keeps its own handle: the server must outlive the helper's last `stall`.
    let s = server.clone();
    let stall = move |on: bool| if on { s.pause() } else { s.resume() }.expect("SIGSTOP / SIGCONT");
    // A release and a try answer within the server's idle bound for the tests' 100 ms
    // keep-alive (three periods, at least 2 s); a try with a deadline 250 ms after it.
    let bounds = Bounds {
        release: Duration::from_secs(2),
        attempt: Duration::from_secs(2),
        wait_grace: Duration::from_millis(250),
        slack: Duration::from_millis(750),
    };
    paused_server_answers_in_time(&a, &b, &key("paused-bounds"), Arc::new(stall), bounds).await;
}
