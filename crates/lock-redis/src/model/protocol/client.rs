//! The clients' steps: an attempt (or a hand-over taken), a release, the end of a wait, and
//! what a client makes of an answer.

use super::*;

impl Protocol {
    pub(super) fn send(s: &mut State, m: Msg) {
        s.net.push(m);
        s.net.sort();
    }

    pub(super) fn broke(broken: &mut Option<String>, why: String) {
        if broken.is_none() {
            *broken = Some(why);
        }
    }

    /// A client holds a new hold (not a nesting) with `fence` until `until`.
    pub(super) fn granted(s: &mut State, c: usize, fence: u64, until: Ms) {
        if fence <= s.top_fence {
            Self::broke(
                &mut s.broken,
                format!("client {c} was granted fence {fence} after fence {} was", s.top_fence),
            );
        }
        s.top_fence = s.top_fence.max(fence);
        let cl = &mut s.clients[c];
        (cl.holds, cl.fence, cl.until) = (1, fence, until);
    }

    /// A client holds a permit of `slot` with `fence` until `until`: each slot's fences
    /// increase (permits are held together; a hand-over heard late may carry a fence below
    /// one another slot drew since).
    fn granted_permit(s: &mut State, c: usize, fence: u64, slot: u64, until: Ms) {
        let Some(top) = s.slot_fences.get_mut(slot as usize) else {
            return Self::broke(&mut s.broken, format!("client {c} was granted slot {slot}"));
        };
        if fence <= *top {
            let top = *top;
            Self::broke(
                &mut s.broken,
                format!("client {c} was granted slot {slot} at fence {fence} after {top}"),
            );
        }
        s.slot_fences[slot as usize] = fence.max(s.slot_fences[slot as usize]);
        let cl = &mut s.clients[c];
        (cl.slot, cl.fence, cl.until) = (Some(slot), fence, until);
    }

    pub(super) fn next_op(s: &mut State, c: usize) {
        let cl = &mut s.clients[c];
        (cl.pc, cl.attempts, cl.registered) = (cl.pc + 1, 0, false);
    }

    pub(super) fn step(&self, s: &mut State, c: usize) {
        let now = s.ks.now;
        let op = self.programs[c][s.clients[c].pc];
        let cl = &mut s.clients[c];
        match op {
            Op::Release if cl.holds == 0 => Self::next_op(s, c),
            Op::Release => {
                cl.nonces += 1;
                let (seq, nonce, owner) = (cl.nonces, cl.nonces, cl.owner);
                cl.pending = Some((seq, Waiting::Release, now));
                Self::send(
                    s,
                    Msg::Request { client: c, owner, seq, call: Call::Release { nonce }, ghost: false },
                );
            }
            Op::ReadRelease if !cl.reads => Self::next_op(s, c),
            Op::PermitRelease if cl.slot.is_none() => Self::next_op(s, c),
            Op::ReadRelease | Op::PermitRelease => {
                cl.nonces += 1;
                let (seq, owner) = (cl.nonces, if op == Op::ReadRelease { cl.reader } else { cl.owner });
                let waiting =
                    if op == Op::ReadRelease { Waiting::ReadRelease } else { Waiting::PermitRelease };
                cl.pending = Some((seq, waiting, now));
                Self::send(s, Msg::Request { client: c, owner, seq, call: Call::ReadRelease, ghost: false });
            }
            // An upgrade is asked by a read's guard: a read whose wait ended has none.
            Op::Upgrade if !cl.reads && cl.attempts == 0 => Self::next_op(s, c),
            Op::Acquire | Op::Upgrade | Op::Read | Op::Permit if cl.attempts >= self.attempts => {
                // The wait is over: `leave_queue`, a clean-up nobody awaits.
                let (owner, taken) = (cl.owner, cl.entry.taken());
                cl.entry.forget();
                if cl.holds == 0 && cl.slot.is_none() {
                    Self::send(
                        s,
                        Msg::Request {
                            client: c,
                            owner,
                            seq: 0,
                            call: Call::Cancel { nonce: None, taken },
                            ghost: false,
                        },
                    );
                }
                Self::next_op(s, c);
            }
            Op::Read => {
                if cl.attempts == 0 {
                    cl.owner += 1;
                    cl.reader = cl.owner;
                }
                cl.attempts += 1;
                cl.nonces += 1;
                let (seq, owner) = (cl.nonces, cl.owner);
                cl.pending = Some((seq, Waiting::Read, now));
                Self::send(s, Msg::Request { client: c, owner, seq, call: Call::Read, ghost: false });
            }
            Op::Acquire | Op::Upgrade | Op::Permit => {
                // A permit is never nested; a lock's first attempt of an outermost acquisition
                // starts a new owner.
                let permit = op == Op::Permit;
                if (permit || cl.holds == 0) && cl.attempts == 0 {
                    cl.owner += 1;
                    cl.entry = Entry::new(KEY);
                }
                cl.attempts += 1;
                // A lock or permit handed to this waiter is held at once (`before_attempt`).
                match cl.entry.before(Duration::from_millis(LEASE), true, instant(now)) {
                    Before::Take(fence, left, slot) => {
                        let until = now + left.as_millis() as Ms;
                        s.taken += 1;
                        if permit {
                            Self::granted_permit(s, c, fence, u64::from(slot.unwrap_or(u32::MAX)), until);
                        } else if cl.holds == 0 {
                            Self::granted(s, c, fence, until);
                        } else {
                            cl.holds += 1;
                        }
                        Self::next_op(s, c);
                    }
                    Before::Send { taken } => {
                        cl.nonces += 1;
                        let (seq, owner) = (cl.nonces, cl.owner);
                        let (waiting, call) = if permit {
                            (Waiting::Permit, Call::Permit)
                        } else {
                            let upgrade = (op == Op::Upgrade).then_some(cl.reader);
                            (Waiting::Acquire, Call::Acquire { nonce: seq, upgrade, taken })
                        };
                        cl.pending = Some((seq, waiting, now));
                        Self::send(s, Msg::Request { client: c, owner, seq, call, ghost: false });
                    }
                }
            }
        }
    }

    pub(super) fn answered(&self, s: &mut State, c: usize, seq: u8, reply: &Reply) {
        let now = s.ks.now;
        let cl = &mut s.clients[c];
        let Some((pending, waiting, sent)) = cl.pending.filter(|p| p.0 == seq) else { return };
        cl.pending = None;
        let runs = std::mem::take(&mut cl.runs);
        // The copies of a request whose answer came never run after it: the driver's
        // connection that carried them is gone.
        s.net.retain(|m| !matches!(m, Msg::Request { client, seq, .. } if *client == c && *seq == pending));
        if let Reply::Error(e) = reply {
            Self::broke(&mut s.broken, format!("a script failed: {e}"));
            return;
        }
        let cl = &mut s.clients[c];
        let ok = reply.at(0).int().unwrap_or(-1);
        match waiting {
            Waiting::Acquire if ok == 1 => {
                let fence = reply.at(1).int().unwrap_or(-1) as u64;
                cl.entry.forget();
                if cl.holds == 0 {
                    Self::granted(s, c, fence, sent + LEASE);
                } else {
                    if fence != cl.fence {
                        Self::broke(
                            &mut s.broken,
                            format!("client {c}'s nesting answered fence {fence}, its hold has {}", cl.fence),
                        );
                    }
                    cl.holds += 1;
                    cl.until = cl.until.max(sent + LEASE);
                }
                Self::next_op(s, c);
            }
            Waiting::Permit if ok == 1 => {
                let (fence, slot) =
                    (reply.at(1).int().unwrap_or(-1) as u64, reply.at(2).int().unwrap_or(-1) as u64);
                cl.entry.forget();
                Self::granted_permit(s, c, fence, slot, sent + LEASE);
                Self::next_op(s, c);
            }
            // A refusal that registered: a hand-over to this waiter names its deadline.
            Waiting::Acquire | Waiting::Permit => {
                let deadline = reply.at(2).int().unwrap_or(0);
                if deadline > 0 {
                    cl.entry.refused(deadline, instant(sent), instant(now));
                    cl.registered = true;
                }
            }
            Waiting::Read if ok == 1 => {
                (cl.reads, cl.until) = (true, sent + LEASE);
                Self::next_op(s, c);
            }
            Waiting::Read => cl.registered = true,
            Waiting::PermitRelease => {
                if ok == 0 && cl.until > now && runs < 2 {
                    Self::broke(
                        &mut s.broken,
                        format!("client {c}'s permit was gone before its lease ended"),
                    );
                }
                cl.slot = None;
                cl.entry.released();
                Self::next_op(s, c);
            }
            Waiting::ReadRelease => {
                if ok == 0 && cl.until > now {
                    Self::broke(&mut s.broken, format!("client {c}'s read was gone before its lease ended"));
                }
                s.clients[c].reads = false;
                Self::next_op(s, c);
            }
            Waiting::Release => {
                // A resent release that ran after another client's whole hold answers "not
                // held" (the release mark keeps the last release only): the safe direction.
                if ok == 0 && cl.until > now && runs < 2 {
                    Self::broke(&mut s.broken, format!("client {c}'s hold was gone before its lease ended"));
                }
                cl.holds = if ok == 0 { 0 } else { cl.holds - 1 };
                if cl.holds == 0 {
                    cl.entry.released();
                }
                Self::next_op(s, c);
            }
        }
    }
}
