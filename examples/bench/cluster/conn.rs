//! The bench's own Redis connection, which counts what it sends.

use anyhow::{Context, Result};

/// A connection that counts the commands the bench sends, so they can be
/// taken out of Redis's command counts.
pub struct Conn {
    inner: redis::Connection,
    pub issued: u64,
}

impl Conn {
    pub fn new(inner: redis::Connection) -> Conn {
        Conn { inner, issued: 0 }
    }

    pub fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T> {
        self.issued += 1;
        cmd.query(&mut self.inner)
            .context("a Redis command of the bench failed")
    }

    /// Sends `pipe`, which holds `commands` commands.
    pub fn query_pipe<T: redis::FromRedisValue>(
        &mut self,
        pipe: &redis::Pipeline,
        commands: usize,
    ) -> redis::RedisResult<T> {
        self.issued += commands as u64;
        pipe.query(&mut self.inner)
    }
}
