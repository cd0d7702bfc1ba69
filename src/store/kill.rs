//! `cronlease kill`: the request that stops runs in flight (kill.lua),
//! and the subscription on which their holders hear of it.

use super::{Store, StoreError};

impl Store {
    /// Asks the holders of `job`'s runs in flight to stop them (only
    /// `run_id`, when given), recording `who` asked in each run's entry;
    /// returns the run ids asked, sorted (with `quorum`: those in flight
    /// on any master).
    pub async fn kill(
        &self,
        job: &str,
        run_id: Option<&str>,
        who: &str,
    ) -> Result<Vec<String>, StoreError> {
        let mut invocation = self.scripts.kill.prepare_invoke();
        invocation
            .key(self.keys.running(job))
            .arg(who)
            .arg(run_id.unwrap_or(""))
            .arg(self.keys.kill_channel());
        let asked: Vec<Vec<String>> = self.invoke_on_all("kill", &invocation).await?;
        let mut all: Vec<String> = asked.into_iter().flatten().collect();
        all.sort();
        all.dedup();
        Ok(all)
    }

    /// A subscription to the kill requests (the id of each run asked to
    /// stop), on the first node that takes it.
    pub async fn kill_subscriber(&self) -> Result<redis::aio::PubSub, StoreError> {
        self.subscriber(&self.keys.kill_channel()).await
    }
}
