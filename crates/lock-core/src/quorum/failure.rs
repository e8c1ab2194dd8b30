//! Why members gave no answer, and the error for too few answers.

use std::fmt;
use std::time::Duration;

use crate::{LockError, Result};

/// Why a member gave no answer.
#[derive(Debug)]
pub(super) enum Failure {
    Error(LockError),
    Timeout(Duration),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Error(e) => write!(f, "{e}"),
            Failure::Timeout(d) => write!(f, "no answer within {d:?}"),
        }
    }
}

/// Too few members answered; the first failure is the source.
#[derive(Debug)]
pub(super) struct NoQuorum {
    pub(super) what: String,
    pub(super) answered: usize,
    pub(super) n: usize,
    pub(super) failures: Vec<Failure>,
}

impl fmt::Display for NoQuorum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no quorum for {}: {} of {} reachable", self.what, self.answered, self.n)?;
        if self.failures.len() > 1 {
            write!(f, " (other failures:")?;
            for fl in &self.failures[1..] {
                write!(f, " {fl};")?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

impl std::error::Error for NoQuorum {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.failures.first()? {
            Failure::Error(e) => Some(e),
            Failure::Timeout(_) => None,
        }
    }
}

/// A member's answer within `t`, or why there was none.
pub(super) fn member_result<T>(
    r: std::result::Result<Result<T>, tokio::time::error::Elapsed>,
    t: Duration,
) -> Result<T, Failure> {
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Failure::Error(e)),
        Err(_) => Err(Failure::Timeout(t)),
    }
}
