//! The `dlock` command, run as users run it: the real binary against real servers. One test
//! binary with a module per concern (linking one binary per file cost CI minutes, and each
//! started its own servers); `cargo test -p dlock-cli --test cli unlock::` runs one concern.

mod common;

mod background;
mod etcdctl;
mod fencing_env;
mod file_flock;
mod force_mysql;
mod force_redis;
mod holder;
mod hostile;
mod interrupted_waiters;
mod kinds;
mod metrics;
mod pg_roles;
mod primitives;
mod readme;
mod run_signals;
mod session_lease;
mod silent_store;
mod unlock;
mod usage;
