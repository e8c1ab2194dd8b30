//! The way of one call through the wrapper: what it meets, decided when it starts (a plan),
//! its waits, its failure, the hooks, and its answer as the caller gets it.

use std::time::Duration;

use super::hooks::{Hook, Pass};
use super::{Failure, Faults, Op, Stall};
use crate::backend::EpochRx;
use crate::{LockError, Result};

/// What one call meets on its way to the store, decided when it starts.
struct Plan {
    latency: Duration,
    stall: Option<Stall>,
    fail: Option<Failure>,
    lose_answer: bool,
    before: Option<Hook>,
    healed: EpochRx,
}

impl Faults {
    fn plan(&self, op: Op) -> Plan {
        let mut s = self.shared.state.lock();
        s.calls[op as usize] += 1;
        let latency = s.latency;
        let a = &mut s.armed[op as usize];
        let fail = match &a.fail_with {
            Some(make) => Some(Failure::With(make.clone())),
            None => (a.fail_all || take_one(&mut a.fail_next)).then_some(Failure::Refused),
        };
        let lose_answer = fail.is_none() && take_one(&mut a.lose_answers);
        let stall = a.stall;
        let before = s.hooks.before.clone();
        Plan { latency, stall, fail, lose_answer, before, healed: self.shared.healed.subscribe() }
    }

    /// The way to the store of one call of `op`: its waits, then its failure if one is armed,
    /// then the hook.
    pub(super) async fn gate(&self, op: Op) -> Result<Pass> {
        self.gate_n(op, 1).await
    }

    /// [`gate`](Self::gate) for a call carrying `items` holds.
    pub(super) async fn gate_n(&self, op: Op, items: usize) -> Result<Pass> {
        let mut plan = self.plan(op);
        if !plan.latency.is_zero() || plan.stall.is_some() {
            // Boxed: the timers stay out of every call's future when nothing is armed (the
            // wrapper sits on measured paths; the bench counts through it).
            Box::pin(wait_out(&mut plan)).await;
        }
        match plan.fail {
            Some(Failure::Refused) => {
                Err(self.injected(op, std::io::ErrorKind::ConnectionRefused, "did not reach the store"))
            }
            Some(Failure::With(make)) => Err((make.0)()),
            None => {
                if let Some(hook) = plan.before {
                    hook.call(op, items)?;
                }
                Ok(Pass { lose: plan.lose_answer, items })
            }
        }
    }

    /// `answer` as the caller gets it: lost if the call's plan said so, or replaced by the
    /// answers' hook.
    pub(super) fn answer<T>(&self, op: Op, pass: Pass, answer: T) -> Result<T> {
        if pass.lose {
            return Err(self.injected(
                op,
                std::io::ErrorKind::ConnectionReset,
                "was applied, its answer lost",
            ));
        }
        let after = self.shared.state.lock().hooks.after.clone();
        match after {
            Some(hook) => hook.call(op, pass.items).map(|()| answer),
            None => Ok(answer),
        }
    }

    fn injected(&self, op: Op, kind: std::io::ErrorKind, what: &str) -> LockError {
        let source = std::io::Error::new(kind, format!("injected fault: {op} {what}"));
        LockError::temporary(self.inner.name(), source)
    }
}

/// The latency and stall `plan` asks for, ended early by a heal.
async fn wait_out(plan: &mut Plan) {
    let waits = async {
        // Only when asked: even a zero sleep waits for the timer's next tick.
        if !plan.latency.is_zero() {
            tokio::time::sleep(plan.latency).await;
        }
        match plan.stall {
            Some(Stall::For(d)) => tokio::time::sleep(d).await,
            Some(Stall::Forever) => std::future::pending().await,
            None => {}
        }
    };
    tokio::select! {
        // The first ready branch, not a random one: what a random pick could choose, the
        // same every run, so a simulated run replays its seed (`history::sim`).
        biased;
        () = waits => {}
        _ = plan.healed.changed() => {}
    }
}

/// Takes one from a counted fault; whether there was one.
fn take_one(n: &mut u64) -> bool {
    let some = *n > 0;
    *n = n.saturating_sub(1);
    some
}
