//! What operators read and change: a job's repair, and
//! the hashes and streams `status`, `history` and the dashboard read.

use super::{Store, StoreError};

impl Store {
    /// Clears what no honest writer puts in `job`'s state (`repair.lua`);
    /// returns what was cleared (with `quorum`: on any master).
    pub async fn repair(&self, job: &str) -> Result<Vec<String>, StoreError> {
        let mut invocation = self.scripts.repair.prepare_invoke();
        invocation
            .key(self.keys.state(job))
            .key(self.keys.quarantine(job));
        let cleared: Vec<Vec<String>> = self.invoke_on_all("repair", &invocation).await?;
        let mut all: Vec<String> = cleared.into_iter().flatten().collect();
        all.sort();
        all.dedup();
        Ok(all)
    }

    /// A hash as field → value (state, running, replicas).
    pub async fn hash(&self, key: &str) -> Result<Vec<(String, String)>, StoreError> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(key);
        self.read_cmd(cmd).await
    }

    /// The newest `count` entries of a job's outcome stream, newest first.
    pub async fn history(
        &self,
        job: &str,
        count: usize,
    ) -> Result<Vec<(String, Vec<(String, String)>)>, StoreError> {
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(self.keys.runs(job))
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(count);
        self.read_cmd(cmd).await
    }

    /// The `count` entries of a job's outcome stream before the entry
    /// `before` (a stream id, itself left out), newest first: the next
    /// page of the dashboard's API.
    #[cfg_attr(
        not(feature = "dashboard"),
        allow(dead_code, reason = "read by the dashboard only")
    )]
    pub async fn history_before(
        &self,
        job: &str,
        before: &str,
        count: usize,
    ) -> Result<Vec<(String, Vec<(String, String)>)>, StoreError> {
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(self.keys.runs(job))
            .arg(format!("({before}"))
            .arg("-")
            .arg("COUNT")
            .arg(count);
        self.read_cmd(cmd).await
    }

    /// The newest `count` entries of a job's outcome stream, newest
    /// first, with only the fields named in `fields` (`outcome_fields.lua`:
    /// Redis leaves the rest, the output tail above all, out of the reply).
    pub async fn history_fields(
        &self,
        job: &str,
        count: usize,
        fields: &[&str],
    ) -> Result<Vec<(String, Vec<(String, String)>)>, StoreError> {
        let mut invocation = self.scripts.outcome_fields.prepare_invoke();
        invocation.key(self.keys.runs(job)).arg(count);
        for field in fields {
            invocation.arg(*field);
        }
        let invocation = &invocation;
        self.read(|mut conn| async move { invocation.invoke_async(&mut conn).await })
            .await
    }

    /// The newest `count` outcomes of a job recorded at or after
    /// `since_ms` (Redis time), newest first.
    #[cfg_attr(
        not(feature = "dashboard"),
        allow(dead_code, reason = "read by the dashboard only")
    )]
    pub async fn history_since(
        &self,
        job: &str,
        since_ms: i64,
        count: usize,
    ) -> Result<Vec<(String, Vec<(String, String)>)>, StoreError> {
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(self.keys.runs(job))
            .arg("+")
            .arg(since_ms.max(0))
            .arg("COUNT")
            .arg(count);
        self.read_cmd(cmd).await
    }

    /// One entry of a job's outcome stream.
    pub async fn outcome_entry(
        &self,
        job: &str,
        id: &str,
    ) -> Result<Option<Vec<(String, String)>>, StoreError> {
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(self.keys.runs(job)).arg(id).arg(id);
        let entries: Vec<(String, Vec<(String, String)>)> = self.read_cmd(cmd).await?;
        Ok(entries.into_iter().next().map(|(_, fields)| fields))
    }

    /// Whether any key of the job exists (for "unknown job" without a config).
    pub async fn job_exists(&self, job: &str) -> Result<bool, StoreError> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(self.keys.state(job)).arg(self.keys.runs(job));
        let n: i64 = self.read_cmd(cmd).await?;
        Ok(n > 0)
    }
}
