//! Reading figures off the running processes: a replica's `/metrics`
//! (through `ureq`), Redis's `INFO`, and `/proc`.

use std::collections::BTreeMap;
use std::io::Read;

use std::time::Duration;

use anyhow::{Context, Result};

/// The HTTP client of the scrapes: loopback only (no proxy from the
/// environment), a connection per request as a fresh `curl` would, and a
/// replica rendering 10,000 jobs' metrics is given 20 s between reads.
pub fn metrics_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .proxy(None)
        .max_idle_connections(0)
        .timeout_connect(Some(Duration::from_secs(2)))
        .timeout_per_read(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// `cronlease_claims_total` of one replica, summed over jobs, by result.
pub fn scrape_claims(agent: &ureq::Agent, port: u16) -> Result<BTreeMap<String, u64>> {
    let url = format!("http://127.0.0.1:{port}/metrics");
    let response = agent
        .get(&url)
        .call()
        .with_context(|| format!("GET {url} failed"))?;
    // No size limit: /metrics of 10,000 jobs is well over ureq's 10 MB
    // default for `read_to_string`.
    let mut body = Vec::new();
    response
        .into_body()
        .into_reader()
        .read_to_end(&mut body)
        .with_context(|| format!("cannot read the response of {url}"))?;
    Ok(parse_claims(&String::from_utf8_lossy(&body)))
}

/// The `cronlease_claims_total{…,result="R"} N` lines of a Prometheus
/// text exposition, summed by result.
fn parse_claims(body: &str) -> BTreeMap<String, u64> {
    let mut claims = BTreeMap::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("cronlease_claims_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let Some(result) = labels
            .split("result=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
        else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        *claims.entry(result.to_string()).or_default() += value as u64;
    }
    claims
}

/// `INFO commandstats`: calls by command.
pub fn parse_commandstats(info: &str) -> BTreeMap<String, u64> {
    let mut commands = BTreeMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, stats)) = rest.split_once(':') else {
            continue;
        };
        let calls = stats
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|n| n.trim().parse().ok());
        if let Some(calls) = calls {
            commands.insert(name.to_string(), calls);
        }
    }
    commands
}

/// A `kB` line of `/proc/PID/status` (`VmHWM`, `VmRSS`).
pub fn proc_status_kb(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix(':')?;
        value.split_whitespace().next()?.parse().ok()
    })
}
