//! A model Redis keyspace: the commands the shipped scripts call, with the replies Redis gives
//! them, on a clock the model moves. Only what the scripts use is here (`commands_used` in
//! `mod.rs` fails when a script calls anything else). A state of it is a value: hashed and
//! compared by the checker, so expired keys go at once (`expire`), never lazily.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A reply, as Redis gives it to a script (and the script's own answer, converted back).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Reply {
    Nil,
    Int(i64),
    Bulk(String),
    Status(String),
    Array(Vec<Reply>),
    Error(String),
}

impl Reply {
    /// The integer an answer's element stands for (a script's numbers arrive as integers).
    pub(crate) fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            Reply::Bulk(s) => s.parse().ok(),
            _ => None,
        }
    }

    pub(crate) fn at(&self, i: usize) -> Reply {
        match self {
            Reply::Array(v) => v.get(i).cloned().unwrap_or(Reply::Nil),
            _ => Reply::Nil,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Value {
    Str(String),
    Hash(BTreeMap<String, String>),
    /// Member -> score; the scripts' scores are whole milliseconds.
    ZSet(BTreeMap<String, i64>),
    List(VecDeque<String>),
    Set(BTreeSet<String>),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Entry {
    value: Value,
    /// Server milliseconds when the key goes; none for a key without expiry.
    expires: Option<u64>,
}

/// The keyspace, the server clock and who listens on which channel.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Keyspace {
    keys: BTreeMap<String, Entry>,
    /// Server milliseconds (TIME).
    pub(crate) now: u64,
    /// Channels something subscribes to (PUBSUB NUMSUB).
    pub(crate) subscribed: BTreeSet<String>,
    /// Messages published by the script running now, in order.
    pub(crate) published: Vec<(String, String)>,
}

fn err(msg: &str) -> Reply {
    Reply::Error(format!("ERR {msg}"))
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn int_arg(s: &str) -> Result<i64, Reply> {
    s.parse().map_err(|_| err("value is not an integer or out of range"))
}

/// A score bound of ZRANGEBYSCORE and ZREMRANGEBYSCORE: `(x` exclusive, `-inf`, `+inf`.
fn bound(s: &str) -> Result<(i64, bool), Reply> {
    match s {
        "-inf" => Ok((i64::MIN, false)),
        "+inf" | "inf" => Ok((i64::MAX, false)),
        _ => match s.strip_prefix('(') {
            Some(x) => Ok((int_arg(x)?, true)),
            None => Ok((int_arg(s)?, false)),
        },
    }
}

fn in_range(score: i64, (min, min_open): (i64, bool), (max, max_open): (i64, bool)) -> bool {
    (if min_open { score > min } else { score >= min }) && (if max_open { score < max } else { score <= max })
}

/// Redis's rank range: negative counts from the end; `None` when empty.
fn ranks(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let s = if start < 0 { (len + start).max(0) } else { start };
    let e = if stop < 0 { len + stop } else { stop.min(len - 1) };
    (s <= e && s < len).then_some((s as usize, e as usize))
}

macro_rules! typed {
    ($self:ident, $key:expr, $variant:ident, $default:expr) => {
        match $self.keys.get_mut($key) {
            Some(Entry { value: Value::$variant(v), .. }) => v,
            Some(_) => return Reply::Error(WRONGTYPE.into()),
            None => {
                $self.keys.insert($key.to_owned(), Entry { value: Value::$variant($default), expires: None });
                match &mut $self.keys.get_mut($key).expect("just inserted").value {
                    Value::$variant(v) => v,
                    _ => unreachable!("just inserted"),
                }
            }
        }
    };
}

mod collections;

impl Keyspace {
    pub(crate) fn new(now: u64) -> Self {
        Keyspace { now, ..Keyspace::default() }
    }

    /// Drops every key whose time has come.
    pub(crate) fn expire(&mut self) {
        let now = self.now;
        self.keys.retain(|_, e| e.expires.is_none_or(|t| t > now));
    }

    /// The string value of `key`, if it has one (the model's clients and checks read it).
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        match self.keys.get(key) {
            Some(Entry { value: Value::Str(s), .. }) => Some(s),
            _ => None,
        }
    }

    /// A field of the hash `key`.
    pub(crate) fn hget(&self, key: &str, field: &str) -> Option<&str> {
        match self.keys.get(key) {
            Some(Entry { value: Value::Hash(h), .. }) => h.get(field).map(String::as_str),
            _ => None,
        }
    }

    /// The fields of the hash `key` (none for another type or no key).
    pub(crate) fn fields(&self, key: &str) -> Vec<&str> {
        match self.keys.get(key) {
            Some(Entry { value: Value::Hash(h), .. }) => h.keys().map(String::as_str).collect(),
            _ => Vec::new(),
        }
    }

    /// A member's score in the sorted set `key`.
    pub(crate) fn zscore(&self, key: &str, member: &str) -> Option<i64> {
        match self.keys.get(key) {
            Some(Entry { value: Value::ZSet(z), .. }) => z.get(member).copied(),
            _ => None,
        }
    }

    pub(crate) fn exists(&self, key: &str) -> bool {
        self.keys.contains_key(key)
    }

    /// A key's remaining milliseconds (PTTL).
    pub(crate) fn pttl(&self, key: &str) -> i64 {
        match self.keys.get(key) {
            None => -2,
            Some(Entry { expires: None, .. }) => -1,
            Some(Entry { expires: Some(t), .. }) => (*t - self.now) as i64,
        }
    }

    fn drop_if_empty(&mut self, key: &str) {
        let empty = match self.keys.get(key).map(|e| &e.value) {
            Some(Value::Hash(h)) => h.is_empty(),
            Some(Value::ZSet(z)) => z.is_empty(),
            Some(Value::List(l)) => l.is_empty(),
            Some(Value::Set(s)) => s.is_empty(),
            _ => false,
        };
        if empty {
            self.keys.remove(key);
        }
    }

    /// One command, as `redis.call` runs it.
    pub(crate) fn call(&mut self, args: &[String]) -> Reply {
        let Some((name, a)) = args.split_first() else { return err("empty command") };
        let r = self.command(&name.to_ascii_uppercase(), a);
        if let Some(key) = a.first() {
            self.drop_if_empty(key);
        }
        r
    }

    fn command(&mut self, name: &str, a: &[String]) -> Reply {
        let arity = |n: usize| a.len() >= n;
        match name {
            "TIME" => Reply::Array(vec![
                Reply::Bulk((self.now / 1000).to_string()),
                Reply::Bulk((self.now % 1000 * 1000).to_string()),
            ]),
            "PUBLISH" | "SPUBLISH" if arity(2) => {
                self.published.push((a[0].clone(), a[1].clone()));
                Reply::Int(i64::from(self.subscribed.contains(&a[0])))
            }
            "PUBSUB" if arity(2) && a[0].eq_ignore_ascii_case("NUMSUB") => {
                let mut out = Vec::new();
                for ch in &a[1..] {
                    out.push(Reply::Bulk(ch.clone()));
                    out.push(Reply::Int(i64::from(self.subscribed.contains(ch))));
                }
                Reply::Array(out)
            }
            _ if a.is_empty() => err("wrong number of arguments"),
            _ => self.keyed(name, &a[0], &a[1..]),
        }
    }

    fn keyed(&mut self, name: &str, key: &str, a: &[String]) -> Reply {
        let now = self.now;
        match name {
            "GET" => match self.keys.get(key) {
                None => Reply::Nil,
                Some(Entry { value: Value::Str(s), .. }) => Reply::Bulk(s.clone()),
                Some(_) => Reply::Error(WRONGTYPE.into()),
            },
            "SET" => self.set(key, a),
            "DEL" => {
                let mut n = i64::from(self.keys.remove(key).is_some());
                for k in a {
                    n += i64::from(self.keys.remove(k).is_some());
                }
                Reply::Int(n)
            }
            "EXISTS" => {
                let mut n = i64::from(self.keys.contains_key(key));
                for k in a {
                    n += i64::from(self.keys.contains_key(k));
                }
                Reply::Int(n)
            }
            "PTTL" => Reply::Int(self.pttl(key)),
            "PEXPIRE" => {
                let Some(ms) = a.first() else { return err("wrong number of arguments") };
                let ms = match int_arg(ms) {
                    Ok(ms) => ms,
                    Err(e) => return e,
                };
                match self.keys.get_mut(key) {
                    None => Reply::Int(0),
                    Some(_) if ms <= 0 => {
                        self.keys.remove(key);
                        Reply::Int(1)
                    }
                    Some(e) => {
                        e.expires = Some(now + ms as u64);
                        Reply::Int(1)
                    }
                }
            }
            "TYPE" => Reply::Status(
                match self.keys.get(key).map(|e| &e.value) {
                    None => "none",
                    Some(Value::Str(_)) => "string",
                    Some(Value::Hash(_)) => "hash",
                    Some(Value::ZSet(_)) => "zset",
                    Some(Value::List(_)) => "list",
                    Some(Value::Set(_)) => "set",
                }
                .into(),
            ),
            "INCR" => {
                let e = self
                    .keys
                    .entry(key.to_owned())
                    .or_insert(Entry { value: Value::Str("0".into()), expires: None });
                let Value::Str(s) = &mut e.value else { return Reply::Error(WRONGTYPE.into()) };
                let Ok(n) = s.parse::<i64>() else { return err("value is not an integer or out of range") };
                *s = (n + 1).to_string();
                Reply::Int(n + 1)
            }
            _ => self.collection(name, key, a),
        }
    }

    fn set(&mut self, key: &str, a: &[String]) -> Reply {
        let Some(value) = a.first() else { return err("wrong number of arguments") };
        let (mut nx, mut keep, mut px) = (false, false, None);
        let mut i = 1;
        while i < a.len() {
            match a[i].to_ascii_uppercase().as_str() {
                "NX" => nx = true,
                "KEEPTTL" => keep = true,
                "PX" if i + 1 < a.len() => {
                    i += 1;
                    match int_arg(&a[i]) {
                        Ok(ms) if ms > 0 => px = Some(ms as u64),
                        Ok(_) => return err("invalid expire time in 'set' command"),
                        Err(e) => return e,
                    }
                }
                _ => return err("syntax error"),
            }
            i += 1;
        }
        if nx && self.keys.contains_key(key) {
            return Reply::Nil;
        }
        let kept = if keep { self.keys.get(key).and_then(|e| e.expires) } else { None };
        let expires = px.map(|ms| self.now + ms).or(kept);
        self.keys.insert(key.to_owned(), Entry { value: Value::Str(value.clone()), expires });
        Reply::Status("OK".into())
    }
}
