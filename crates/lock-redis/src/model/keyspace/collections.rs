//! The commands on hashes, sorted sets, lists and sets.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::*;

impl Keyspace {
    pub(super) fn collection(&mut self, name: &str, key: &str, a: &[String]) -> Reply {
        match name {
            "HGET" | "HEXISTS" | "HGETALL" | "HLEN" | "HKEYS" => self.hash_read(name, key, a),
            "HSET" => {
                if a.len() < 2 || !a.len().is_multiple_of(2) {
                    return err("wrong number of arguments for 'hset' command");
                }
                let h = typed!(self, key, Hash, BTreeMap::new());
                let mut added = 0;
                for pair in a.chunks(2) {
                    added += i64::from(h.insert(pair[0].clone(), pair[1].clone()).is_none());
                }
                Reply::Int(added)
            }
            "HDEL" => {
                let h = typed!(self, key, Hash, BTreeMap::new());
                Reply::Int(a.iter().filter(|f| h.remove(*f).is_some()).count() as i64)
            }
            "HINCRBY" if a.len() == 2 => {
                let by = match int_arg(&a[1]) {
                    Ok(n) => n,
                    Err(e) => return e,
                };
                let h = typed!(self, key, Hash, BTreeMap::new());
                let old = match h.get(&a[0]).map(|v| v.parse::<i64>()) {
                    None => 0,
                    Some(Ok(n)) => n,
                    Some(Err(_)) => return err("hash value is not an integer"),
                };
                h.insert(a[0].clone(), (old + by).to_string());
                Reply::Int(old + by)
            }
            "ZADD" | "ZREM" | "ZSCORE" | "ZMSCORE" | "ZRANGE" | "ZRANGEBYSCORE" | "ZREMRANGEBYSCORE"
            | "ZREMRANGEBYRANK" => self.zset(name, key, a),
            "LPOP" | "RPUSH" | "LPUSH" | "LREM" | "LINDEX" | "LLEN" => self.list(name, key, a),
            "SADD" => {
                let s = typed!(self, key, Set, BTreeSet::new());
                Reply::Int(a.iter().filter(|m| s.insert((*m).clone())).count() as i64)
            }
            "SCARD" => match self.keys.get(key).map(|e| &e.value) {
                None => Reply::Int(0),
                Some(Value::Set(s)) => Reply::Int(s.len() as i64),
                Some(_) => Reply::Error(WRONGTYPE.into()),
            },
            _ => err(&format!("the model has no command '{name}' with {} arguments", a.len() + 1)),
        }
    }

    pub(super) fn hash_read(&self, name: &str, key: &str, a: &[String]) -> Reply {
        let empty = BTreeMap::new();
        let h = match self.keys.get(key).map(|e| &e.value) {
            None => &empty,
            Some(Value::Hash(h)) => h,
            Some(_) => return Reply::Error(WRONGTYPE.into()),
        };
        let field = a.first().map(String::as_str).unwrap_or_default();
        match name {
            "HGET" => h.get(field).map_or(Reply::Nil, |v| Reply::Bulk(v.clone())),
            "HEXISTS" => Reply::Int(i64::from(h.contains_key(field))),
            "HLEN" => Reply::Int(h.len() as i64),
            "HKEYS" => Reply::Array(h.keys().map(|k| Reply::Bulk(k.clone())).collect()),
            _ => Reply::Array(
                h.iter().flat_map(|(k, v)| [Reply::Bulk(k.clone()), Reply::Bulk(v.clone())]).collect(),
            ),
        }
    }

    pub(super) fn zset(&mut self, name: &str, key: &str, a: &[String]) -> Reply {
        let z = typed!(self, key, ZSet, BTreeMap::new());
        let ordered = |z: &BTreeMap<String, i64>| {
            let mut v: Vec<(i64, String)> = z.iter().map(|(m, s)| (*s, m.clone())).collect();
            v.sort();
            v
        };
        let args = (|| -> Result<Reply, Reply> {
            Ok(match name {
                "ZADD" => {
                    if a.len() < 2 || !a.len().is_multiple_of(2) {
                        return Err(err("syntax error"));
                    }
                    let mut added = 0;
                    for pair in a.chunks(2) {
                        added += i64::from(z.insert(pair[1].clone(), int_arg(&pair[0])?).is_none());
                    }
                    Reply::Int(added)
                }
                "ZREM" => Reply::Int(a.iter().filter(|m| z.remove(*m).is_some()).count() as i64),
                "ZSCORE" => z
                    .get(a.first().ok_or_else(|| err("arity"))?)
                    .map_or(Reply::Nil, |s| Reply::Bulk(s.to_string())),
                "ZMSCORE" => Reply::Array(
                    a.iter().map(|m| z.get(m).map_or(Reply::Nil, |s| Reply::Bulk(s.to_string()))).collect(),
                ),
                "ZRANGE" if a.len() >= 2 => {
                    let v = ordered(z);
                    let scores = a.get(2).is_some_and(|w| w.eq_ignore_ascii_case("WITHSCORES"));
                    let mut out = Vec::new();
                    if let Some((s, e)) = ranks(int_arg(&a[0])?, int_arg(&a[1])?, v.len()) {
                        for (score, m) in &v[s..=e] {
                            out.push(Reply::Bulk(m.clone()));
                            if scores {
                                out.push(Reply::Bulk(score.to_string()));
                            }
                        }
                    }
                    Reply::Array(out)
                }
                "ZRANGEBYSCORE" if a.len() >= 2 => {
                    let (min, max) = (bound(&a[0])?, bound(&a[1])?);
                    let (mut scores, mut offset, mut count) = (false, 0usize, usize::MAX);
                    let mut i = 2;
                    while i < a.len() {
                        if a[i].eq_ignore_ascii_case("WITHSCORES") {
                            scores = true;
                        } else if a[i].eq_ignore_ascii_case("LIMIT") && i + 2 < a.len() {
                            offset = int_arg(&a[i + 1])? as usize;
                            count = int_arg(&a[i + 2])? as usize;
                            i += 2;
                        } else {
                            return Err(err("syntax error"));
                        }
                        i += 1;
                    }
                    let mut out = Vec::new();
                    for (score, m) in ordered(z)
                        .into_iter()
                        .filter(|(s, _)| in_range(*s, min, max))
                        .skip(offset)
                        .take(count)
                    {
                        out.push(Reply::Bulk(m));
                        if scores {
                            out.push(Reply::Bulk(score.to_string()));
                        }
                    }
                    Reply::Array(out)
                }
                "ZREMRANGEBYSCORE" if a.len() == 2 => {
                    let (min, max) = (bound(&a[0])?, bound(&a[1])?);
                    let before = z.len();
                    z.retain(|_, s| !in_range(*s, min, max));
                    Reply::Int((before - z.len()) as i64)
                }
                "ZREMRANGEBYRANK" if a.len() == 2 => {
                    let v = ordered(z);
                    let mut n = 0;
                    if let Some((s, e)) = ranks(int_arg(&a[0])?, int_arg(&a[1])?, v.len()) {
                        for (_, m) in &v[s..=e] {
                            z.remove(m);
                            n += 1;
                        }
                    }
                    Reply::Int(n)
                }
                _ => return Err(err("wrong number of arguments")),
            })
        })();
        args.unwrap_or_else(|e| e)
    }

    pub(super) fn list(&mut self, name: &str, key: &str, a: &[String]) -> Reply {
        let l = typed!(self, key, List, VecDeque::new());
        match name {
            "LPOP" => l.pop_front().map_or(Reply::Nil, Reply::Bulk),
            "RPUSH" => {
                l.extend(a.iter().cloned());
                Reply::Int(l.len() as i64)
            }
            "LPUSH" => {
                for v in a {
                    l.push_front(v.clone());
                }
                Reply::Int(l.len() as i64)
            }
            "LLEN" => Reply::Int(l.len() as i64),
            "LINDEX" => match a.first().map(|i| int_arg(i)) {
                Some(Ok(i)) => {
                    let i = if i < 0 { l.len() as i64 + i } else { i };
                    usize::try_from(i)
                        .ok()
                        .and_then(|i| l.get(i))
                        .map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))
                }
                Some(Err(e)) => e,
                None => err("wrong number of arguments"),
            },
            // LREM key 0 value: every copy (the scripts use no other count).
            _ if a.len() == 2 && a[0] == "0" => {
                let before = l.len();
                l.retain(|v| *v != a[1]);
                Reply::Int((before - l.len()) as i64)
            }
            _ => err("the model's LREM takes a count of 0 only"),
        }
    }
}
