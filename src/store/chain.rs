//! Chains on the Redis side: a job's followers as the scripts that record
//! its outcomes take them ([`Followers`]), the inboxes those scripts fill
//! (`Keys::inbox`, one stream per upstream and follower, in the upstream's
//! hash tag), and the follower's script that starts one run per entry
//! (after.lua) and its bookkeeping once the entry is dealt with.

use redis::Value;

use super::{Claimant, Keys, Reply, Store, StoreError, as_string, duration_ms, is_run_id};
use crate::config::{PARAM_FIELD_PREFIX, is_param_name, param_value_problem};

/// A job's followers as the finish and sweep scripts take them
/// (prelude.lua's `read_followers`): one argument and the inbox of each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Followers {
    arg: String,
    inboxes: Vec<String>,
}

impl Followers {
    /// None: an outcome tells no one.
    pub const NONE: Followers = Followers {
        arg: String::new(),
        inboxes: Vec::new(),
    };

    /// `job`'s followers, each with the outcomes it follows (`ok`,
    /// `failed`, `any`); none when the list is empty.
    pub fn new<'a>(
        keys: &Keys,
        job: &str,
        followers: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Followers {
        let mut arg = format!("{job}|{}", keys.after_channel());
        let mut inboxes = Vec::new();
        for (follower, on) in followers {
            arg.push('|');
            arg.push_str(follower);
            arg.push('=');
            arg.push_str(on);
            inboxes.push(keys.inbox(job, follower));
        }
        if inboxes.is_empty() {
            return Followers::NONE;
        }
        Followers { arg, inboxes }
    }

    /// The script argument (`""`: none).
    pub fn arg(&self) -> &str {
        &self.arg
    }

    /// The followers' inboxes, the script's keys after its own.
    pub fn inboxes(&self) -> &[String] {
        &self.inboxes
    }
}

/// One entry of an inbox: an upstream run's outcome a follower runs for.
/// Evidence: every field checked for its form, the entry skipped (and
/// named) otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEntry {
    /// The stream entry id.
    pub id: String,
    pub upstream_run_id: String,
    pub status: String,
    /// The tick of the run that began the chain, ms.
    pub root_tick_ms: i64,
    /// When the upstream's outcome was recorded (Redis ms): the follower's
    /// tick.
    pub at_ms: i64,
    /// The upstream run's parameters, `(name, value)`.
    pub params: Vec<(String, String)>,
}

/// An inbox entry that does not read as one cronlease wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgedEntry {
    pub id: String,
    pub why: &'static str,
}

/// `[id, [field, value, …]]` as an inbox entry.
fn parse_entry(entry: &Value) -> Result<InboxEntry, ForgedEntry> {
    let Value::Array(parts) = entry else {
        return Err(ForgedEntry {
            id: String::new(),
            why: "not an entry",
        });
    };
    let id = parts.first().and_then(as_string).unwrap_or_default();
    let forged = |why| ForgedEntry {
        id: id.clone(),
        why,
    };
    let Some(Value::Array(fields)) = parts.get(1) else {
        return Err(forged("no fields"));
    };
    let (mut run_id, mut status, mut root, mut at) = (None, None, None, None);
    let mut params = Vec::new();
    for pair in fields.chunks(2) {
        let (Some(name), Some(value)) = (
            pair.first().and_then(as_string),
            pair.get(1).and_then(as_string),
        ) else {
            return Err(forged("a field that is not text"));
        };
        match name.as_str() {
            "run_id" => run_id = Some(value),
            "status" => status = Some(value),
            "root_tick" => root = value.parse::<i64>().ok(),
            "at" => at = value.parse::<i64>().ok(),
            "tick" | "fence" => {}
            _ => match name.strip_prefix(PARAM_FIELD_PREFIX) {
                Some(param) if is_param_name(param) && param_value_problem(&value).is_none() => {
                    params.push((param.to_string(), value));
                }
                Some(_) => return Err(forged("a parameter that is not one")),
                None => {}
            },
        }
    }
    let run_id = run_id
        .filter(|r| is_run_id(r))
        .ok_or_else(|| forged("no run id"))?;
    let status = status
        .filter(|s| crate::outcome::Status::parse(s).is_some())
        .ok_or_else(|| forged("no status"))?;
    let (Some(root_tick_ms), Some(at_ms)) = (root, at) else {
        return Err(forged("no root tick or time"));
    };
    Ok(InboxEntry {
        id,
        upstream_run_id: run_id,
        status,
        root_tick_ms,
        at_ms,
        params,
    })
}

/// What a follower's run is started with.
#[derive(Debug, Clone)]
pub struct FollowRequest<'a> {
    pub job: &'a str,
    pub upstream: &'a str,
    pub entry: &'a InboxEntry,
    /// Redis ms after which the script must take no effect.
    pub deadline_ms: i64,
    pub run_id: &'a str,
    pub claimant: Claimant<'a>,
    /// For `after_all`: every upstream; empty for each outcome.
    pub join: &'a [String],
    /// `Some(grace)`: an entry older than that is recorded `missed`
    /// (`misfire = "skip"`); None: run however late.
    pub skip_after: Option<std::time::Duration>,
    /// The parameters the run gets.
    pub params: &'a [(String, String)],
    /// The cluster's pause as the replica knows it: while it holds, the
    /// follower's run is not started, as a paused job's is not.
    pub cluster_pause: super::ClusterHold,
}

/// What the follower's script did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowReply {
    /// Started: the run is the caller's, with its context (outcome
    /// fields: root tick, upstreams, parameters).
    Claimed {
        fence: u64,
        started_ms: i64,
        lease_key: String,
        context: Vec<(String, String)>,
        /// Other runs of the job in flight whose lease lapsed: the caller
        /// sweeps them.
        expired: u32,
    },
    /// `after_all`: recorded; the run starts when every upstream ended.
    Waiting,
    /// A run was in flight and `overlap = "skip"`: recorded
    /// `skipped_overlap`.
    Busy { holder: String },
    /// Later than the misfire grace with `misfire = "skip"`: recorded
    /// `missed`.
    Missed,
    /// The job is paused: not run.
    Paused,
    /// This entry was dealt with before.
    Duplicate,
    /// Past its deadline: nothing done, the entry is read again.
    Expired,
    /// The job's state holds a `field` that is not a number: not run.
    Corrupt { field: String, value: String },
    /// The job's concurrency group has no slot free: nothing changed, the
    /// entry is read again.
    GroupFull,
}

/// Name, value pairs of a reply's array at `i`.
pub(super) fn pairs(r: &Reply, i: usize) -> Vec<(String, String)> {
    let items = r.strings(i);
    items
        .chunks_exact(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect()
}

fn parse_follow(reply: Value) -> Result<FollowReply, StoreError> {
    let r = Reply::new(reply, "after")?;
    Ok(match r.string(0)?.as_str() {
        "claimed" => FollowReply::Claimed {
            fence: r.fence(1)?,
            started_ms: r.int(2)?,
            lease_key: r.string(3)?,
            context: pairs(&r, 4),
            expired: u32::try_from(r.int_or(5, 0)).unwrap_or(0),
        },
        "waiting" => FollowReply::Waiting,
        "group_full" => FollowReply::GroupFull,
        "busy" => FollowReply::Busy {
            holder: r.string_or_empty(1),
        },
        "missed" => FollowReply::Missed,
        "paused" => FollowReply::Paused,
        "duplicate" => FollowReply::Duplicate,
        "expired" => FollowReply::Expired,
        "corrupt" => FollowReply::Corrupt {
            field: r.string(1)?,
            value: r.string_or_empty(2),
        },
        _ => return Err(r.bad()),
    })
}

impl Store {
    /// The oldest `count` entries of `follower`'s inbox at `upstream`: the
    /// ones that read as cronlease wrote them, and the others.
    pub async fn read_inbox(
        &self,
        upstream: &str,
        follower: &str,
        count: usize,
    ) -> Result<(Vec<InboxEntry>, Vec<ForgedEntry>), StoreError> {
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(self.keys.inbox(upstream, follower))
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(count);
        let reply: Value = self.read_cmd(cmd).await?;
        let Value::Array(entries) = reply else {
            return Ok((Vec::new(), Vec::new()));
        };
        let (mut good, mut forged) = (Vec::new(), Vec::new());
        for entry in &entries {
            match parse_entry(entry) {
                Ok(entry) => good.push(entry),
                Err(bad) => forged.push(bad),
            }
        }
        Ok((good, forged))
    }

    /// Runs the follower's script for one inbox entry.
    pub async fn follow(&self, request: &FollowRequest<'_>) -> Result<FollowReply, StoreError> {
        let keys = &self.keys;
        let job = request.job;
        let entry = request.entry;
        let mut invocation = self.scripts.after.prepare_invoke();
        invocation
            .key(keys.state(job))
            .key(keys.running(job))
            .key(keys.lease(job))
            .key(keys.runs(job))
            .key(keys.caused(job))
            .key(keys.joins(job));
        if let Some(group) = request.claimant.group {
            invocation
                .key(keys.group_slots(&group.name))
                .key(keys.group_waiting(&group.name));
        }
        invocation
            .arg(request.upstream)
            .arg(&entry.upstream_run_id)
            .arg(&entry.status)
            .arg(entry.root_tick_ms)
            .arg(entry.at_ms)
            .arg(request.deadline_ms)
            .arg(request.run_id)
            .arg(duration_ms(request.claimant.lease))
            .arg(request.claimant.overlap.as_str())
            .arg(request.claimant.replica)
            .arg(request.claimant.host)
            .arg(request.claimant.history)
            .arg(request.claimant.min_fence)
            .arg(request.join.join(","))
            .arg(if request.skip_after.is_some() {
                "skip"
            } else {
                "run"
            })
            .arg(request.skip_after.map_or(0, duration_ms))
            .arg(keys.claims_channel())
            .arg(job)
            .arg(request.cluster_pause.as_arg())
            .arg(request.claimant.group.map_or("", |g| g.name.as_str()))
            .arg(request.claimant.group.map_or(0, |g| g.max));
        for (name, value) in request.params {
            invocation
                .arg(format!("{PARAM_FIELD_PREFIX}{name}"))
                .arg(value);
        }
        let mut conn = self.single("chains (`after`)").await?;
        let reply: Value = invocation.invoke_async(&mut conn).await?;
        parse_follow(reply)
    }

    /// An inbox entry dealt with: deleted from the inbox, then its cause
    /// dated `now_ms` (Redis ms) in the follower's `caused`, from which
    /// after.lua forgets it an hour on.
    pub async fn inbox_done(
        &self,
        job: &str,
        upstream: &str,
        entry: &str,
        upstream_run_id: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut conn = self.single("chains (`after`)").await?;
        let _: i64 = redis::cmd("XDEL")
            .arg(self.keys.inbox(upstream, job))
            .arg(entry)
            .query_async(&mut conn)
            .await?;
        let _: i64 = redis::cmd("ZADD")
            .arg(self.keys.caused(job))
            .arg("XX")
            .arg(now_ms)
            .arg(format!("{upstream} {upstream_run_id}"))
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// A subscription to the chains' wake-ups (the name of each upstream
    /// whose outcome filled an inbox).
    pub async fn after_subscriber(&self) -> Result<redis::aio::PubSub, StoreError> {
        self.subscriber(&self.keys.after_channel()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(fields: &[(&str, &str)]) -> Value {
        let mut items = Vec::new();
        for (name, value) in fields {
            items.push(Value::BulkString(name.as_bytes().to_vec()));
            items.push(Value::BulkString(value.as_bytes().to_vec()));
        }
        Value::Array(vec![
            Value::BulkString(b"1-0".to_vec()),
            Value::Array(items),
        ])
    }

    #[test]
    fn an_inbox_entry_is_read_only_when_every_field_has_its_form() {
        let good = [
            ("run_id", "abc-1"),
            ("status", "ok"),
            ("tick", "5"),
            ("fence", "3"),
            ("root_tick", "5"),
            ("at", "9"),
            ("param.region", "eu"),
        ];
        let read = parse_entry(&entry(&good)).expect("a written entry reads");
        assert_eq!(read.upstream_run_id, "abc-1");
        assert_eq!((read.root_tick_ms, read.at_ms), (5, 9));
        assert_eq!(read.params, vec![("region".to_string(), "eu".to_string())]);
        for (field, bad) in [
            ("run_id", "../../etc"),
            ("status", "winner"),
            ("root_tick", "soon"),
            ("at", ""),
            ("param.region", "eu\u{1b}[2J"),
        ] {
            let fields: Vec<_> = good
                .iter()
                .map(|(n, v)| if *n == field { (*n, bad) } else { (*n, *v) })
                .collect();
            assert!(
                parse_entry(&entry(&fields)).is_err(),
                "{field} = {bad:?} was trusted"
            );
        }
    }
}
