//! The shipped scripts, run by an embedded Lua 5.1 (the version Redis embeds) against a model
//! [`Keyspace`]: `redis.call` and `redis.pcall` are the keyspace's commands, and values cross
//! between Lua and Redis as Redis converts them (numbers to integers, `nil` replies to `false`,
//! status replies to `{ok = ...}`, a script's `false` to a nil reply).

use std::cell::RefCell;
use std::collections::HashMap;

use mlua::{Function, Lua, MultiValue, Table, Value, Variadic};

use super::keyspace::{Keyspace, Reply};
use crate::call::Lua as Script;

/// Compiled scripts by the address and length of their text, with the text.
type Compiled = RefCell<HashMap<(usize, usize), (String, Function)>>;

thread_local! {
    /// One interpreter per checker thread, with each script compiled once: found by the address
    /// of its text (hashing the text itself cost more than running it), then compared with it
    /// (a model's edited scripts may be freed and another's take their place).
    static LUA: (Lua, Compiled) = (interpreter(), RefCell::new(HashMap::new()));
}

fn interpreter() -> Lua {
    let lua = Lua::new();
    let redis = lua.create_table().expect("a table");
    redis
        .set("call", lua.create_function(|lua, args: Variadic<Value>| call(lua, args, true)).expect("call"))
        .expect("set");
    redis
        .set(
            "pcall",
            lua.create_function(|lua, args: Variadic<Value>| call(lua, args, false)).expect("pcall"),
        )
        .expect("set");
    lua.globals().set("redis", redis).expect("set redis");
    lua
}

/// A Lua argument as Redis takes it: a string, or a number written as an integer when it is one.
fn arg(v: &Value) -> mlua::Result<String> {
    match v {
        Value::String(s) => Ok(s.to_str()?.to_owned()),
        Value::Integer(i) => Ok(i.to_string()),
        Value::Number(n) if n.fract() == 0.0 && n.abs() < 1e17 => Ok(format!("{n:.0}")),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(mlua::Error::RuntimeError(format!(
            "Lua redis lib command arguments must be strings or integers, not {}",
            other.type_name()
        ))),
    }
}

fn call(lua: &Lua, args: Variadic<Value>, raise: bool) -> mlua::Result<Value> {
    let args = args.iter().map(arg).collect::<mlua::Result<Vec<_>>>()?;
    let reply = {
        let mut ks = lua.app_data_mut::<Keyspace>().expect("a keyspace is set while a script runs");
        ks.call(&args)
    };
    match reply {
        Reply::Error(e) if raise => Err(mlua::Error::RuntimeError(e)),
        r => to_lua(lua, &r),
    }
}

fn to_lua(lua: &Lua, r: &Reply) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Nil => Value::Boolean(false),
        Reply::Int(i) => Value::Number(*i as f64),
        Reply::Bulk(s) => Value::String(lua.create_string(s)?),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.set("ok", s.as_str())?;
            Value::Table(t)
        }
        Reply::Error(e) => {
            let t = lua.create_table()?;
            t.set("err", e.as_str())?;
            Value::Table(t)
        }
        Reply::Array(v) => {
            let t = lua.create_table()?;
            for (i, x) in v.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, x)?)?;
            }
            Value::Table(t)
        }
    })
}

fn from_lua(v: &Value) -> Reply {
    match v {
        Value::Nil | Value::Boolean(false) => Reply::Nil,
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(i) => Reply::Int(*i),
        Value::Number(n) => Reply::Int(n.trunc() as i64),
        Value::String(s) => Reply::Bulk(s.to_string_lossy()),
        Value::Table(t) => table_reply(t),
        other => Reply::Error(format!("a script answered a {}", other.type_name())),
    }
}

fn table_reply(t: &Table) -> Reply {
    if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
        return Reply::Error(e.to_string_lossy());
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
        return Reply::Status(s.to_string_lossy());
    }
    let mut out = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => out.push(from_lua(&v)),
        }
    }
    Reply::Array(out)
}

/// Runs `script` as `EVALSHA` would, atomically on `ks`; what it published is in
/// `ks.published`. A script error (a Lua error, or a command's error reply) is the reply's
/// `Error`.
pub(crate) fn run(ks: &mut Keyspace, script: &Script, keys: &[&str], args: &[&str]) -> Reply {
    LUA.with(|(lua, compiled)| {
        let src = script.source();
        let mut compiled = compiled.borrow_mut();
        let slot = compiled
            .entry((src.as_ptr() as usize, src.len()))
            .or_insert_with(|| (String::new(), lua.load("").into_function().expect("empty")));
        if slot.0 != src {
            *slot = (src.to_owned(), lua.load(src).into_function().expect("a shipped script compiles"));
        }
        let f = slot.1.clone();
        drop(compiled);
        let set = |name: &str, items: &[&str]| -> mlua::Result<()> {
            let t = lua.create_table()?;
            for (i, x) in items.iter().enumerate() {
                t.raw_set(i + 1, *x)?;
            }
            lua.globals().set(name, t)
        };
        set("KEYS", keys).expect("KEYS");
        set("ARGV", args).expect("ARGV");
        ks.expire();
        ks.published.clear();
        lua.set_app_data(std::mem::take(ks));
        let out = f.call::<MultiValue>(());
        *ks = lua.remove_app_data::<Keyspace>().expect("the keyspace set above");
        match out {
            Ok(vals) => vals.front().map_or(Reply::Nil, from_lua),
            Err(e) => Reply::Error(e.to_string()),
        }
    })
}
