//! The kinds of fault, one module each, and the fault log: what was
//! injected, when, to whom (`faults.jsonl`). `schedule` picks them.

mod client_pause;
mod clock_skew;
mod forge;
mod kill9;
mod proxy_mode;
mod proxy_reset;
mod redis_restart;
mod redis_wipe;
mod reload;
mod schedule;
mod sigstop;
mod sigterm;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::harness::Harness;
use crate::wall::{clock, now_ms, rfc3339};

/// Every kind of fault, and the one event the suite did not cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// kill -9 of a replica (most often one holding a run), restarted 1–3 s later.
    Kill9,
    /// SIGSTOP of a replica beyond its lease, then SIGCONT.
    Sigstop,
    /// A replica's proxy delays every chunk for a while.
    ProxyDelay,
    /// A replica's proxy forwards nothing for a while: a partition.
    ProxyBlackhole,
    /// A replica's proxy closes every connection for a while.
    ProxyDrop,
    /// A replica's proxy resets every connection once.
    ProxyReset,
    /// Redis `CLIENT PAUSE` for 1.5 s.
    ClientPause,
    /// Redis killed and restarted with its data (AOF).
    RedisRestart,
    /// Redis killed and restarted without its data: a declared state-loss window.
    RedisWipe,
    /// A replica restarted with another clock skew (libfaketime).
    ClockSkew,
    /// SIGTERM of a replica, restarted after a moment.
    Sigterm,
    /// A changed config and SIGHUP, mid-tick.
    Reload,
    /// Forged claim announcements and a job's high-water mark set a day
    /// ahead, as any Redis client could write them.
    Forge,
    /// Not injected: a replica that died by itself (and was restarted).
    UnexpectedExit,
}

use FaultKind::*;

/// Every kind of fault the suite injects, with its weight in the random choice.
const INJECTED: [(FaultKind, u64); 13] = [
    (Kill9, 30),
    (Sigstop, 30),
    (ProxyDelay, 15),
    (ProxyBlackhole, 15),
    (ProxyDrop, 10),
    (ProxyReset, 10),
    (ClientPause, 15),
    (RedisRestart, 10),
    (RedisWipe, 7),
    (ClockSkew, 20),
    (Sigterm, 15),
    (Reload, 15),
    (Forge, 10),
];

impl FaultKind {
    /// The name in `--faults`, `faults.jsonl` and the report.
    pub fn name(self) -> &'static str {
        match self {
            Kill9 => "kill9",
            Sigstop => "sigstop",
            ProxyDelay => "proxy_delay",
            ProxyBlackhole => "proxy_blackhole",
            ProxyDrop => "proxy_drop",
            ProxyReset => "proxy_reset",
            ClientPause => "client_pause",
            RedisRestart => "redis_restart",
            RedisWipe => "redis_wipe",
            ClockSkew => "clock_skew",
            Sigterm => "sigterm",
            Reload => "reload",
            Forge => "forge",
            UnexpectedExit => "unexpected_exit",
        }
    }

    fn from_name(name: &str) -> Option<FaultKind> {
        INJECTED
            .iter()
            .map(|(kind, _)| *kind)
            .chain([UnexpectedExit])
            .find(|kind| kind.name() == name)
    }

    /// The kinds `--faults` names, with their weights (all when empty).
    pub fn enabled(filter: &[String]) -> Result<Vec<(FaultKind, u64)>> {
        if filter.is_empty() {
            return Ok(INJECTED.to_vec());
        }
        let mut kinds = Vec::new();
        for name in filter {
            match INJECTED.iter().find(|(k, _)| k.name() == name) {
                Some(kind) => kinds.push(*kind),
                None => bail!(
                    "unknown fault kind {name:?}; the kinds are {}",
                    INJECTED.map(|(k, _)| k.name()).join(", ")
                ),
            }
        }
        Ok(kinds)
    }

    /// Redis was away or lost its state: ticks around it may be missed.
    pub fn is_outage(self) -> bool {
        matches!(self, ClientPause | RedisRestart | RedisWipe)
    }

    pub fn is_state_loss(self) -> bool {
        self == RedisWipe
    }
}

/// One injected fault (or an event the suite did not cause, such as a
/// replica that died by itself), with wall-clock start and end.
#[derive(Clone, Debug)]
pub struct Fault {
    pub kind: FaultKind,
    pub target: Option<String>,
    pub start_ms: i64,
    pub end_ms: i64,
    pub detail: Value,
}

impl Fault {
    pub fn is_outage(&self) -> bool {
        self.kind.is_outage()
    }

    pub fn is_state_loss(&self) -> bool {
        self.kind.is_state_loss()
    }

    /// The line of `faults.jsonl` for the `n`th fault.
    pub fn to_json(&self, n: usize) -> Value {
        json!({
            "n": n,
            "kind": self.kind.name(),
            "target": self.target,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "start": rfc3339(self.start_ms),
            "end": rfc3339(self.end_ms),
            "outage": self.is_outage(),
            "state_loss": self.is_state_loss(),
            "detail": self.detail,
        })
    }

    /// A line of `faults.jsonl` read back.
    pub fn from_json(value: &Value) -> Result<Fault> {
        let name = value["kind"].as_str().unwrap_or("");
        Ok(Fault {
            kind: FaultKind::from_name(name)
                .with_context(|| format!("unknown fault kind {name:?}"))?,
            target: value["target"].as_str().map(str::to_string),
            start_ms: value["start_ms"].as_i64().unwrap_or(0),
            end_ms: value["end_ms"].as_i64().unwrap_or(0),
            detail: value["detail"].clone(),
        })
    }

    pub fn describe(&self) -> String {
        format!(
            "{}–{} {} {} {}",
            clock(self.start_ms),
            clock(self.end_ms),
            self.kind.name(),
            self.target.as_deref().unwrap_or("-"),
            self.detail
        )
    }
}

/// The two random numbers every fault draws, whatever it is, so that the
/// sequence of kinds is the same for a seed.
#[derive(Clone, Copy)]
pub struct Draws {
    pub a: u64,
    pub b: u64,
}

impl Harness {
    /// Injects one fault of `kind` and returns its record (not yet logged).
    fn inject(&mut self, kind: FaultKind) -> Result<Fault> {
        let draws = Draws {
            a: self.rng.next(),
            b: self.rng.next(),
        };
        let mut fault = Fault {
            kind,
            target: None,
            start_ms: now_ms(),
            end_ms: now_ms(),
            detail: json!({}),
        };
        let f = &mut fault;
        match kind {
            Kill9 => kill9::inject(self, f, draws)?,
            Sigstop => sigstop::inject(self, f, draws),
            ProxyDelay | ProxyBlackhole | ProxyDrop => proxy_mode::inject(self, f, draws),
            ProxyReset => proxy_reset::inject(self, f),
            ClientPause => client_pause::inject(self, f),
            RedisRestart => redis_restart::inject(self, f)?,
            RedisWipe => redis_wipe::inject(self, f)?,
            ClockSkew => clock_skew::inject(self, f, draws)?,
            Sigterm => sigterm::inject(self, f, draws)?,
            Reload => reload::inject(self, f, draws)?,
            Forge => forge::inject(self, f, draws)?,
            UnexpectedExit => bail!("unexpected_exit is recorded, not injected"),
        }
        Ok(fault)
    }
}
