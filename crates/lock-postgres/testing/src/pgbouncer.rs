//! PgBouncer (Debian's `pgbouncer`) in front of a [`PgServer`], in the pool mode a test names:
//! what a PostgreSQL session lock must tell apart (a transaction-pooling one hands a server
//! session to other clients between transactions).

use super::port_accepts;
use super::postgres::psql;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::postgres::{ADMIN_PASSWORD, DATABASE, PASSWORD, USER, as_user, bin_dir, chown, server_user};
use super::{
    ManagedProcess, PgServer, Probe, ServerError, Spec, canonical, fault_hooks, free_port, make_temp_dir,
};

const BINARY: &str = "/usr/sbin/pgbouncer";

/// A private PgBouncer on `127.0.0.1:port()` pooling the `locktest` database of one
/// [`PgServer`]. Clients are trusted (any password); PgBouncer logs in to PostgreSQL as the
/// client's role with that role's password. sqlx's startup parameters (`extra_float_digits`,
/// `options`) are ignored, as PgBouncer deployments serving sqlx clients configure. Dropping it
/// kills the process and removes its directory.
#[derive(Debug)]
pub struct PgBouncer {
    proc: ManagedProcess,
}

impl PgBouncer {
    /// Starts PgBouncer in front of `pg` with `pool_mode` (`session`, `transaction` or
    /// `statement`).
    pub fn start(pg: &PgServer, pool_mode: &str) -> Result<Self, ServerError> {
        if !Path::new(BINARY).is_file() {
            return Err(ServerError::MissingBinary { binary: BINARY.into(), debian_package: "pgbouncer" });
        }
        // PgBouncer refuses to run as root: as the server's user, as PostgreSQL.
        let user = server_user()?;
        let psql_bin = bin_dir()?;
        super::with_port_retries(|| {
            let port = free_port()?;
            let dir = make_temp_dir("pgbouncer")?;
            let base = canonical(dir.path());
            chown(&base, user)?;
            let users = base.join("users.txt");
            write(&users, &format!("\"{USER}\" \"{PASSWORD}\"\n\"postgres\" \"{ADMIN_PASSWORD}\"\n"))?;
            let ini = base.join("pgbouncer.ini");
            write(&ini, &config(pg.port(), port, pool_mode, &users))?;
            for f in [&users, &ini] {
                chown(f, user)?;
            }
            let (program, mut args) = as_user(user, PathBuf::from(BINARY))?;
            args.push(ini.into_os_string());
            let spec = Spec::new(
                format!("pgbouncer ({pool_mode}) on 127.0.0.1:{port}"),
                program,
                args,
                (port, Vec::new()),
                probe(psql_bin.clone(), pg.port()),
                Duration::from_secs(20),
            );
            Ok(PgBouncer { proc: ManagedProcess::start(spec, dir)? })
        })
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.proc.port()
    }

    /// `postgres://lock:lockpw@127.0.0.1:PORT/locktest`, through PgBouncer.
    pub fn url(&self) -> String {
        format!("postgres://{USER}:{PASSWORD}@127.0.0.1:{}/{DATABASE}", self.port())
    }
}

fault_hooks!(PgBouncer, proc);

fn write(path: &Path, text: &str) -> Result<(), ServerError> {
    std::fs::write(path, text).map_err(|e| ServerError::io(format!("writing {}", path.display()), e))
}

fn config(pg_port: u16, port: u16, pool_mode: &str, users: &Path) -> String {
    format!(
        "[databases]\n\
         {DATABASE} = host=127.0.0.1 port={pg_port} dbname={DATABASE}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {users}\n\
         pool_mode = {pool_mode}\n\
         ignore_startup_parameters = extra_float_digits, options\n\
         max_client_conn = 200\n\
         default_pool_size = 20\n\
         server_round_robin = 0\n",
        users = users.display()
    )
}

/// `psql` through it answers `SHOW port` with the port of the PostgreSQL it pools.
fn probe(bin: PathBuf, pg_port: u16) -> Probe {
    Probe::new(Duration::from_millis(10), move |_pid, port| {
        if !port_accepts(port) {
            return Err("port not accepting connections".into());
        }
        let got = psql(&bin, port, DATABASE, &["SHOW port"]).map_err(|e| e.to_string())?;
        if got.trim() == pg_port.to_string() {
            Ok(())
        } else {
            Err(format!("SHOW port through it returned {:?}, expected {pg_port}", got.trim()))
        }
    })
}
