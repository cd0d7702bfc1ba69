//! What the replicas recorded: the job's outcome stream and the draws
//! the job wrote, printed, and checked for exactly one run per tick.

use super::*;

pub(super) fn runs_key() -> String {
    format!("{KEY_PREFIX}:{{{JOB}}}:runs")
}

/// One outcome record, as a replica wrote it to the job's stream.
pub(super) struct Outcome {
    fields: BTreeMap<String, String>,
}

impl Outcome {
    pub(super) fn get(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }

    /// A numeric field, `None` when missing or not a number.
    pub(super) fn number(&self, name: &str) -> Option<i64> {
        self.get(name).parse().ok()
    }

    pub(super) fn stale(&self) -> bool {
        self.get("stale") == "1"
    }

    /// How to name this outcome in a violation.
    pub(super) fn describe(&self) -> String {
        format!(
            "{} by {} (fence {}, run {})",
            self.get("status"),
            self.get("replica"),
            self.get("fence"),
            self.get("run_id")
        )
    }
}

/// The job's outcome stream, oldest first.
pub(super) fn read_outcomes(connection: &mut redis::Connection) -> Result<Vec<Outcome>> {
    let key = runs_key();
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query(connection)
        .with_context(|| format!("cannot read the outcome stream {key}"))?;
    Ok(entries
        .into_iter()
        .map(|(_id, flat)| Outcome {
            fields: flat
                .chunks_exact(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect(),
        })
        .collect())
}

/// One `lottery:draw:<tick_ms>` key, as `lottery-draw.sh` (or
/// `embedded_lottery`, in the same shape) wrote it:
/// `"<fence> <replica> <winner>…"`.
pub(super) struct Draw {
    fence: Option<i64>,
    replica: String,
    winners: String,
}

/// Every draw the job made, by tick.
pub(super) fn read_draws(connection: &mut redis::Connection) -> Result<BTreeMap<i64, Draw>> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("lottery:draw:*")
        .query(connection)
        .context("cannot list the lottery:draw:* keys")?;
    let mut draws = BTreeMap::new();
    for key in keys {
        let Some(tick) = key
            .strip_prefix("lottery:draw:")
            .and_then(|t| t.parse().ok())
        else {
            continue;
        };
        let value: String = redis::cmd("GET")
            .arg(&key)
            .query(connection)
            .with_context(|| format!("cannot read {key}"))?;
        let mut words = value.splitn(3, ' ');
        let fence = words.next().and_then(|f| f.parse().ok());
        let replica = words.next().unwrap_or("").to_string();
        let winners = words.next().unwrap_or("").to_string();
        draws.insert(
            tick,
            Draw {
                fence,
                replica,
                winners,
            },
        );
    }
    Ok(draws)
}

fn format_tick(tick: Option<i64>) -> String {
    tick.and_then(DateTime::<Utc>::from_timestamp_millis)
        .map_or_else(
            || "?".to_string(),
            |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
        )
}

/// One row per outcome, oldest first, with the winners of the draw it made.
pub(super) fn print_outcomes(outcomes: &[Outcome], draws: &BTreeMap<i64, Draw>) {
    println!("\noutcomes in {} ({}):", runs_key(), outcomes.len());
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|outcome| {
            let tick = outcome.number("tick");
            let fence = outcome.number("fence");
            let winners = tick
                .and_then(|t| draws.get(&t))
                .filter(|draw| draw.fence == fence)
                .map_or_else(|| "-".to_string(), |draw| draw.winners.clone());
            let mut status = outcome.get("status").to_string();
            if outcome.stale() {
                status.push_str(" (stale)");
            }
            vec![
                format_tick(tick),
                outcome.get("replica").to_string(),
                outcome.get("fence").to_string(),
                status,
                winners,
            ]
        })
        .collect();
    let header = [
        "tick (UTC)".to_string(),
        "replica".to_string(),
        "fence".to_string(),
        "status".to_string(),
        "winners".to_string(),
    ];
    print_table(&header, &rows);
}

/// How the ticks were shared out: with a working claim every replica wins
/// some, none wins the same tick twice.
pub(super) fn print_share(outcomes: &[Outcome]) {
    let mut share: BTreeMap<&str, usize> = BTreeMap::new();
    for outcome in outcomes.iter().filter(|o| !o.stale()) {
        *share.entry(outcome.get("replica")).or_default() += 1;
    }
    let parts: Vec<String> = share
        .iter()
        .map(|(replica, n)| format!("{replica} {n}"))
        .collect();
    println!("\nticks won per replica: {}", parts.join(", "));
}

/// Checks the exactly-once promise on what Redis holds. Returns the number
/// of ticks and the violations found.
///
/// - every tick has exactly one current (non-stale) outcome, and it is `ok`;
/// - no tick between the first and the last is missing (at least once while
///   replicas are alive) and every tick is on the 2 s grid;
/// - each tick's draw key holds the fence of that tick's one outcome, and no
///   draw exists without an outcome (the job ran once, and was recorded);
/// - fences strictly increase with ticks, and `lottery:fence` is the highest.
pub(super) fn verify(
    outcomes: &[Outcome],
    draws: &BTreeMap<i64, Draw>,
    highest_fence: Option<i64>,
) -> (usize, Vec<String>) {
    let mut violations = Vec::new();
    if outcomes.is_empty() {
        violations.push(format!(
            "no outcome was recorded in {}: no replica ran the job (see the logs)",
            runs_key()
        ));
    }
    let mut current: BTreeMap<i64, Vec<&Outcome>> = BTreeMap::new();
    let mut stale_ticks = Vec::new();
    for outcome in outcomes {
        let Some(tick) = outcome.number("tick") else {
            violations.push(format!(
                "an outcome has no valid tick: {:?}",
                outcome.fields
            ));
            continue;
        };
        if outcome.stale() {
            stale_ticks.push(tick);
        } else {
            current.entry(tick).or_default().push(outcome);
        }
    }
    for tick in stale_ticks {
        if !current.contains_key(&tick) {
            violations.push(format!(
                "tick {} has only a stale outcome",
                format_tick(Some(tick))
            ));
        }
    }
    for (&tick, records) in &current {
        let when = format_tick(Some(tick));
        if tick % TICK_MS != 0 {
            violations.push(format!("tick {when} ({tick} ms) is not on the 2 s grid"));
        }
        if records.len() > 1 {
            let who: Vec<String> = records.iter().map(|o| o.describe()).collect();
            violations.push(format!(
                "tick {when} has {} current outcomes: {}",
                records.len(),
                who.join("; ")
            ));
        }
        for outcome in records {
            if outcome.get("status") != "ok" {
                let output = outcome.get("output").trim();
                violations.push(format!(
                    "tick {when}: {} exit_code={} signal={}{}",
                    outcome.describe(),
                    outcome.fields.get("exit_code").map_or("-", String::as_str),
                    outcome.fields.get("signal").map_or("-", String::as_str),
                    if output.is_empty() {
                        String::new()
                    } else {
                        format!(", output:\n{}", indent(output))
                    }
                ));
            }
        }
        match draws.get(&tick) {
            None if records.iter().any(|o| o.get("status") == "ok") => violations.push(format!(
                "tick {when} ran ok but lottery:draw:{tick} does not exist"
            )),
            Some(draw) if !records.iter().any(|o| o.number("fence") == draw.fence) => violations
                .push(format!(
                    "lottery:draw:{tick} was drawn by {} with fence {:?}, which is not \
                     the fence of the tick's outcome",
                    draw.replica, draw.fence
                )),
            _ => {}
        }
    }
    for (&tick, draw) in draws {
        if !current.contains_key(&tick) {
            violations.push(format!(
                "lottery:draw:{tick} ({}) was drawn by {} with fence {:?} but the tick has no \
                 current outcome",
                format_tick(Some(tick)),
                draw.replica,
                draw.fence
            ));
        }
    }
    let ticks: Vec<i64> = current.keys().copied().collect();
    for pair in ticks.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b - a > TICK_MS {
            violations.push(format!(
                "{} tick(s) missing between {} and {}",
                (b - a) / TICK_MS - 1,
                format_tick(Some(a)),
                format_tick(Some(b))
            ));
        }
    }
    let fences: Vec<(i64, Option<i64>)> = current
        .iter()
        .map(|(&tick, records)| (tick, records[0].number("fence")))
        .collect();
    for pair in fences.windows(2) {
        let ((a, fa), (b, fb)) = (pair[0], pair[1]);
        match (fa, fb) {
            (Some(fa), Some(fb)) if fb > fa => {}
            _ => violations.push(format!(
                "fences do not increase with ticks: {} has fence {fa:?}, {} has {fb:?}",
                format_tick(Some(a)),
                format_tick(Some(b))
            )),
        }
    }
    let max_fence = fences.iter().filter_map(|&(_, f)| f).max();
    if max_fence.is_some() && highest_fence != max_fence {
        violations.push(format!(
            "lottery:fence is {highest_fence:?}, the highest outcome fence is {max_fence:?}"
        ));
    }
    (current.len(), violations)
}
