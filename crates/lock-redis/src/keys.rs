//! Where a lock lives in Redis: key names, hash tags and the release channel.

/// Default namespace put in front of every Redis key.
pub const DEFAULT_KEY_PREFIX: &str = "dlock:";

/// The Redis names used for one lock key.
///
/// The user key is escaped (`%` → `%25`, `{` → `%7B`, `}` → `%7D`) and wrapped in a hash tag,
/// so every key of one lock hashes to the same cluster slot, keys with braces cannot move the
/// tag, and two different user keys never map to the same names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyNames {
    /// The lock itself: a string (simple mode) or a hash (reentrant and fair modes),
    /// `<prefix>{<escaped key>}`.
    pub lock: String,
    /// The fencing counter, `<lock>:fence`. It expires a day after its creation and then
    /// restarts from the server clock (see `scripts/fence.lua`).
    pub fence: String,
    /// Fair mode: the FIFO of waiting owner tokens, `<lock>:queue`.
    pub queue: String,
    /// Fair mode: each waiter's liveness deadline in server milliseconds, `<lock>:waiters`.
    pub waiters: String,
    /// The pub/sub channel a release is published on, `<lock>:released`.
    pub channel: String,
}

const CHANNEL_SUFFIX: &str = ":released";

/// Builds [`KeyNames`] for one namespace.
#[derive(Debug, Clone)]
pub(crate) struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    /// `prefix` must not contain `{` or `}` (checked by the builder).
    pub(crate) fn new(prefix: String) -> Self {
        KeyLayout { prefix }
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn lock(&self, key: &str) -> String {
        let mut s = String::with_capacity(self.prefix.len() + key.len() + 8);
        s.push_str(&self.prefix);
        s.push('{');
        escape_into(key, &mut s);
        s.push('}');
        s
    }

    pub(crate) fn names(&self, key: &str) -> KeyNames {
        let lock = self.lock(key);
        KeyNames {
            fence: format!("{lock}:fence"),
            queue: format!("{lock}:queue"),
            waiters: format!("{lock}:waiters"),
            channel: format!("{lock}{CHANNEL_SUFFIX}"),
            lock,
        }
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
        let tag = lock.strip_prefix(&self.prefix)?.strip_prefix('{')?.strip_suffix('}')?;
        unescape(tag)
    }

    /// The user key a release channel belongs to (the inverse of [`channel`](Self::channel)).
    pub(crate) fn key_of_channel(&self, channel: &str) -> Option<String> {
        let tag = channel.strip_prefix(&self.prefix)?.strip_prefix('{')?.strip_suffix(CHANNEL_SUFFIX)?;
        unescape(tag.strip_suffix('}')?)
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

    /// Every Redis name of lock `key` under `prefix` (lock, fence, queue, waiters, channel).
    pub fn names(prefix: &str, key: &str) -> [String; 5] {
        let n = KeyLayout::new(prefix.to_owned()).names(key);
        [n.lock, n.fence, n.queue, n.waiters, n.channel]
    }

    /// The lock key a pub/sub channel name (as the server sends it) stands for.
    pub fn key_of_channel(prefix: &str, channel: &str) -> Option<String> {
        KeyLayout::new(prefix.to_owned()).key_of_channel(channel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_and_percent_are_escaped_and_never_alias() {
        let l = KeyLayout::new(DEFAULT_KEY_PREFIX.to_owned());
        let keys = ["a", "{a}", "%7Ba%7D", "%", "%25", "{", "}", "}{", "a}b{c", "ключ🔒"];
        let mut seen = std::collections::HashSet::new();
        for k in keys {
            let n = l.names(k);
            let tag = &n.lock[DEFAULT_KEY_PREFIX.len()..];
            assert!(tag.starts_with('{') && tag.ends_with('}'));
            assert!(!tag[1..tag.len() - 1].contains(['{', '}']), "{tag}");
            assert!(seen.insert(n.lock.clone()), "{k:?} aliases another key");
            assert_eq!(l.key_of_channel(&n.channel).as_deref(), Some(k));
            assert_eq!(l.key_of_lock(&n.lock).as_deref(), Some(k));
            for derived in [&n.fence, &n.queue, &n.waiters] {
                assert!(derived.starts_with(&n.lock));
            }
        }
    }

    #[test]
    fn foreign_channels_are_ignored() {
        let l = KeyLayout::new("ns:".to_owned());
        assert_eq!(l.key_of_channel("other:{a}:released"), None);
        assert_eq!(l.key_of_channel("ns:{a%zz}:released"), None);
        assert_eq!(l.key_of_channel("ns:{a}"), None);
    }
}
