//! The server's side: a request run as the backend builds it, and a message delivered.

use super::*;

impl Protocol {
    /// Runs one request on the server, as the backend builds it.
    pub(super) fn serve(&self, ks: &mut Keyspace, c: usize, owner: u8, call: &Call) -> Reply {
        let n = &self.names;
        let owner = owner_token(c, owner);
        let (lease, claim, wait) = (LEASE.to_string(), CLAIM.to_string(), WAIT.to_string());
        match call {
            Call::Acquire { nonce: k, upgrade, taken } => {
                let (nonce, tag, taken) = (nonce(c, *k), self.tag(c), opt(*taken));
                let except = upgrade.map(|r| owner_token(c, r)).unwrap_or_default();
                // The keys and arguments `acquire_simple` / `acquire_hash` send, per mode.
                let value = owner.clone() + &nonce;
                let (keys, args): ([&str; 4], Vec<&str>) = match self.mode {
                    Mode::Simple => (
                        [n.lock(), n.fence(), n.waiters(), n.queue()],
                        vec![&value, &lease, &owner, &wait, &tag, &taken, &except],
                    ),
                    Mode::Fair => (
                        [n.lock(), n.fence(), n.queue(), n.waiters()],
                        vec![&owner, &lease, &nonce, &wait, n.channel(), &claim, &tag, &taken, &except],
                    ),
                    _ => (
                        [n.lock(), n.fence(), n.waiters(), n.queue()],
                        vec![&owner, &lease, &nonce, &wait, &tag, &taken, &except],
                    ),
                };
                lua::run(ks, &self.scripts.acquire, &keys, &args)
            }
            Call::Release { nonce: k } => {
                let release = nonce(c, *k);
                let keys = match self.mode {
                    Mode::Simple => [n.lock(), n.waiters(), n.queue(), n.fence()],
                    _ => [n.lock(), n.queue(), n.waiters(), n.fence()],
                };
                lua::run(ks, &self.scripts.release, &keys, &[&owner, n.channel(), &claim, &release])
            }
            Call::Read => {
                let tag = self.tag(c);
                let args = [&owner, &lease, &wait, "0", &tag].map(|s| s as &str);
                lua::run(ks, &self.scripts.read, &[n.lock(), n.waiters(), n.fence()], &args)
            }
            Call::Permit => {
                let (tag, permits) = (self.tag(c), self.permits.to_string());
                let args = [&owner, &lease, &wait, &permits, &tag].map(|s| s as &str);
                lua::run(ks, &self.scripts.read, &[n.lock(), n.waiters(), n.fence()], &args)
            }
            Call::ReadRelease => {
                let hash = if self.mode == Mode::Simple { "0" } else { "1" };
                let keys = [n.lock(), n.queue(), n.waiters(), n.fence()];
                lua::run(ks, &self.scripts.read_release, &keys, &[&owner, n.channel(), &claim, hash])
            }
            Call::Cancel { nonce: k, taken } => {
                // An attempt's undo names no waiter; the end of a wait names this client's.
                let (k, tag) = match k {
                    Some(k) if self.undo_names_waiter => (nonce(c, *k), self.tag(c)),
                    Some(k) => (nonce(c, *k), String::new()),
                    None => (String::new(), self.tag(c)),
                };
                let keys = match self.mode {
                    Mode::Simple => [n.lock(), n.waiters(), n.queue(), n.fence()],
                    _ => [n.lock(), n.queue(), n.waiters(), n.fence()],
                };
                lua::run(
                    ks,
                    &self.scripts.cancel,
                    &keys,
                    &[&owner, &k, n.channel(), &claim, &tag, &opt(*taken)],
                )
            }
        }
    }

    pub(super) fn deliver(&self, s: &mut State, m: Msg) {
        match m {
            Msg::Request { client, owner, seq, call, ghost } => {
                if s.clients[client].pending.is_some_and(|p| p.0 == seq) {
                    s.clients[client].runs += 1;
                }
                // Phase-fairness: a write's release lets the readers waiting for it in before
                // any other writer holds.
                let readers =
                    if matches!(call, Call::Release { .. }) { self.waiting_readers(s) } else { vec![] };
                let reply = self.serve(&mut s.ks, client, owner, &call);
                let reads = format!("{}:s", self.names.lock());
                if s.ks.exists(self.names.lock()) && readers.iter().any(|r| s.ks.hget(&reads, r).is_none()) {
                    Self::broke(
                        &mut s.broken,
                        "a write's release handed the lock to a writer before the readers that waited".into(),
                    );
                }
                for (channel, payload) in std::mem::take(&mut s.ks.published) {
                    if let Some(to) =
                        (0..s.clients.len()).find(|c| self.layout.inbox(&client_id(*c)) == channel)
                    {
                        Self::send(s, Msg::Handed { client: to, payload });
                    }
                }
                if ghost && reply.at(0).int() == Some(1) {
                    s.clients[client].unheard = Some(owner);
                }
                if seq > 0 && !ghost {
                    Self::send(s, Msg::Answer { client, seq, reply });
                } else if let Reply::Error(e) = reply {
                    Self::broke(&mut s.broken, format!("a clean-up failed: {e}"));
                }
            }
            Msg::Answer { client, seq, reply } => self.answered(s, client, seq, &reply),
            Msg::Handed { client, payload } => {
                let now = s.ks.now;
                let cl = &mut s.clients[client];
                if let Some((owner, handed, _)) = handoffs::parse(&payload)
                    && owner.to_string() == owner_token(client, cl.owner)
                {
                    cl.entry.handed(handed, instant(now));
                }
            }
        }
    }
}
