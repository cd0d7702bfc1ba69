//! The dashboard's single sign-on records (`Keys::sign_in`): written by
//! the replica a browser signed in on, read by whichever replica serves
//! its next request, deleted by a logout and by their own expiry (PX), so
//! every replica behind a load balancer takes a sign-in another made and
//! a logout anywhere ends it everywhere. The record's contents are the
//! dashboard's to read and check.

use std::time::Duration;

use super::{Store, StoreError};

impl Store {
    /// Stores `record` under `id_hash` for `lifetime` (on every master).
    pub async fn put_sign_in(
        &self,
        id_hash: &str,
        record: &str,
        lifetime: Duration,
    ) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.keys.sign_in(id_hash))
            .arg(record)
            .arg("PX")
            .arg(
                u64::try_from(lifetime.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            );
        self.write_everywhere("sign-in", cmd).await
    }

    /// The record under `id_hash`, unless it expired or was deleted.
    pub async fn sign_in(&self, id_hash: &str) -> Result<Option<String>, StoreError> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(self.keys.sign_in(id_hash));
        self.read_cmd(cmd).await
    }

    /// Deletes the record under `id_hash` (a logout).
    pub async fn drop_sign_in(&self, id_hash: &str) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.keys.sign_in(id_hash));
        self.write_everywhere("sign-out", cmd).await
    }
}
