//! The config loader on arbitrary bytes (read as UTF-8, invalid bytes
//! replaced): `Config::parse` either returns a config or problems, never
//! panics; a config that loads is described and its jobs' next ticks and
//! warnings computed, as `cronlease check` does.

#![no_main]

use std::path::Path;

use chrono::DateTime;
use cronlease::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let text = String::from_utf8_lossy(bytes);
    match Config::parse(&text, Path::new("/etc/cronlease/jobs.toml")) {
        Ok(config) => {
            let _ = config.redis.describe();
            let now = DateTime::from_timestamp(1_767_225_600, 0).expect("2026-01-01 is a date");
            let _ = config.warnings(now);
            for job in config.jobs.values() {
                let _ = job.definition_hash();
                let _ = job.schedule.as_ref().map(|s| s.describe());
                if let Some(tick) = job.next_after(now) {
                    assert!(
                        tick > now,
                        "job {:?}: next tick {tick} not after {now}",
                        job.name
                    );
                }
            }
        }
        Err(error) => {
            assert!(!error.problems.is_empty(), "an error without a problem");
            let _ = error.to_string();
        }
    }
});
