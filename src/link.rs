//! How cronlease reaches its Redis deployment: one server, the master a
//! set of Sentinels name, or a Cluster; with TLS and ACL credentials from the
//! config. [`Link`] makes connections; [`Conn`] is the shared, multiplexed
//! connection every store request goes through, whatever the deployment.
//!
//! Passwords never leave this module except in the connection handshake:
//! errors carry [`Topology::describe`], which redacts them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo,
    Pipeline, RedisError, RedisFuture, RedisResult, TlsCertificates, Value,
};

use crate::config::{RedisConfig, Tls, Topology};

/// Why a connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("cannot read {what} {path}: {source}")]
    File {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid Redis address {url}: {source}")]
    Address {
        url: String,
        #[source]
        source: RedisError,
    },
}

/// The parts of a server's address every topology shares: credentials,
/// TLS files, and timeouts.
struct Settings {
    username: Option<String>,
    password: Option<String>,
    certificates: Option<TlsCertificates>,
    insecure: bool,
    connect_timeout: Duration,
    command_timeout: Duration,
}

impl Settings {
    fn new(config: &RedisConfig) -> Result<Settings, LinkError> {
        Ok(Settings {
            username: config.username.clone(),
            password: config.password.as_ref().map(|p| p.expose().to_string()),
            certificates: certificates(&config.tls)?,
            insecure: config.tls.insecure_skip_verify,
            connect_timeout: config.connect_timeout,
            command_timeout: config.command_timeout,
        })
    }

    /// `url` with the configured credentials and TLS mode applied.
    fn connection_info(&self, url: &str) -> Result<ConnectionInfo, LinkError> {
        let mut info = url.into_connection_info().map_err(bad_address(url))?;
        let mut redis = info.redis_settings().clone();
        if let Some(username) = &self.username {
            redis = redis.set_username(username);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password);
        }
        info = info.set_redis_settings(redis);
        if self.insecure {
            let mut addr = info.addr().clone();
            if let ConnectionAddr::TcpTls { insecure, .. } = &mut addr {
                *insecure = true;
            }
            info = info.set_addr(addr);
        }
        Ok(info)
    }

    fn client(&self, url: &str) -> Result<Client, LinkError> {
        let info = self.connection_info(url)?;
        let result = match &self.certificates {
            Some(certificates) if is_tls(&info) => {
                Client::build_with_tls(info, clone_certificates(certificates))
            }
            _ => Client::open(info),
        };
        result.map_err(bad_address(url))
    }

    fn connection_config(&self, response_timeout: Duration) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(response_timeout))
    }
}

/// Wraps an error about `url`, its password redacted.
fn bad_address(url: &str) -> impl FnOnce(RedisError) -> LinkError {
    let url = crate::config::redact_url(url);
    move |source| LinkError::Address { url, source }
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

fn clone_certificates(certificates: &TlsCertificates) -> TlsCertificates {
    TlsCertificates {
        client_tls: certificates
            .client_tls
            .as_ref()
            .map(|c| redis::ClientTlsConfig {
                client_cert: c.client_cert.clone(),
                client_key: c.client_key.clone(),
            }),
        root_cert: certificates.root_cert.clone(),
    }
}

/// The TLS files, read now (the config checked they are readable at load).
fn certificates(tls: &Tls) -> Result<Option<TlsCertificates>, LinkError> {
    let read = |what: &'static str, path: &std::path::Path| {
        crate::config::read_bounded(path, crate::config::MAX_PEM_FILE).map_err(|source| {
            LinkError::File {
                what,
                path: path.display().to_string(),
                source,
            }
        })
    };
    let root_cert = tls
        .ca_file
        .as_deref()
        .map(|path| read("ca_file", path))
        .transpose()?;
    let client_tls = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read("cert_file", cert)?,
            client_key: read("key_file", key)?,
        }),
        _ => None,
    };
    if root_cert.is_none() && client_tls.is_none() {
        return Ok(None);
    }
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// Makes rustls use *ring* for TLS. Idempotent: a provider installed
/// already (by an earlier call) stays.
fn install_crypto() {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
}

/// Makes connections to the deployment.
pub struct Link {
    kind: Kind,
    settings: Settings,
}

// One `Link` per process: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Kind {
    Single(Client),
    Sentinel(Arc<SentinelShared>),
    Cluster {
        client: ClusterClient,
        /// One client per seed node, for pub/sub: a message published on
        /// one node of a Cluster reaches subscribers on every node.
        seeds: Vec<Client>,
    },
}

impl Link {
    /// One link per master of a quorum, each named by its redacted URL;
    /// otherwise the deployment's one link, named by its description.
    /// Checks the addresses and reads the TLS files; connects nothing yet.
    pub fn nodes(config: &RedisConfig) -> Result<Vec<(String, Link)>, LinkError> {
        match &config.topology {
            Topology::Quorum(urls) => urls
                .iter()
                .map(|url| {
                    let mut single = config.clone();
                    single.topology = Topology::Single(url.clone());
                    Ok((crate::config::redact_url(url), Link::new(&single)?))
                })
                .collect(),
            _ => Ok(vec![(config.describe(), Link::new(config)?)]),
        }
    }

    /// The link to one deployment (a quorum master is one).
    fn new(config: &RedisConfig) -> Result<Link, LinkError> {
        install_crypto();
        let settings = Settings::new(config)?;
        let kind = match &config.topology {
            Topology::Single(url) => Kind::Single(settings.client(url)?),
            Topology::Quorum(_) => {
                return Err(LinkError::Address {
                    url: config.topology.describe(),
                    source: RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "a quorum has one link per master (Link::nodes)",
                    )),
                });
            }
            Topology::Sentinel {
                sentinels,
                master_name,
            } => Kind::Sentinel(Arc::new(SentinelShared::new(
                &settings,
                sentinels,
                master_name,
            )?)),
            Topology::Cluster(nodes) => {
                let mut builder = ClusterClientBuilder::new(
                    nodes
                        .iter()
                        .map(|url| settings.connection_info(url))
                        .collect::<Result<Vec<_>, _>>()?,
                )
                .connection_timeout(settings.connect_timeout)
                .response_timeout(settings.command_timeout)
                .retries(2);
                if let Some(username) = &settings.username {
                    builder = builder.username(username);
                }
                if let Some(password) = &settings.password {
                    builder = builder.password(password);
                }
                if let Some(certificates) = &settings.certificates {
                    builder = builder.certs(clone_certificates(certificates));
                }
                let client = builder.build().map_err(|source| LinkError::Address {
                    url: config.topology.describe(),
                    source,
                })?;
                let seeds = nodes
                    .iter()
                    .map(|url| settings.client(url))
                    .collect::<Result<Vec<_>, _>>()?;
                Kind::Cluster { client, seeds }
            }
        };
        Ok(Link { kind, settings })
    }

    /// The shared connection for requests, reconnecting by itself (and, with
    /// Sentinel, finding the new master after a failover).
    pub async fn connect(&self) -> RedisResult<Conn> {
        match &self.kind {
            Kind::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.settings.connect_timeout))
                    .set_response_timeout(Some(self.settings.command_timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(2));
                Ok(Conn::Single(
                    ConnectionManager::new_with_config(client.clone(), config).await?,
                ))
            }
            Kind::Sentinel(shared) => {
                let conn = SentinelConn {
                    shared: shared.clone(),
                };
                conn.get().await?;
                Ok(Conn::Sentinel(conn))
            }
            Kind::Cluster { client, .. } => Ok(Conn::Cluster(client.get_async_connection().await?)),
        }
    }

    /// A connection of its own whose replies may take `response_timeout`
    /// (blocking reads).
    pub async fn dedicated(&self, response_timeout: Duration) -> RedisResult<Conn> {
        let config = self.settings.connection_config(response_timeout);
        match &self.kind {
            Kind::Single(client) => Ok(Conn::Plain(
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            )),
            Kind::Sentinel(shared) => Ok(Conn::Plain(
                shared
                    .master_client()
                    .await?
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            )),
            Kind::Cluster { client, .. } => {
                let config = redis::cluster::ClusterConfig::new()
                    .set_response_timeout(response_timeout)
                    .set_connection_timeout(self.settings.connect_timeout);
                Ok(Conn::Cluster(
                    client.get_async_connection_with_config(config).await?,
                ))
            }
        }
    }

    /// A pub/sub connection (not yet subscribed).
    pub async fn pubsub(&self) -> RedisResult<redis::aio::PubSub> {
        match &self.kind {
            Kind::Single(client) => client.get_async_pubsub().await,
            Kind::Sentinel(shared) => shared.master_client().await?.get_async_pubsub().await,
            Kind::Cluster { seeds, .. } => {
                let mut last = None;
                for seed in seeds {
                    match seed.get_async_pubsub().await {
                        Ok(pubsub) => return Ok(pubsub),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| {
                    RedisError::from((redis::ErrorKind::InvalidClientConfig, "no cluster nodes"))
                }))
            }
        }
    }
}

/// What the Sentinel connections of one [`Link`] share: the sentinels and
/// the current master connection, dropped when it fails so that the next
/// request asks the sentinels again.
struct SentinelShared {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Option<Current>>,
    config: AsyncConnectionConfig,
    connect_timeout: Duration,
}

impl SentinelShared {
    fn new(
        settings: &Settings,
        sentinels: &[String],
        master_name: &str,
    ) -> Result<SentinelShared, LinkError> {
        let mut addrs = Vec::new();
        let mut sentinel_tls = false;
        for url in sentinels {
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(bad_address(url))?;
            sentinel_tls |= is_tls(&info);
            addrs.push(info.addr().clone());
        }
        let mut builder =
            SentinelClientBuilder::new(addrs, master_name, SentinelServerType::Master)
                .map_err(bad_address(&sentinels[0]))?;
        if let Some(username) = &settings.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &settings.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if sentinel_tls {
            let mode = if settings.insecure {
                redis::TlsMode::Insecure
            } else {
                redis::TlsMode::Secure
            };
            builder = builder
                .set_client_to_redis_tls_mode(mode)
                .set_client_to_sentinel_tls_mode(mode);
            if let Some(certificates) = &settings.certificates {
                builder = builder
                    .set_client_to_redis_certificates(clone_certificates(certificates))
                    .set_client_to_sentinel_certificates(clone_certificates(certificates));
            }
        }
        let sentinel = builder.build().map_err(bad_address(&sentinels[0]))?;
        Ok(SentinelShared {
            sentinel: tokio::sync::Mutex::new(sentinel),
            current: Mutex::new(None),
            config: settings.connection_config(settings.command_timeout),
            connect_timeout: settings.connect_timeout,
        })
    }

    /// A client for the master the sentinels name now (they check its
    /// `ROLE` before answering).
    async fn master_client(&self) -> RedisResult<Client> {
        let mut sentinel = self.sentinel.lock().await;
        match tokio::time::timeout(self.connect_timeout, sentinel.async_get_client()).await {
            Ok(result) => result,
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no sentinel named a master in time",
            ))),
        }
    }
}

/// How often a Sentinel connection asks the sentinels whether the master
/// moved. A forced failover leaves the old master writable until the
/// sentinels reconfigure it (seconds later): errors alone do not tell.
const SENTINEL_RECHECK: Duration = Duration::from_secs(1);

/// The connection to the master, the master's address, and when the
/// sentinels last confirmed it.
#[derive(Clone)]
struct Current {
    conn: MultiplexedConnection,
    addr: ConnectionAddr,
    confirmed: std::time::Instant,
}

/// The master connection of a Sentinel deployment.
#[derive(Clone)]
pub struct SentinelConn {
    shared: Arc<SentinelShared>,
}

impl SentinelConn {
    fn current(&self) -> Option<Current> {
        self.shared
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_current(&self, current: Option<Current>) {
        *self
            .shared
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = current;
    }

    /// The master connection; at most every [`SENTINEL_RECHECK`], asks the
    /// sentinels first and reconnects if they name another master.
    async fn get(&self) -> RedisResult<MultiplexedConnection> {
        let current = self.current();
        if let Some(current) = &current
            && current.confirmed.elapsed() < SENTINEL_RECHECK
        {
            return Ok(current.conn.clone());
        }
        // Only this caller asks; the requests meanwhile use the connection.
        if let Some(current) = &current {
            self.set_current(Some(Current {
                confirmed: std::time::Instant::now(),
                ..current.clone()
            }));
        }
        let client = match (self.shared.master_client().await, current) {
            (Ok(client), Some(current)) if client.get_connection_info().addr() == &current.addr => {
                return Ok(current.conn);
            }
            // The sentinels are away: keep the master we know.
            (Err(e), Some(current)) => {
                tracing::debug!(error = %e, "no sentinel answered; keeping the master connection");
                return Ok(current.conn);
            }
            (Err(e), None) => return Err(e),
            (Ok(client), current) => {
                if current.is_some() {
                    tracing::warn!(master = %client.get_connection_info().addr(), "the sentinels name a new master; reconnecting");
                }
                client
            }
        };
        let conn = client
            .get_multiplexed_async_connection_with_config(&self.shared.config)
            .await?;
        self.set_current(Some(Current {
            conn: conn.clone(),
            addr: client.get_connection_info().addr().clone(),
            confirmed: std::time::Instant::now(),
        }));
        Ok(conn)
    }

    /// After `error`: drop the connection if the master may have moved.
    fn failed(&self, error: &RedisError) {
        let moved = matches!(error.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"));
        if moved
            || error.is_io_error()
            || error.is_connection_dropped()
            || error.is_timeout()
            || error.is_unrecoverable_error()
        {
            tracing::debug!(error = %error, "dropping the master connection; asking the sentinels again");
            self.set_current(None);
        }
    }
}

/// A connection of any deployment, usable wherever the redis crate takes
/// an async connection. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    /// A plain multiplexed connection (dedicated connections).
    Plain(MultiplexedConnection),
    Sentinel(SentinelConn),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Whether calls on this connection may carry the keys of several jobs
    /// (not Cluster, where they sit in different slots).
    pub fn batches(&self) -> bool {
        !matches!(self, Conn::Cluster(_))
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Plain(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
            Conn::Sentinel(sentinel) => Box::pin(async move {
                let mut conn = sentinel.get().await?;
                let result = conn.req_packed_command(cmd).await;
                if let Err(e) = &result {
                    sentinel.failed(e);
                }
                result
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Plain(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => Box::pin(async move {
                match conn.req_packed_commands(pipeline, offset, count).await {
                    // Keys of several slots (a heartbeat reads the replicas
                    // hash and the epoch): nothing was sent; send the
                    // commands one by one, in order.
                    Err(e)
                        if !pipeline.is_transaction()
                            && e.kind()
                                == redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot) =>
                    {
                        let mut replies = Vec::with_capacity(pipeline.len());
                        for cmd in pipeline.cmd_iter() {
                            replies.push(conn.req_packed_command(cmd).await?);
                        }
                        Ok(replies)
                    }
                    other => other,
                }
            }),
            Conn::Sentinel(sentinel) => Box::pin(async move {
                let mut conn = sentinel.get().await?;
                let result = conn.req_packed_commands(pipeline, offset, count).await;
                if let Err(e) = &result {
                    sentinel.failed(e);
                }
                result
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Plain(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
            Conn::Sentinel(_) => 0,
        }
    }
}
