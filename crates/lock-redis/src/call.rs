//! One script call in one buffer: `redis::ScriptInvocation` keeps every key and argument as a
//! `Vec<u8>` of its own (two allocations each, and the lists' growth), then copies them into
//! the `EVALSHA` command; a lock attempt has eleven of them. Here they are written once, into
//! one buffer on the stack, and the command is built from it with its final size: two
//! allocations per call (the command's) instead of about twenty-five. Same wire command, same
//! `NOSCRIPT` handling.

use std::fmt;
use std::io;

use lock_core::OwnerToken;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, RedisWrite, Script, ServerErrorKind, ToRedisArgs};
use smallvec::SmallVec;

/// Bytes of keys and arguments kept on the stack: a lock attempt's eleven take about 250.
const INLINE_BYTES: usize = 384;
/// Keys and arguments kept on the stack (a batched renewal has more, and spills).
const INLINE_PARTS: usize = 16;

/// An owner token as a script argument, its 32 hex digits written straight into the command
/// (`to_string()` would allocate a `String` per request).
#[derive(Clone, Copy)]
pub(crate) struct Token(pub(crate) OwnerToken);

impl ToRedisArgs for Token {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        out.write_arg(self.0.encode(&mut [0; 32]).as_bytes());
    }
}

/// A Lua script sent with `EVALSHA` (loaded on `NOSCRIPT`), whose calls are [`Call`]s.
pub(crate) struct Lua(Script, #[cfg(test)] String);

impl Lua {
    pub(crate) fn new(src: &str) -> Self {
        Lua(
            Script::new(src),
            #[cfg(test)]
            src.to_owned(),
        )
    }

    /// The script's text, as sent (the protocol model runs it).
    #[cfg(test)]
    pub(crate) fn source(&self) -> &str {
        &self.1
    }

    /// The script's SHA-1, as `EVALSHA` names it.
    #[cfg(test)]
    pub(crate) fn get_hash(&self) -> &str {
        self.0.get_hash()
    }

    /// A call of this script, keys first, then arguments.
    pub(crate) fn prepare_invoke(&self) -> Call<'_> {
        Call { lua: self, buf: SmallVec::new(), ends: SmallVec::new(), keys: 0 }
    }

    /// A call with its first key.
    pub(crate) fn key<T: ToRedisArgs>(&self, key: T) -> Call<'_> {
        let mut call = self.prepare_invoke();
        call.key(key);
        call
    }
}

/// The keys and arguments of one call, in the order they were added, in one buffer (`ends`:
/// where each one ends, and whether it is a key).
pub(crate) struct Call<'a> {
    lua: &'a Lua,
    buf: SmallVec<[u8; INLINE_BYTES]>,
    ends: SmallVec<[(usize, bool); INLINE_PARTS]>,
    keys: usize,
}

impl fmt::Debug for Call<'_> {
    /// Counts only: keys and arguments may carry owner tokens and notes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("keys", &self.keys)
            .field("args", &(self.ends.len() - self.keys))
            .finish()
    }
}

impl Call<'_> {
    /// Add a key (`KEYS[i]`, numbered among the keys only, as arguments are among theirs).
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        let from = self.ends.len();
        key.write_redis_args(self);
        for end in &mut self.ends[from..] {
            end.1 = true;
        }
        self.keys += self.ends.len() - from;
        self
    }

    /// Add an argument (`ARGV[i]`).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(self);
        self
    }

    /// Send it: `EVALSHA`, and on `NOSCRIPT` (a restarted or flushed server, a new node)
    /// `SCRIPT LOAD` and `EVALSHA` again, as `redis::ScriptInvocation` does.
    pub(crate) async fn invoke_async<T: FromRedisValue>(
        &self,
        con: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<T> {
        let cmd = self.cmd();
        match cmd.query_async(con).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.lua.0.load_async(con).await?;
                cmd.query_async(con).await
            }
            done => done,
        }
    }

    fn cmd(&self) -> Cmd {
        let mut cmd = Cmd::with_capacity(3 + self.ends.len(), self.buf.len() + 64);
        cmd.arg("EVALSHA").arg(self.lua.0.get_hash()).arg(self.keys);
        for keys in [true, false] {
            let mut start = 0;
            for &(end, key) in &self.ends {
                if key == keys {
                    cmd.arg(&self.buf[start..end]);
                }
                start = end;
            }
        }
        cmd
    }
}

impl RedisWrite for Call<'_> {
    fn write_arg(&mut self, arg: &[u8]) {
        self.buf.extend_from_slice(arg);
        self.ends.push((self.buf.len(), false));
    }

    fn write_arg_fmt(&mut self, arg: impl fmt::Display) {
        use io::Write as _;
        // Writing to a Vec cannot fail.
        let _ = write!(self.buf, "{arg}");
        self.ends.push((self.buf.len(), false));
    }

    fn writer_for_next_arg(&mut self) -> impl io::Write + '_ {
        /// Ends the argument when the caller is done writing it.
        struct Next<'b, 'a>(&'b mut Call<'a>);
        impl io::Write for Next<'_, '_> {
            fn write(&mut self, data: &[u8]) -> io::Result<usize> {
                self.0.buf.extend_from_slice(data);
                Ok(data.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        impl Drop for Next<'_, '_> {
            fn drop(&mut self) {
                self.0.ends.push((self.0.buf.len(), false));
            }
        }
        Next(self)
    }
}

#[cfg(test)]
mod tests {
    use super::{Lua, Token};

    /// The command is the one `redis::ScriptInvocation` sends: `EVALSHA`, the hash, the number
    /// of keys, the keys, the arguments, whatever their types.
    #[test]
    fn the_same_command_as_a_script_invocation() {
        let lua = Lua::new("return 1");
        let mut call = lua.key("k1");
        let token = lock_core::OwnerToken::random();
        // Keys and arguments may interleave (a batched renewal adds a key and its arguments
        // for each lock): each keeps its own order.
        call.arg("a").key("k2").arg(42u64).arg(-7i64).arg("").arg(&["x", "y"][..]).arg(Token(token));
        let ours = call.cmd().get_packed_command();
        let mut expected = redis::cmd("EVALSHA");
        expected
            .arg(lua.get_hash())
            .arg(2)
            .arg("k1")
            .arg("k2")
            .arg("a")
            .arg(42)
            .arg(-7)
            .arg("")
            .arg("x")
            .arg("y")
            .arg(token.to_string());
        assert_eq!(ours, expected.get_packed_command());
        assert!(format!("{call:?}").contains("keys: 2") && !format!("{call:?}").contains("k1"));
    }
}
