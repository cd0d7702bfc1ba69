//! Why a replica could not run.

use crate::spool::SpoolError;

/// Why a replica could not run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(
        "Redis {node} is configured to evict keys (maxmemory {maxmemory} bytes, maxmemory-policy {policy}): \
         a lease or a tick's high-water mark could vanish and a tick could run twice. \
         Set `maxmemory-policy noeviction` (CONFIG SET maxmemory-policy noeviction, and in redis.conf), \
         or `maxmemory 0`"
    )]
    Eviction {
        node: String,
        maxmemory: u64,
        policy: String,
    },
    #[error("cannot use the state directory: {0}")]
    Spool(#[from] SpoolError),
    #[error("[daemon] containment = \"cgroup\", but this replica cannot make cgroups: {0}")]
    Containment(String),
    #[error("{0}")]
    Limits(String),
    #[cfg(feature = "notify")]
    #[error(transparent)]
    Notify(#[from] crate::notify::BuildError),
    #[cfg(feature = "dashboard")]
    #[error(transparent)]
    DashboardToken(#[from] crate::dashboard::TokenError),
}
