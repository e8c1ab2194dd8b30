//! The command line: every subcommand and flag of `dlock`, with the help text users read.
//! `main` dispatches what it parses; `stores` adds the `--url` help of this build's stores.

use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::EXIT_TIMEOUT;
use crate::duration::parse_duration;

#[derive(Parser, Debug)]
#[command(
    name = "dlock",
    version,
    about = "Distributed locks, semaphores, read-write locks and leader election over Redis, MySQL/MariaDB, PostgreSQL, ZooKeeper, etcd and lock files (`dlock run --help` lists the stores of this build)",
    after_help = "Examples:\n  \
                  dlock run --url redis://127.0.0.1:6379 --key nightly-report -- ./report.sh\n  \
                  dlock run --url zk://127.0.0.1:2181/locks --key deploy --wait 5m -- make deploy\n  \
                  dlock run --url mysql://app@db/app --key import --metrics-addr 127.0.0.1:9464 -- ./import\n  \
                  dlock run --url redis://127.0.0.1:6379 --key transcode --permits 4 --wait 1h -- ./transcode.sh\n  \
                  dlock run --url postgres://app@db/app --key schema --write -- ./migrate.sh\n  \
                  dlock run --url postgres://app@db/app --key schema --read -- ./report.sh\n  \
                  dlock leader --url etcd://127.0.0.1:2379/locks --key scheduler --identity \"$(hostname)\" -- ./scheduler\n  \
                  dlock status --url etcd://127.0.0.1:2379/locks --key scheduler --leader\n  \
                  dlock status --url redis://127.0.0.1:6379 --key nightly-report --json\n  \
                  dlock list --url redis://127.0.0.1:6379 --prefix nightly-\n  \
                  dlock unlock --url redis://127.0.0.1:6379 --key nightly-report --force\n  \
                  dlock completions bash > ~/.local/share/bash-completion/completions/dlock\n\n\
                  The benchmark of the backends lives in the repository's lock-bench crate: \
                  cargo run --release -p lock-bench -- --quick"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Hold a lock while a command runs, like flock(1) or `etcdctl lock`: the mutex KEY, one of
    /// N permits of a semaphore (--permits N: at most N copies of a job at once), or the read or
    /// write side of a read-write lock (--read, --write).
    ///
    /// The lock is renewed by a watchdog while the command runs, and released only after the
    /// command, and every process it started in the background, have exited (as flock(1)
    /// holds its lock while any process keeps the descriptor; --ignore-background releases
    /// at the command's own exit). The command runs in its own process group; SIGTERM, SIGINT
    /// and SIGHUP sent to dlock are forwarded to that group. If the lock is lost, the group
    /// gets the --on-lost signal, then SIGKILL after the grace period. If dlock itself dies
    /// (SIGKILL, OOM), a small supervisor between dlock and the command notices within 50 ms
    /// and stops the command the same way, well before the lease lets anyone else in. A signal
    /// while dlock waits for the lock ends it after it left the store's queue (1 s at most for
    /// a store that does not answer).
    ///
    /// Without a command (nor -c), dlock holds the lock as `etcdctl lock NAME` does: it prints
    /// the key and its fencing token, and holds until stdin closes or a signal arrives.
    ///
    /// Exit statuses: the command's own (128 + N when it died of signal N); 64 bad arguments,
    /// URL or missing feature; 69 backend unreachable (after retrying within --wait); 75 (or
    /// --conflict-exit-code) lock not acquired within --wait; 76 lock lost (command stopped);
    /// 77 credentials or permission refused; 78 the store refused the configuration (a
    /// database that does not exist, TLS to a server without it) or cannot hold this kind of
    /// lock; 126 the command is not runnable; 127 the command was not found.
    Run {
        /// Store URL, e.g. redis://127.0.0.1:6379 (--help lists the stores of this build)
        #[arg(long, env = "DLOCK_URL")]
        url: String,
        /// Lock name.
        #[arg(long)]
        key: String,
        /// Hold one of N permits (1..=256) of the semaphore KEY instead of the mutex: at most N
        /// copies of the command run at once (every copy must give the same N; where the store
        /// keeps records, a different N is refused with the stored one). The command gets its
        /// permit's slot, 0..N, in DLOCK_PERMIT_SLOT, and no fencing token (permits are not
        /// exclusive).
        #[arg(long, value_name = "N", conflicts_with_all = ["read", "write"], value_parser = permit_count())]
        permits: Option<u32>,
        /// Hold the read side of the read-write lock KEY: many readers at once, none while a
        /// writer holds it or waits for it. No fencing token (readers are not exclusive).
        #[arg(long, group = "side")]
        read: bool,
        /// Hold the write side of the read-write lock KEY: alone, with no reader. The writer's
        /// fencing token is exported.
        #[arg(long, group = "side")]
        write: bool,
        /// With --read/--write: reader slots (1..=256) of the read-write lock (at most this many
        /// readers at once; a writer takes them all), where the store has no read-write lock of
        /// its own. Every process using KEY must give the same number.
        #[arg(long, value_name = "K", default_value_t = dlock::DEFAULT_READER_SLOTS, requires = "side", value_parser = permit_count())]
        reader_slots: u32,
        /// How long to wait for the lock, with its unit (500ms, 30s, 5m, at most 365d);
        /// `forever` (flock's and `etcdctl lock`'s default) waits without a bound; `0`: try
        /// once and exit 75 at once if it is held. A server that refuses or drops the
        /// connection is retried within it.
        #[arg(long, default_value = "forever", value_parser = crate::duration::parse_wait)]
        wait: crate::duration::Wait,
        /// Exit status when the lock is not acquired within --wait (flock's -E), instead of 75.
        #[arg(long, value_name = "N", default_value_t = EXIT_TIMEOUT)]
        conflict_exit_code: u8,
        /// Say nothing when the lock is not acquired within --wait (flock's -n is silent): the
        /// exit status tells.
        #[arg(long, short = 'q')]
        quiet: bool,
        /// The lease: renewed every third of it while the command runs, and how long after a
        /// dead holder the lock frees. On ZooKeeper it is the session timeout and on etcd the
        /// session lease's TTL (see --help of --url for the server's minimum); a session option
        /// in the URL wins.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        lease: Duration,
        /// What to do to the command when the lock is lost: `SIGNAL[:GRACE]` sends SIGNAL
        /// (TERM, INT, HUP, KILL, USR1, USR2) and SIGKILL after GRACE; `none` lets it run on.
        /// The grace period must be shorter than the lease; without one it is 5s, or a third of
        /// the lease when that is shorter.
        #[arg(long, default_value = "TERM", value_parser = crate::supervise::parse_on_lost)]
        on_lost: crate::supervise::OnLostArg,
        /// Serve the lock's metrics (acquisitions, wait and hold times, renewals, lost holds) as
        /// Prometheus text at http://ADDR/metrics while the command runs, e.g. 127.0.0.1:9464.
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<std::net::SocketAddr>,
        /// Release the lock as soon as the command itself exits, even while processes it
        /// started in the background still run. By default dlock holds the lock, as flock(1)
        /// does, until the command and every process it started (in its process group or
        /// not) have exited; a lost lock still stops them as --on-lost says.
        #[arg(long)]
        ignore_background: bool,
        /// A label noted with the holder's identity (`host:pid cmd=PROGRAM label=LABEL`), which
        /// `dlock status` shows while the lock is held. Public: never put a secret in it.
        #[arg(long, value_name = "LABEL")]
        holder_label: Option<String>,
        /// Run this shell command (`sh -c CMD`), as flock -c does, instead of a command and its
        /// arguments.
        #[arg(short = 'c', long = "command", value_name = "CMD", conflicts_with = "command")]
        shell_command: Option<String>,
        /// The command and its arguments; none (and no -c): hold until stdin closes or a signal.
        #[arg(trailing_var_arg = true)]
        command: Vec<String>,
    },
    /// Campaign for leadership of a name and run a command only while leading (leader election
    /// on the same lock as `dlock run`).
    ///
    /// The command starts each time this process becomes leader, with the term's fencing token
    /// in DLOCK_FENCING_TOKEN (it grows with every term: pass it to what the command writes so
    /// that a deposed leader's writes are rejected). When leadership is lost the command gets
    /// the --on-lost signal at once, before another candidate can lead, and SIGKILL after the
    /// grace period, as with `dlock run`; dlock then campaigns again (or exits 76 with --once). When the command ends by itself, dlock
    /// gives up leadership and exits with its status. Observers read the leader's --identity
    /// with `dlock status --leader` where the backend keeps notes.
    ///
    /// Exit statuses: the command's own (128 + N when it died of signal N); 64 bad arguments,
    /// URL or missing feature; 69 backend unreachable; 76 leadership lost with --once;
    /// 77 credentials or permission refused; 128 + N when signal N ended dlock while following.
    Leader {
        /// Backend URL (see `dlock run --help`).
        #[arg(long, env = "DLOCK_URL")]
        url: String,
        /// The election's name (a lock key).
        #[arg(long)]
        key: String,
        /// What observers read as the leader (public: never a secret). Default: host:pid.
        #[arg(long)]
        identity: Option<String>,
        /// Lease of each term, renewed every third of it: a leader that dies is succeeded
        /// about one lease later. On ZooKeeper and etcd it is the session timeout or lease TTL
        /// (see `dlock run --help`).
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        lease: Duration,
        /// What to do to the command when leadership is lost (see `dlock run --help`).
        #[arg(long, default_value = "TERM", value_parser = crate::supervise::parse_on_lost)]
        on_lost: crate::supervise::OnLostArg,
        /// Exit after the first term (status 76 when leadership was lost) instead of
        /// campaigning again.
        #[arg(long)]
        once: bool,
        /// End the term as soon as the command itself exits, even while processes it started
        /// in the background still run (see `dlock run --help`).
        #[arg(long)]
        ignore_background: bool,
        /// Serve the election's metrics (terms won and lost, hold times, renewals, and
        /// dlock_waiting: 1 while this candidate follows) as Prometheus text at
        /// http://ADDR/metrics, e.g. 127.0.0.1:9464.
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<std::net::SocketAddr>,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, required = true)]
        command: Vec<String>,
    },
    /// Print a shell completion script: `dlock completions bash > /etc/bash_completion.d/dlock`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Tell whether a lock is held, without acquiring or waiting: remaining lease, fencing
    /// token, waiters and holder where the backend records them; for a read-write lock the
    /// writer (holding, or waiting for the readers) or the readers, for a semaphore every held
    /// permit. What the store holds or stores under KEY tells a mutex, a semaphore (its count is
    /// stored with it) or a read-write lock apart without a flag; --permits N is checked
    /// against the stored count, and --read-write --reader-slots K looks at more than 16 slots.
    ///
    /// Exit statuses: 0 free (a semaphore: a permit free); 1 held (a semaphore: every permit
    /// held); 64 bad arguments or URL, a name too long for the primitive, or --permits N
    /// disagreeing with the semaphore's stored count; 69 backend unreachable; 77 permission
    /// refused; 78 the store refused the configuration for good.
    Status {
        /// Backend URL (see `dlock run --help`).
        #[arg(long, env = "DLOCK_URL")]
        url: String,
        /// Lock name.
        #[arg(long)]
        key: String,
        /// One JSON object on stdout: key, backend, kind, held, remaining_ms, fence, waiters,
        /// owner, holder, readers (and leader with --leader); a read-write lock's kind, native,
        /// writer, writer_waiting, readers, reader_holds; a semaphore's kind, permits,
        /// held_permits and one object per held slot.
        #[arg(long)]
        json: bool,
        /// Also print the identity the leader of the election KEY published (`dlock leader
        /// --identity`); 78 on backends without notes.
        #[arg(long, conflicts_with_all = ["read_write", "permits"])]
        leader: bool,
        /// KEY is a read-write lock (`dlock run --read/--write`): its writer or readers.
        #[arg(long, conflicts_with = "permits")]
        read_write: bool,
        /// With --read-write: the lock's reader slots, where it is not native (as given to
        /// `dlock run --reader-slots`).
        #[arg(long, value_name = "K", default_value_t = dlock::DEFAULT_READER_SLOTS, requires = "read_write")]
        reader_slots: u32,
        /// KEY is a semaphore of N permits (`dlock run --permits N`): every held permit.
        #[arg(long, value_name = "N")]
        permits: Option<u32>,
    },
    /// List the locks held now, each by the name its users gave and with what `dlock status`
    /// shows (holder identity, fencing token, lease left, waiters; a semaphore's permits, a
    /// read-write lock's writer or readers), on the stores that can enumerate their locks.
    ///
    /// Exit statuses: 0 listed (also when none is held); 64 bad arguments (--limit 0) or URL;
    /// 69 backend unreachable; 78 the store cannot enumerate its locks (PostgreSQL,
    /// MySQL/MariaDB, lock files, Redlock, a Redis Cluster and the Redis interop modes).
    List {
        /// Backend URL (see `dlock run --help`).
        #[arg(long, env = "DLOCK_URL")]
        url: String,
        /// Only the keys starting with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Look at most at this many keys of the store (a semaphore's or a read-write lock's
        /// parts count one each); a list cut short says so (on stderr; "truncated" in JSON).
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// One JSON object on stdout: backend, prefix, limit, truncated, and locks (one object
        /// per held lock, as `dlock status --json` prints it).
        #[arg(long)]
        json: bool,
    },
    /// Take a lock away from its holder: an operator's last resort for a holder that is stuck
    /// but still renewing. The hold is named by the fencing token it was inspected with, so a
    /// holder that took the lock since is never evicted; the evicted holder's next renewal is
    /// refused (`dlock run` then stops its command as --on-lost says) and the next holder's
    /// fencing token is larger, so fenced storage refuses the evicted holder's late writes.
    /// Asks before evicting when stdin is a terminal, unless --yes. A read-write lock's writer
    /// is taken with every part it holds; of a semaphore or of readers, the one permit or
    /// reader --fence names (or the only one held).
    ///
    /// Exit statuses: 0 evicted, or the lock was free; 1 nothing evicted (declined, or the
    /// lock changed hands since it was inspected); 64 bad arguments or URL, or several permits
    /// or readers hold and --fence names none; 69 backend
    /// unreachable; 77 permission refused (PostgreSQL ends the holder's session: the holder's
    /// role or pg_signal_backend; MySQL: CONNECTION ADMIN for another user's session); 78 the
    /// hold has no fence to name it by: one taken by another library (the Python libraries of
    /// the Redis interop modes, flock(1) on a lock file: stop the holder's process), a
    /// semaphore kept in one key (Redis, ZooKeeper), the readers of a read-write lock kept in
    /// one key (every store but `GET_LOCK` and lock files).
    Unlock {
        /// Backend URL (see `dlock run --help`).
        #[arg(long, env = "DLOCK_URL")]
        url: String,
        /// Lock name.
        #[arg(long)]
        key: String,
        /// Required: unlock takes a lock from a live holder, which must never happen by accident.
        #[arg(long, required = true)]
        force: bool,
        /// Take only the hold with this fencing token (as `dlock status` shows it): one permit
        /// of a semaphore or one reader of a read-write lock where several hold; for a mutex
        /// or a writer, nothing unless it still holds with this token.
        #[arg(long, value_name = "TOKEN")]
        fence: Option<u64>,
        /// Take only the permit or reader of this slot (as `dlock status` shows it): with
        /// --fence where the store counts fences per slot, so that they repeat across slots.
        #[arg(long, value_name = "N")]
        slot: Option<u32>,
        /// Do not ask (it asks only when stdin is a terminal).
        #[arg(long)]
        yes: bool,
        /// One JSON object on stdout: key, backend, evicted, fence, owner, holder, parts (the
        /// keys taken).
        #[arg(long)]
        json: bool,
    },
    /// Internal: the supervisor between `dlock run` and the command.
    #[command(hide = true, name = "__supervise")]
    Supervise {
        #[arg(long)]
        parent: u32,
        #[arg(long, value_parser = parse_duration)]
        grace: Duration,
        #[arg(long)]
        ignore_background: bool,
        #[arg(trailing_var_arg = true, required = true)]
        command: Vec<String>,
    },
}

/// `--permits` and `--reader-slots`: 1..=256, refused before anything connects.
fn permit_count() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=i64::from(dlock::MAX_PERMITS))
}
