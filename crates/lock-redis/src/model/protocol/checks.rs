//! What the properties look at, and the words a trace is written in.

use std::fmt::Write as _;

use super::*;

impl Protocol {
    /// Whether client `c` may act as the holder: a hold within its lease, and no release of it
    /// on its way (a release takes the guard: nothing is done under it after that).
    pub(super) fn believes(&self, s: &State, c: usize) -> bool {
        let cl = &s.clients[c];
        let releasing = matches!(
            cl.pending,
            Some((_, Waiting::Release | Waiting::ReadRelease | Waiting::PermitRelease, _))
        );
        (cl.holds > 0 || cl.reads || cl.slot.is_some()) && cl.until > s.ks.now && !releasing
    }

    /// The readers waiting for a write's release: clients in a read whose refused attempt
    /// registered them, still registered on the server (a live deadline).
    pub(super) fn waiting_readers(&self, s: &State) -> Vec<String> {
        let rq = format!("{}:rq", self.names.lock());
        (0..s.clients.len())
            .filter(|c| {
                let cl = &s.clients[*c];
                self.programs[*c].get(cl.pc) == Some(&Op::Read) && cl.registered
            })
            .map(|c| owner_token(c, s.clients[c].owner))
            .filter(|o| s.ks.zscore(&rq, o).is_some_and(|d| d > s.ks.now as i64))
            .collect()
    }

    /// Every client is done and nothing is on its way to the server.
    pub(super) fn settled(&self, s: &State) -> bool {
        s.clients.iter().enumerate().all(|(c, cl)| cl.pc == self.programs[c].len() && cl.pending.is_none())
            && s.net.iter().all(|m| !matches!(m, Msg::Request { .. }))
    }

    /// The lock, a read or a permit (a live shared hold) is held on the server.
    pub(super) fn held(&self, s: &State) -> bool {
        s.ks.exists(self.names.lock()) || !self.shared_holders(s).is_empty()
    }

    /// The owners of live shared holds (reads, permits, and permits handed and not claimed).
    fn shared_holders(&self, s: &State) -> Vec<String> {
        let shared = format!("{}:s", self.names.lock());
        let live = |o: &String| {
            s.ks.hget(&shared, o).and_then(|d| d.parse::<u64>().ok()).is_some_and(|d| d > s.ks.now)
        };
        s.ks.fields(&shared).into_iter().map(str::to_owned).filter(live).collect()
    }

    /// Whether a lock still held once every client is done is the known delay, not a wedge,
    /// found by this model and open (docs/PROOF.md), the orphaned hold: the first send of a resent attempt ran
    /// after the resend and took the lock (a hand-over the resend was refused before) with the
    /// attempt's own nonce and lease; the client heard the refusal, so nobody releases that
    /// hold before its lease ends (in the hash modes the acquisition's next attempt nests on
    /// it, and its release leaves one count). Its client heard no answer of that grant
    /// (`Client::unheard`).
    pub(super) fn orphaned(&self, s: &State) -> bool {
        let lock = self.names.lock();
        let mut holders: Vec<String> = match self.mode {
            Mode::Simple => s.ks.get(lock).and_then(|v| v.get(..32)).map(str::to_owned).into_iter().collect(),
            _ => s.ks.fields(lock).into_iter().filter(|f| f.len() == 32).map(str::to_owned).collect(),
        };
        holders.extend(self.shared_holders(s));
        // Each granted to a copy whose answer its client never heard.
        !holders.is_empty()
            && holders.iter().all(|h| {
                s.clients
                    .iter()
                    .enumerate()
                    .any(|(c, cl)| cl.unheard.is_some_and(|o| owner_token(c, o) == *h))
            })
    }

    /// What went wrong in `s`, if anything.
    pub(crate) fn broken(&self, s: &State) -> Option<String> {
        s.broken.clone()
    }

    /// An action taken in `s`, in words, for traces.
    pub(crate) fn explain(&self, s: &State, a: &Action) -> String {
        let msg = |i: &usize| s.net.get(*i).map(|m| format!("{m:?}")).unwrap_or_default();
        match a {
            Action::Tick => format!("{STEP} ms pass"),
            Action::Step(c) => {
                let cl = &s.clients[*c];
                match self.programs[*c].get(cl.pc) {
                    Some(Op::Acquire | Op::Upgrade | Op::Permit) if cl.entry.has_hand_over() => {
                        format!(
                            "client {c} acquires: a hand-over heard, taken without a round trip if its window allows"
                        )
                    }
                    Some(op) => format!("client {c} steps: {op:?} (attempt {})", cl.attempts + 1),
                    None => format!("client {c} is done"),
                }
            }
            Action::GiveUp(c) => format!("client {c} gives its pending request up (time-out)"),
            Action::Deliver(i) => format!("deliver {}", msg(i)),
            Action::Duplicate(i) => format!("the driver sends {} again", msg(i)),
        }
    }

    /// A one-line account of a state, for traces.
    pub(crate) fn describe(&self, s: &State) -> String {
        let mut out = format!("t+{}ms", s.ks.now - START);
        for (c, cl) in s.clients.iter().enumerate() {
            let _ = write!(out, " | c{c}: op {} holds {} fence {}", cl.pc, cl.holds, cl.fence);
            if let Some(slot) = cl.slot {
                let _ = write!(out, " permit {slot}");
            }
        }
        let _ = write!(out, " | lock {}", if s.ks.exists(self.names.lock()) { "held" } else { "free" });
        out
    }
}
