//! What each replica looked like at the end: CPU, memory, exit, and the
//! warnings and errors in its log; and their table.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::print_table;

/// What one replica looked like at the end.
pub struct ReplicaStats {
    pub name: String,
    pub pid: u32,
    pub cpu_s: Option<f64>,
    pub hwm_kb: Option<u64>,
    pub rss_kb: Option<u64>,
    /// VmHWM before the first scrape of /metrics (rendering them allocates).
    pub hwm_before_scrape_kb: Option<u64>,
    pub exit: String,
    /// Lines of its log: WARN, ERROR, panics.
    pub log: LogCounts,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct LogCounts {
    pub warn: usize,
    pub error: usize,
    pub panics: usize,
}

impl LogCounts {
    pub fn read(path: &Path) -> LogCounts {
        let text = std::fs::read(path).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let mut counts = LogCounts::default();
        for line in text.lines() {
            if line.contains(" WARN ") {
                counts.warn += 1;
            } else if line.contains(" ERROR ") {
                counts.error += 1;
            } else if line.contains("panicked at") {
                counts.panics += 1;
            }
        }
        counts
    }
}

impl ReplicaStats {
    pub fn json(&self) -> Value {
        json!({
            "replica": self.name,
            "pid": self.pid,
            "cpu_s": self.cpu_s,
            "peak_rss_kb": self.hwm_kb,
            "rss_kb": self.rss_kb,
            "peak_rss_before_first_scrape_kb": self.hwm_before_scrape_kb,
            "exit": self.exit,
            "log_warn_lines": self.log.warn,
            "log_error_lines": self.log.error,
            "log_panics": self.log.panics,
        })
    }
}

pub fn print_replicas(replicas: &[ReplicaStats]) {
    let mb =
        |kb: Option<u64>| kb.map_or("-".to_string(), |kb| format!("{:.1}", kb as f64 / 1024.0));
    let rows: Vec<Vec<String>> = replicas
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.pid.to_string(),
                r.cpu_s.map_or("-".to_string(), |s| format!("{s:.2}")),
                mb(r.hwm_kb),
                mb(r.hwm_before_scrape_kb),
                mb(r.rss_kb),
                r.exit.clone(),
                format!("{} / {} / {}", r.log.warn, r.log.error, r.log.panics),
            ]
        })
        .collect();
    println!("\n  replicas (read just before SIGTERM):");
    print_table(
        &[
            "replica",
            "pid",
            "CPU s (total)",
            "peak RSS MB",
            "peak before 1st scrape",
            "RSS MB",
            "exit",
            "log WARN / ERROR / panics",
        ]
        .map(String::from),
        &rows,
    );
}
