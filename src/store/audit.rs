//! The operator actions taken on a job (pause, resume, trigger), from the
//! command line or the dashboard: who, how and when, in a capped stream
//! per job that `history`'s readers and the dashboard's job page show.

use super::{Store, StoreError};

/// How many actions a job's stream keeps (`MAXLEN ~`).
const ACTIONS_KEPT: u32 = 200;

/// One recorded action.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Action {
    /// The stream id; its first part is the Redis time, ms.
    pub id: String,
    pub at_ms: i64,
    /// `pause`, `resume` or `trigger`.
    pub action: String,
    /// Who asked: `user@host` from the command line, the operator's name
    /// and address from the dashboard.
    pub who: String,
    /// What it made, when something (a trigger's run id).
    pub detail: String,
}

impl Store {
    /// Appends an action to `job`'s stream (with `quorum`: on the first
    /// master that answers, as reads are).
    pub async fn record_action(
        &self,
        job: &str,
        action: &str,
        who: &str,
        detail: &str,
    ) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(self.keys.actions(job))
            .arg("MAXLEN")
            .arg("~")
            .arg(ACTIONS_KEPT)
            .arg("*")
            .arg("action")
            .arg(action)
            .arg("who")
            .arg(who)
            .arg("detail")
            .arg(detail);
        let _id: String = self.read_cmd(cmd).await?;
        Ok(())
    }

    /// The newest `count` actions on `job`, newest first. An entry without
    /// an action is named in a warning and left out.
    pub async fn actions(&self, job: &str, count: usize) -> Result<Vec<Action>, StoreError> {
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(self.keys.actions(job))
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(count);
        let entries: Vec<(String, Vec<(String, String)>)> = self.read_cmd(cmd).await?;
        let mut actions = Vec::with_capacity(entries.len());
        for (id, fields) in entries {
            let field = |name: &str| {
                fields
                    .iter()
                    .find_map(|(k, v)| (k == name).then(|| v.clone()))
            };
            let Some(action) = field("action") else {
                tracing::warn!(job, %id, "unreadable entry in the job's actions stream (no action); left out");
                continue;
            };
            let at_ms = id
                .split_once('-')
                .and_then(|(ms, _)| ms.parse().ok())
                .unwrap_or(0);
            actions.push(Action {
                at_ms,
                action,
                who: field("who").unwrap_or_default(),
                detail: field("detail").unwrap_or_default(),
                id,
            });
        }
        Ok(actions)
    }
}
