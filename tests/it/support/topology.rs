//! Ways of deploying Redis beyond one plain server, each made of private
//! `redis-server` processes on free loopback ports that die with their
//! owner: a server that also speaks TLS ([`RedisServer::start_tls`], with
//! throwaway certificates from [`TlsFiles`]), a master, a replica and three
//! sentinels ([`SentinelSetup`]), a three-master Redis Cluster
//! ([`RedisClusterSetup`]), and independent servers for a quorum (a
//! `Vec<RedisServer>`). [`Topology`] says how a replica's `[redis]` section
//! reaches each of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{RedisServer, toml_string, wait_until_or_show};

/// How long a topology may take to settle (sentinels discovering each
/// other, a cluster agreeing on its slots, a failover).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// `openssl req` arguments for a new P-256 key without a passphrase.
const NEW_KEY: [&str; 6] = [
    "-nodes",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-keyout",
];

/// The name the sentinels monitor the master under.
const MASTER_NAME: &str = "mymaster";

/// Something replicas can be pointed at through their `[redis]` section.
pub trait Topology {
    /// The body of the `[redis]` section (without `key_prefix` and
    /// `command_timeout`, which [`super::write_config_section`] adds).
    fn redis_section(&self) -> String;
}

/// One server: `url = "redis://127.0.0.1:PORT/0"`.
impl Topology for RedisServer {
    fn redis_section(&self) -> String {
        format!("url = {}\n", toml_string(&self.url()))
    }
}

/// Independent servers that replicas must reach a majority of:
/// `quorum = [URL, …]`.
impl Topology for Vec<RedisServer> {
    fn redis_section(&self) -> String {
        let urls: Vec<String> = self.iter().map(RedisServer::url).collect();
        format!("quorum = {}\n", toml_list(&urls))
    }
}

/// `sentinels = [URL, …]` and `master_name = "mymaster"`.
impl Topology for SentinelSetup {
    fn redis_section(&self) -> String {
        format!(
            "sentinels = {}\nmaster_name = {}\n",
            toml_list(&self.sentinel_urls()),
            toml_string(self.master_name())
        )
    }
}

/// `cluster = [URL, …]`.
impl Topology for RedisClusterSetup {
    fn redis_section(&self) -> String {
        format!("cluster = {}\n", toml_list(&self.urls()))
    }
}

/// `items` as a TOML array of strings.
pub fn toml_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| toml_string(item)).collect();
    format!("[{}]", quoted.join(", "))
}

/// The log tails of `servers`, for panic messages.
fn log_tails<'a>(servers: impl IntoIterator<Item = &'a RedisServer>) -> String {
    servers
        .into_iter()
        .map(|server| {
            format!(
                "=== redis-server on port {}\n{}",
                server.port(),
                server.log_tail(30)
            )
        })
        .collect()
}

/// `command` on a fresh connection to `server`, or `None` if the server
/// does not answer or refuses (for polling).
fn try_query<T: redis::FromRedisValue>(server: &RedisServer, command: &redis::Cmd) -> Option<T> {
    let client = redis::Client::open(server.url()).ok()?;
    let mut connection = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    connection
        .set_read_timeout(Some(Duration::from_secs(2)))
        .ok()?;
    command.query(&mut connection).ok()
}

/// The `field:value` lines of an `INFO` or `CLUSTER INFO` reply.
fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == field).then(|| value.trim().to_owned())
    })
}

// ------------------------------------------------------------------- TLS

/// A throwaway PKI made with the `openssl` CLI in its own directory: a CA,
/// a server certificate it signed for `IP:127.0.0.1, DNS:localhost`, a
/// client certificate it signed, and an unrelated second CA.
pub struct TlsFiles {
    dir: tempfile::TempDir,
}

impl TlsFiles {
    /// Generates every file (P-256 keys, valid for two days).
    ///
    /// # Panics
    ///
    /// When `openssl` is missing or fails (the message holds its output).
    pub fn generate() -> TlsFiles {
        let dir = tempfile::Builder::new()
            .prefix("cronlease-tls-")
            .tempdir()
            .expect("cannot create a temporary directory for TLS files");
        let files = TlsFiles { dir };
        files.self_signed("ca", "cronlease test CA");
        files.self_signed("other-ca", "an unrelated CA");
        files.signed(
            "server",
            "localhost",
            "keyUsage = critical, digitalSignature, keyEncipherment\n\
             extendedKeyUsage = serverAuth\n\
             subjectAltName = IP:127.0.0.1, DNS:localhost\n",
        );
        files.signed(
            "client",
            "cronlease",
            "keyUsage = critical, digitalSignature, keyEncipherment\n\
             extendedKeyUsage = clientAuth\n",
        );
        files
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate that signed the server and client certificates.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.crt")
    }

    pub fn server_cert(&self) -> PathBuf {
        self.path("server.crt")
    }

    pub fn server_key(&self) -> PathBuf {
        self.path("server.key")
    }

    pub fn client_cert(&self) -> PathBuf {
        self.path("client.crt")
    }

    pub fn client_key(&self) -> PathBuf {
        self.path("client.key")
    }

    /// A CA certificate that signed nothing here: trusting it instead of
    /// [`TlsFiles::ca`] must fail the handshake.
    pub fn other_ca(&self) -> PathBuf {
        self.path("other-ca.crt")
    }

    /// The `[redis]` section body for `url` trusting `ca` and presenting
    /// the client certificate.
    pub fn redis_section(&self, url: &str, ca: &Path) -> String {
        format!(
            "url = {}\nca_file = {}\ncert_file = {}\nkey_file = {}\n",
            toml_string(url),
            path_string(ca),
            path_string(&self.client_cert()),
            path_string(&self.client_key()),
        )
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `NAME.key` and a self-signed CA certificate `NAME.crt`.
    fn self_signed(&self, name: &str, subject: &str) {
        self.new_key(
            name,
            subject,
            &[
                "-x509",
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
                "-addext",
                "basicConstraints = critical, CA:TRUE",
                "-addext",
                "keyUsage = critical, keyCertSign, cRLSign",
            ],
        );
    }

    /// `NAME.key` and `NAME.crt` signed by the CA, with `extensions`.
    fn signed(&self, name: &str, subject: &str, extensions: &str) {
        let ext = format!("{name}.ext");
        std::fs::write(
            self.path(&ext),
            format!("basicConstraints = critical, CA:FALSE\n{extensions}"),
        )
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", self.path(&ext).display()));
        self.new_key(name, subject, &["-out", &format!("{name}.csr")]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
    }

    /// `openssl req -new` making `NAME.key` for subject `CN=SUBJECT`, then
    /// `args` (a request or, with `-x509`, a self-signed certificate).
    fn new_key(&self, name: &str, subject: &str, args: &[&str]) {
        let key = format!("{name}.key");
        let subject = format!("/CN={subject}");
        let mut all = vec!["req", "-new"];
        all.extend(NEW_KEY);
        all.extend([key.as_str(), "-subj", subject.as_str()]);
        all.extend(args);
        self.openssl(&all);
    }

    /// Runs `openssl ARGS…` in the directory.
    #[track_caller]
    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run openssl (is it installed?): {e}"));
        assert!(
            output.status.success(),
            "openssl {} failed with {}\n--- stdout\n{}\n--- stderr\n{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

fn path_string(path: &Path) -> String {
    toml_string(&path.to_string_lossy())
}

/// Whether a TLS server asks its clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCert {
    /// TLS clients must present a certificate the CA signed
    /// (`--tls-auth-clients yes`).
    Required,
    /// Any TLS client is accepted (`--tls-auth-clients no`).
    NotAsked,
}

impl RedisServer {
    /// A server that listens on its plain port (so [`RedisServer::client`],
    /// `stop` and `restart` work as usual) and on a TLS port with the
    /// server certificate of `tls`, trusting its CA, asking clients for a
    /// certificate as `client_cert` says.
    pub fn start_tls(tls: &TlsFiles, client_cert: ClientCert) -> RedisServer {
        let cert = tls.server_cert();
        let key = tls.server_key();
        let ca = tls.ca();
        RedisServer::start_full(
            None,
            &["--tls-port"],
            &[
                "--tls-cert-file",
                &cert.to_string_lossy(),
                "--tls-key-file",
                &key.to_string_lossy(),
                "--tls-ca-cert-file",
                &ca.to_string_lossy(),
                "--tls-auth-clients",
                match client_cert {
                    ClientCert::Required => "yes",
                    ClientCert::NotAsked => "no",
                },
            ],
        )
    }

    /// The TLS port of a server from [`RedisServer::start_tls`].
    #[track_caller]
    pub fn tls_port(&self) -> u16 {
        self.extra_port("--tls-port")
    }

    /// `rediss://127.0.0.1:TLS_PORT/0`.
    #[track_caller]
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/0", self.tls_port())
    }
}

// -------------------------------------------------------------- Sentinel

/// A master, one replica of it, and three sentinels monitoring it as
/// `mymaster` with quorum 2 (down after 1 s, failover timeout 5 s).
pub struct SentinelSetup {
    /// The data nodes: `nodes[0]` starts as the master, `nodes[1]` as its
    /// replica; after [`SentinelSetup::failover`] they have swapped.
    pub nodes: Vec<RedisServer>,
    pub sentinels: Vec<RedisServer>,
}

impl SentinelSetup {
    /// Starts everything and waits until every sentinel knows the master,
    /// the replica and the two other sentinels, and the replica is in sync.
    ///
    /// # Panics
    ///
    /// After 30 s of waiting, with every server's log tail.
    pub fn start() -> SentinelSetup {
        let master = RedisServer::start();
        let replica =
            RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
        let conf = format!(
            "bind 127.0.0.1\n\
             sentinel resolve-hostnames no\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {port} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            port = master.port()
        );
        let sentinels = (0..3)
            .map(|_| RedisServer::start_full(Some(&conf), &[], &["--sentinel"]))
            .collect();
        let setup = SentinelSetup {
            nodes: vec![master, replica],
            sentinels,
        };
        let master_port = setup.nodes[0].port();
        let replica_port = setup.nodes[1].port();
        setup.settle("the replica in sync with the master", || {
            let info: String = try_query(&setup.nodes[1], redis::cmd("INFO").arg("replication"))?;
            (info_field(&info, "master_link_status").as_deref() == Some("up")).then_some(())
        });
        for (i, sentinel) in setup.sentinels.iter().enumerate() {
            setup.settle(
                &format!("sentinel {i} to know the master, the replica and 2 other sentinels"),
                || {
                    let master = sentinel_master_port(sentinel)?;
                    let replicas: Vec<BTreeMap<String, String>> =
                        sentinel_list(sentinel, "REPLICAS")?;
                    let others = sentinel_list(sentinel, "SENTINELS")?;
                    let replica_known = replicas.iter().any(|r| {
                        r.get("port") == Some(&replica_port.to_string())
                            && r.get("master-link-status").map(String::as_str) == Some("ok")
                            && !r.get("flags").is_some_and(|f| f.contains("down"))
                    });
                    (master == master_port && replica_known && others.len() == 2).then_some(())
                },
            );
        }
        setup
    }

    /// `redis://127.0.0.1:PORT` of each sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}", s.port()))
            .collect()
    }

    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// The master's port, as the first sentinel that answers says
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
    #[track_caller]
    pub fn master_port(&self) -> u16 {
        self.sentinels
            .iter()
            .find_map(sentinel_master_port)
            .unwrap_or_else(|| {
                panic!(
                    "no sentinel names the master of {MASTER_NAME}\n{}",
                    self.logs()
                )
            })
    }

    /// The data node listening on `port`.
    #[track_caller]
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// The data node that is the master now (as the sentinels say).
    #[track_caller]
    pub fn master(&self) -> &RedisServer {
        self.node(self.master_port())
    }

    /// Forces a failover (`SENTINEL FAILOVER mymaster` to one sentinel,
    /// repeated while it answers that it cannot yet) and waits until every
    /// sentinel names the other data node as master and that node's `ROLE`
    /// says `master`. Returns the new master's port. The old master may
    /// still call itself a master for a moment, until a sentinel turns it
    /// into a replica.
    ///
    /// # Panics
    ///
    /// After 30 s, with every server's log tail.
    #[track_caller]
    pub fn failover(&self) -> u16 {
        let old = self.master_port();
        let new = self
            .nodes
            .iter()
            .map(RedisServer::port)
            .find(|&port| port != old)
            .expect("two data nodes");
        self.settle("SENTINEL FAILOVER to be accepted", || {
            let mut connection = self.sentinels[0].client();
            redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(MASTER_NAME)
                .query::<()>(&mut connection)
                .ok()
        });
        self.settle(
            &format!("every sentinel to name port {new} as master and it to say ROLE master"),
            || {
                let agreed = self
                    .sentinels
                    .iter()
                    .all(|s| sentinel_master_port(s) == Some(new));
                (agreed && role(self.node(new)).as_deref() == Some("master")).then_some(())
            },
        );
        new
    }

    /// Every data node's and sentinel's log tail.
    pub fn logs(&self) -> String {
        log_tails(self.nodes.iter().chain(&self.sentinels))
    }

    #[track_caller]
    fn settle<T>(&self, what: &str, f: impl FnMut() -> Option<T>) -> T {
        wait_until_or_show(SETTLE_TIMEOUT, what, || self.logs(), f)
    }
}

/// The master's port according to `sentinel`, if it answers.
fn sentinel_master_port(sentinel: &RedisServer) -> Option<u16> {
    let address: Vec<String> = try_query(
        sentinel,
        redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER_NAME),
    )?;
    address.get(1)?.parse().ok()
}

/// `SENTINEL REPLICAS|SENTINELS mymaster` as one field map per entry.
fn sentinel_list(sentinel: &RedisServer, what: &str) -> Option<Vec<BTreeMap<String, String>>> {
    let entries: Vec<Vec<String>> =
        try_query(sentinel, redis::cmd("SENTINEL").arg(what).arg(MASTER_NAME))?;
    Some(
        entries
            .into_iter()
            .map(|flat| {
                flat.chunks_exact(2)
                    .map(|pair| (pair[0].clone(), pair[1].clone()))
                    .collect()
            })
            .collect(),
    )
}

/// The first element of `ROLE` (`master`, `slave`, `sentinel`).
fn role(server: &RedisServer) -> Option<String> {
    let reply: Vec<redis::Value> = try_query(server, &redis::cmd("ROLE"))?;
    redis::from_redis_value(reply.into_iter().next()?).ok()
}

// --------------------------------------------------------- Redis Cluster

/// Three Redis Cluster masters, no replicas, the 16384 slots spread over
/// them by `redis-cli --cluster create`.
pub struct RedisClusterSetup {
    pub nodes: Vec<RedisServer>,
}

impl RedisClusterSetup {
    /// Starts the three nodes (each with its own cluster bus port), joins
    /// them and waits for `cluster_state:ok` on all three.
    ///
    /// # Panics
    ///
    /// When `redis-cli --cluster create` fails or the cluster is not ok
    /// within 30 s, with every node's log tail.
    pub fn start() -> RedisClusterSetup {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_full(
                    None,
                    // The bus port defaults to PORT + 10000, which may be
                    // taken or out of range.
                    &["--cluster-port"],
                    &[
                        "--cluster-enabled",
                        "yes",
                        // Relative to the server's --dir, its own.
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "5000",
                        "--appendonly",
                        "no",
                        "--save",
                        "",
                    ],
                )
            })
            .collect();
        let setup = RedisClusterSetup { nodes };
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &setup.nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create.args(["--cluster-replicas", "0", "--cluster-yes"]);
        let shown = format!("{create:?}");
        let output = create
            .output()
            .unwrap_or_else(|e| panic!("cannot run {shown} (is redis-cli installed?): {e}"));
        assert!(
            output.status.success(),
            "{shown} failed with {}\n--- stdout\n{}\n--- stderr\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            setup.logs()
        );
        for (i, node) in setup.nodes.iter().enumerate() {
            wait_until_or_show(
                SETTLE_TIMEOUT,
                &format!("cluster_state:ok on node {i}"),
                || setup.logs(),
                || {
                    let info: String = try_query(node, redis::cmd("CLUSTER").arg("INFO"))?;
                    (info_field(&info, "cluster_state").as_deref() == Some("ok")).then_some(())
                },
            );
        }
        setup
    }

    /// `redis://127.0.0.1:PORT` of each node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port()))
            .collect()
    }

    /// `CLUSTER KEYSLOT key` (so `cl:{job}:state` → the slot of `job`).
    #[track_caller]
    pub fn keyslot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].client())
            .unwrap_or_else(|e| panic!("CLUSTER KEYSLOT {key} failed: {e}"))
    }

    /// The index in `nodes` of the master serving `slot` (from
    /// `CLUSTER NODES` of node 0).
    #[track_caller]
    pub fn node_of_slot(&self, slot: u16) -> usize {
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.nodes[0].client())
            .unwrap_or_else(|e| panic!("CLUSTER NODES failed: {e}"));
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 {
                continue;
            }
            let serves = fields[8..].iter().any(|range| {
                let (first, last) = range.split_once('-').unwrap_or((range, range));
                match (first.parse::<u16>(), last.parse::<u16>()) {
                    (Ok(first), Ok(last)) => (first..=last).contains(&slot),
                    _ => false, // a slot being migrated: `[…]`
                }
            });
            let port = fields[1]
                .split('@')
                .next()
                .and_then(|address| address.rsplit(':').next())
                .and_then(|port| port.parse::<u16>().ok());
            if serves && let Some(index) = self.nodes.iter().position(|n| Some(n.port()) == port) {
                return index;
            }
        }
        panic!("no node serves slot {slot}:\n{text}");
    }

    /// `DBSIZE` of node `index`.
    #[track_caller]
    pub fn dbsize(&self, index: usize) -> u64 {
        redis::cmd("DBSIZE")
            .query(&mut self.nodes[index].client())
            .unwrap_or_else(|e| panic!("DBSIZE on node {index} failed: {e}"))
    }

    /// Every node's log tail.
    pub fn logs(&self) -> String {
        log_tails(&self.nodes)
    }
}
