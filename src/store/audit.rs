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
    /// A pause's end (Redis ms), when it has one; for the end of a timed
    /// pause, the end it had.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<i64>,
    /// A pause's reason ("" for none); for its end, the reason it had.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
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
        self.actions_of(&self.keys.actions(job), job, count).await
    }

    /// The newest `count` pauses and resumes of the whole cluster (`pause
    /// --all`, `resume --all`, the end of a timed one), newest first.
    pub async fn cluster_actions(&self, count: usize) -> Result<Vec<Action>, StoreError> {
        self.actions_of(&self.keys.pause_all_actions(), "(cluster)", count)
            .await
    }

    async fn actions_of(
        &self,
        key: &str,
        job: &str,
        count: usize,
    ) -> Result<Vec<Action>, StoreError> {
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(key).arg("+").arg("-").arg("COUNT").arg(count);
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
                until_ms: field("until_ms").and_then(|v| v.parse().ok()),
                reason: field("reason")
                    .map(|r| crate::inert::escape(&r).into_owned())
                    .unwrap_or_default(),
                id,
            });
        }
        Ok(actions)
    }
}
