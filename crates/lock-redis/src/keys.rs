//! Where a lock lives in Redis: key names, hash tags and the release channel.

use crate::options::Mode;

/// Default namespace put in front of every Redis key (the interop modes default to none).
pub const DEFAULT_KEY_PREFIX: &str = "dlock:";

/// The Redis names used for one lock key.
///
/// Native modes: the user key is escaped (`%` → `%25`, `{` → `%7B`, `}` → `%7D`) and wrapped
/// in a hash tag, so every key of one lock hashes to the same cluster slot, keys with braces
/// cannot move the tag, and two different user keys never map to the same names. Interop modes
/// ([`Mode::RedisPy`], [`Mode::PythonRedisLock`]): the name the other library uses, unescaped.
///
/// Every name lives in one buffer (one allocation per lock operation, not six).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyNames {
    /// The names one after another: the lock, fence, queue, waiters, channel and signal.
    buf: String,
    /// Where each name ends in `buf`, in that order (each starts where the previous ends).
    ends: [usize; 6],
}

impl KeyNames {
    fn part(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.buf[start..self.ends[i]]
    }

    /// The lock itself: a string (simple and interop modes) or a hash (reentrant and fair
    /// modes). `<prefix>{<escaped key>}`; `<prefix><key>` for redis-py; `lock:<prefix><key>`
    /// for python-redis-lock.
    pub fn lock(&self) -> &str {
        self.part(0)
    }

    /// The fencing counter: `<lock>:fence`, or `<lock>:dlock-fence` in the interop modes (a
    /// suffix the other side's lock names are unlikely to end with). It expires a day after its
    /// creation and then restarts from the server clock (see `scripts/fence.lua`).
    pub fn fence(&self) -> &str {
        self.part(1)
    }

    /// The FIFO of waiting owner tokens, `<lock>:queue` (empty in the interop modes: no wait set).
    pub fn queue(&self) -> &str {
        self.part(2)
    }

    /// Each waiter's liveness deadline in server milliseconds, `<lock>:waiters` (empty in the
    /// interop modes).
    pub fn waiters(&self) -> &str {
        self.part(3)
    }

    /// The pub/sub channel a release is published on, `<lock>:released`.
    pub fn channel(&self) -> &str {
        self.part(4)
    }

    /// python-redis-lock mode: its signal list `lock-signal:<prefix><key>`, pushed by every
    /// release so its waiters (in `BLPOP`) wake; `None` in the other modes.
    pub fn signal(&self) -> Option<&str> {
        Some(self.part(5)).filter(|s| !s.is_empty())
    }
}

const CHANNEL_SUFFIX: &str = ":released";
/// python-redis-lock's key namespace (`Lock._name = 'lock:' + name`).
const PRL_LOCK: &str = "lock:";
/// python-redis-lock's signal list namespace (`Lock._signal = 'lock-signal:' + name`).
const PRL_SIGNAL: &str = "lock-signal:";

/// How the user key becomes a Redis name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// `<prefix>{<escaped key>}`.
    Native,
    /// `<prefix><key>`, as redis-py's `Lock(r, name)` with `name = prefix + key`.
    RedisPy,
    /// `lock:<prefix><key>`, as python-redis-lock's `Lock(r, name)` with `name = prefix + key`.
    PythonRedisLock,
}

/// Builds [`KeyNames`] for one namespace.
#[derive(Debug, Clone)]
pub(crate) struct KeyLayout {
    prefix: String,
    style: Style,
}

impl KeyLayout {
    /// Whether the names are another library's (the interop modes): their waiters keep no
    /// queue, so a release names no one to wake next.
    pub(crate) fn is_interop(&self) -> bool {
        self.style != Style::Native
    }

    /// The layout of `mode` (native modes: `prefix` without braces, checked by the builder).
    pub(crate) fn for_mode(prefix: String, mode: Mode) -> Self {
        let style = match mode {
            Mode::RedisPy => Style::RedisPy,
            Mode::PythonRedisLock => Style::PythonRedisLock,
            _ => Style::Native,
        };
        KeyLayout { prefix, style }
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn lock(&self, key: &str) -> String {
        let mut s = String::with_capacity(self.prefix.len() + key.len() + 8);
        self.lock_into(key, &mut s);
        s
    }

    fn lock_into(&self, key: &str, s: &mut String) {
        match self.style {
            Style::Native => {
                s.push_str(&self.prefix);
                s.push('{');
                escape_into(key, s);
                s.push('}');
            }
            Style::RedisPy => {
                s.push_str(&self.prefix);
                s.push_str(key);
            }
            Style::PythonRedisLock => {
                s.push_str(PRL_LOCK);
                s.push_str(&self.prefix);
                s.push_str(key);
            }
        }
    }

    pub(crate) fn names(&self, key: &str) -> KeyNames {
        // Room for the lock name five times (escaping at most triples a character) and the
        // suffixes, so the one buffer never grows.
        let lock_max = PRL_LOCK.len() + self.prefix.len() + 3 * key.len() + 2;
        let mut buf =
            String::with_capacity(5 * lock_max + PRL_SIGNAL.len() + self.prefix.len() + key.len() + 48);
        let mut ends = [0; 6];
        let native = self.style == Style::Native;
        let suffixes: [Option<&str>; 4] = if native {
            [Some(":fence"), Some(":queue"), Some(":waiters"), Some(CHANNEL_SUFFIX)]
        } else {
            [Some(":dlock-fence"), None, None, Some(CHANNEL_SUFFIX)]
        };
        self.lock_into(key, &mut buf);
        ends[0] = buf.len();
        for (i, suffix) in suffixes.into_iter().enumerate() {
            if let Some(suffix) = suffix {
                self.lock_into(key, &mut buf);
                buf.push_str(suffix);
            }
            ends[i + 1] = buf.len();
        }
        if self.style == Style::PythonRedisLock {
            buf.push_str(PRL_SIGNAL);
            buf.push_str(&self.prefix);
            buf.push_str(key);
        }
        ends[5] = buf.len();
        KeyNames { buf, ends }
    }

    pub(crate) fn channel(&self, key: &str) -> String {
        let mut s = self.lock(key);
        s.push_str(CHANNEL_SUFFIX);
        s
    }

    /// The inbox channel of one client: where releases that hand a lock to one of its waiters
    /// are published (no braces, so it never looks like a lock's channel).
    pub(crate) fn inbox(&self, id: &str) -> String {
        format!("{}inbox:{id}", self.prefix)
    }

    /// The user key a lock's Redis name belongs to (the inverse of [`lock`](Self::lock)).
    pub(crate) fn key_of_lock(&self, lock: &str) -> Option<String> {
        match self.style {
            Style::Native => {
                let tag = lock.strip_prefix(&self.prefix)?.strip_prefix('{')?.strip_suffix('}')?;
                unescape(tag)
            }
            Style::RedisPy => lock.strip_prefix(&self.prefix).map(str::to_owned),
            Style::PythonRedisLock => {
                lock.strip_prefix(PRL_LOCK)?.strip_prefix(&self.prefix).map(str::to_owned)
            }
        }
    }

    /// A `SCAN MATCH` pattern for the lock names of the keys starting with `prefix` (native
    /// modes only: elsewhere a lock's name cannot be told from other keys).
    pub(crate) fn lock_pattern(&self, prefix: &str) -> Option<String> {
        if self.style != Style::Native {
            return None;
        }
        let mut escaped = String::with_capacity(prefix.len());
        escape_into(prefix, &mut escaped);
        let mut p = String::with_capacity(self.prefix.len() + escaped.len() + 4);
        glob_escape_into(&self.prefix, &mut p);
        p.push('{');
        glob_escape_into(&escaped, &mut p);
        p.push_str("*}");
        Some(p)
    }

    /// The user key a release channel belongs to (the inverse of [`channel`](Self::channel)).
    pub(crate) fn key_of_channel(&self, channel: &str) -> Option<String> {
        self.key_of_lock(channel.strip_suffix(CHANNEL_SUFFIX)?)
    }
}

/// `s` with the characters special to Redis glob patterns escaped.
fn glob_escape_into(s: &str, out: &mut String) {
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
}

fn escape_into(key: &str, out: &mut String) {
    for c in key.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

fn unescape(tag: &str) -> Option<String> {
    let mut out = String::with_capacity(tag.len());
    let mut rest = tag;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3)?;
        out.push(match code {
            "25" => '%',
            "7B" => '{',
            "7D" => '}',
            _ => return None,
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// Entry points for the fuzz targets under `fuzz/` (feature `fuzzing`); not a stable API.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    use super::KeyLayout;
    use crate::options::Mode;

    /// Every Redis name of lock `key` under `prefix` (lock, fence, queue, waiters, channel).
    pub fn names(prefix: &str, key: &str) -> [String; 5] {
        let n = KeyLayout::for_mode(prefix.to_owned(), Mode::Simple).names(key);
        [n.lock(), n.fence(), n.queue(), n.waiters(), n.channel()].map(str::to_owned)
    }

    /// The lock key a pub/sub channel name (as the server sends it) stands for.
    pub fn key_of_channel(prefix: &str, channel: &str) -> Option<String> {
        KeyLayout::for_mode(prefix.to_owned(), Mode::Simple).key_of_channel(channel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_and_percent_are_escaped_and_never_alias() {
        let l = KeyLayout::for_mode(DEFAULT_KEY_PREFIX.to_owned(), Mode::Simple);
        let keys = ["a", "{a}", "%7Ba%7D", "%", "%25", "{", "}", "}{", "a}b{c", "ключ🔒"];
        let mut seen = std::collections::HashSet::new();
        for k in keys {
            let n = l.names(k);
            let tag = &n.lock()[DEFAULT_KEY_PREFIX.len()..];
            assert!(tag.starts_with('{') && tag.ends_with('}'));
            assert!(!tag[1..tag.len() - 1].contains(['{', '}']), "{tag}");
            assert!(seen.insert(n.lock().to_owned()), "{k:?} aliases another key");
            assert_eq!(l.key_of_channel(n.channel()).as_deref(), Some(k));
            assert_eq!(l.key_of_lock(n.lock()).as_deref(), Some(k));
            for derived in [n.fence(), n.queue(), n.waiters()] {
                assert!(derived.starts_with(n.lock()));
            }
        }
    }

    #[test]
    fn interop_names_are_the_other_librarys() {
        let py = KeyLayout::for_mode(String::new(), Mode::RedisPy).names("jobs:{1}%");
        assert_eq!(
            (py.lock(), py.fence(), py.queue(), py.waiters(), py.channel(), py.signal()),
            ("jobs:{1}%", "jobs:{1}%:dlock-fence", "", "", "jobs:{1}%:released", None)
        );
        let prl = KeyLayout::for_mode("app:".to_owned(), Mode::PythonRedisLock);
        let n = prl.names("job");
        assert_eq!(n.lock(), "lock:app:job");
        assert_eq!(n.signal(), Some("lock-signal:app:job"));
        assert_eq!((n.fence(), n.channel()), ("lock:app:job:dlock-fence", "lock:app:job:released"));
        let native = KeyLayout::for_mode("p:".to_owned(), Mode::Simple).names("a%");
        let parts = (native.lock(), native.fence(), native.queue(), native.waiters(), native.channel());
        assert_eq!(
            parts,
            ("p:{a%25}", "p:{a%25}:fence", "p:{a%25}:queue", "p:{a%25}:waiters", "p:{a%25}:released")
        );
        assert_eq!(native.signal(), None);
        for (l, k) in [(&prl, "job"), (&KeyLayout::for_mode("p:".to_owned(), Mode::RedisPy), "a:released")] {
            assert_eq!(l.key_of_channel(&l.channel(k)).as_deref(), Some(k));
            assert_eq!(l.key_of_lock(&l.lock(k)).as_deref(), Some(k));
        }
        assert_eq!(prl.key_of_channel("lock:other:job:released"), None);
    }

    #[test]
    fn foreign_channels_are_ignored() {
        let l = KeyLayout::for_mode("ns:".to_owned(), Mode::Simple);
        assert_eq!(l.key_of_channel("other:{a}:released"), None);
        assert_eq!(l.key_of_channel("ns:{a%zz}:released"), None);
        assert_eq!(l.key_of_channel("ns:{a}"), None);
    }
}
