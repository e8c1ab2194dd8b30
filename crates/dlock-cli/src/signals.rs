//! dlock's own signals: SIGTERM, SIGINT and SIGHUP, which end a wait or a hold cleanly, and
//! the exit status a signal gives (128 + its number, as a shell reports it).

use std::process::ExitCode;

use nix::sys::signal::Signal;

/// SIGTERM, SIGINT and SIGHUP, as [`prepare`](crate::run::prepare) installs them.
pub(crate) type Signals = [Signal_; 3];

/// The first of SIGTERM, SIGINT and SIGHUP to arrive.
pub(crate) async fn any_signal(sigs: &mut Signals) -> Signal {
    let [(a, sa), (b, sb), (c, sc)] = sigs;
    tokio::select! {
        _ = sa.recv() => *a,
        _ = sb.recv() => *b,
        _ = sc.recv() => *c,
    }
}

pub(crate) type Signal_ = (Signal, tokio::signal::unix::Signal);

pub(crate) fn exit_signal(sig: Signal) -> ExitCode {
    ExitCode::from(u8::try_from(128 + sig as i32).unwrap_or(255))
}
