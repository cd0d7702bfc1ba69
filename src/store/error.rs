//! A failed exchange with Redis.

use crate::link::LinkError;

/// A failed exchange with Redis.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot connect to Redis at {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("{}", redis_message(.0))]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("unexpected reply from Redis to {what}: {reply:?}")]
    Protocol { what: &'static str, reply: String },
    /// Quorum mode: fewer than a majority of the masters agreed.
    #[error("quorum not reached for {what}: {detail}")]
    NoQuorum {
        what: &'static str,
        detail: String,
        /// A majority of the masters answered, but their answers split
        /// (replicas racing): Redis is reachable.
        reachable: bool,
    },
    #[error(
        "{what} is not available with `[redis] quorum` in this version: it needs a single Redis, Sentinel or Cluster"
    )]
    QuorumUnsupported { what: &'static str },
    /// A job's state hash holds a high-water mark or fence that is not a
    /// number: nothing is decided for the job until it is repaired.
    #[error(
        "job {job:?}: its state hash in Redis holds a {field} cronlease did not write ({value:?}); `cronlease repair {job}` clears it"
    )]
    CorruptState {
        job: String,
        field: String,
        value: String,
    },
}

/// How a Redis error reads: a refusal by the user's ACL rules says so
/// and where the rules are explained; any other as Redis put it.
fn redis_message(error: &redis::RedisError) -> String {
    if error.code() == Some("NOPERM") {
        return format!(
            "Redis refused it: {} (the ACL rules of the Redis user in `[redis]` do not allow \
             this action; the guide's \"Access\" page shows rules for viewers and operators)",
            error.detail().unwrap_or("no permission")
        );
    }
    format!("redis: {error}")
}

impl StoreError {
    /// True when the command may or may not have been executed (timeout,
    /// dropped connection): the caller must read back, not guess.
    pub fn is_ambiguous(&self) -> bool {
        match self {
            StoreError::Redis(e) => e.is_timeout() || e.is_connection_dropped() || e.is_io_error(),
            // A claim without a majority was undone where it landed; one
            // that landed unheard on a minority lapses with its lease.
            StoreError::Connect { .. }
            | StoreError::Link(_)
            | StoreError::Protocol { .. }
            | StoreError::NoQuorum { .. }
            | StoreError::QuorumUnsupported { .. }
            | StoreError::CorruptState { .. } => false,
        }
    }
}
