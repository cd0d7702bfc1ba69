//! The machine the bench runs on: CPU, memory, versions, load.

use std::path::Path;
use std::process::Command;

use chrono::Utc;
use serde_json::{Value, json};

pub fn machine(binary: &Path) -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let version = |program: &Path| {
        Command::new(program)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let mem_total_kb = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines().find_map(|l| {
            l.strip_prefix("MemTotal:")?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
    });
    json!({
        "nproc": nproc,
        "model_name": model,
        "mem_total_kb": mem_total_kb,
        "redis_server_version": version(Path::new("redis-server")),
        "cronlease_version": version(binary),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string()),
        "date": Utc::now().to_rfc3339(),
    })
}

pub fn machine_line(machine: &Value) -> String {
    format!(
        "{} × {}, {:.1} GB RAM; {}",
        machine["nproc"],
        machine["model_name"].as_str().unwrap_or("?"),
        machine["mem_total_kb"].as_f64().unwrap_or(0.0) / 1024.0 / 1024.0,
        machine["redis_server_version"]
            .as_str()
            .unwrap_or("redis-server ?")
    )
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_string())
}
