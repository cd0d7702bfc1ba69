//! Group commit for the scripts every run calls (the claim and the finish):
//! calls made while another batch of the same script is on its way go to
//! Redis together, as one call of the script's batch form.
//!
//! There is no batching task and no timer: a caller that gets one of a
//! few sender slots sends everything queued so far (up to [`BATCH_MAX`],
//! its own call included or not), and whoever queues meanwhile waits for
//! a slot — or for its answer, when a batch carried its call first. A
//! lone call thus goes out at once, unbatched in effect; under load, one call
//! carries many (10,000 ticks due in the same second make a few hundred
//! calls, not 10,000), and Redis's per-call cost, the round trips and the
//! client's per-request work are paid once per batch.
//!
//! Each item runs in the batch under `pcall`, so one item's error is that
//! item's answer and the others still run. Batching needs every key on one
//! server: a single server or Sentinel, never Cluster (the keys of two jobs
//! sit in different slots) and not with `quorum` or `min_replicas_ack`,
//! whose calls the store makes one by one.

use std::sync::{Mutex, PoisonError};

use redis::{Cmd, Script, Value};
use tokio::sync::oneshot;

use super::{Conn, PRELUDE, StoreError};

/// At most this many calls go in one batch: Redis runs a batch as one
/// script, and other clients (renewals, operators) wait for it; 200 claims
/// take it a few milliseconds.
const BATCH_MAX: usize = 200;

/// Batches of one script on their way at once, per store.
const SENDERS: usize = 4;

/// One call waiting for its batch: its keys and arguments, and where its
/// answer goes.
struct Item {
    /// The call's keys, then its arguments.
    args: Cmd,
    keys: usize,
    reply: oneshot::Sender<Result<Value, StoreError>>,
}

/// The calls of one script waiting for a batch.
pub(super) struct Batcher {
    script: Script,
    queue: Mutex<Vec<Item>>,
    /// One permit per batch on its way: a few at once, so Redis always has
    /// the next batch in its input while it runs one.
    senders: tokio::sync::Semaphore,
}

/// What a batch runs around the script's body, which becomes the function
/// `one(KEYS, ARGV)`: ARGV[1] is the number of items, then each item's key
/// and argument counts, then every item's arguments; KEYS holds every
/// item's keys in order. Answers one reply per item: `{1, the script's
/// reply}`, or `{0, the error}` for an item that failed (an error reply
/// nested in the array would fail the whole batch in the client). The
/// items' claim announcements (the prelude's `announce_claim`) go out as
/// one message per channel after the last item: a subscriber wakes once
/// per batch, not once per claim.
const BATCH_LOOP: &str = r"
announcements = {}
local n = tonumber(ARGV[1])
local replies = {}
local k, a = 0, 1 + 2 * n
for i = 1, n do
  local nk, na = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local keys, argv = {unpack(KEYS, k + 1, k + nk)}, {unpack(ARGV, a + 1, a + na)}
  k, a = k + nk, a + na
  local ok, reply = pcall(one, keys, argv)
  if ok then
    replies[i] = {1, reply}
  elseif type(reply) == 'table' and reply.err then
    replies[i] = {0, reply.err}
  else
    replies[i] = {0, tostring(reply)}
  end
end
for channel, lines in pairs(announcements) do
  redis.call('PUBLISH', channel, table.concat(lines, '\n'))
end
return replies
";

impl Batcher {
    /// The batcher of the script whose body (without the prelude) is
    /// `body`.
    pub(super) fn new(body: &str) -> Batcher {
        Batcher {
            script: Script::new(&format!(
                "{PRELUDE}\nlocal function one(KEYS, ARGV)\n{body}\nend\n{BATCH_LOOP}"
            )),
            queue: Mutex::new(Vec::new()),
            senders: tokio::sync::Semaphore::new(SENDERS),
        }
    }

    /// Runs one call of the script (`args`: its `keys` keys, then its
    /// arguments) in a batch, on `conn`; its reply.
    ///
    /// If the caller whose batch carries this call stops waiting (its task
    /// was cancelled), the call may or may not have run: it answers an
    /// ambiguous error, which callers retry as they retry a lost reply.
    pub(super) async fn call(
        &self,
        conn: Conn,
        args: Cmd,
        keys: usize,
    ) -> Result<Value, StoreError> {
        let (reply, mut answer) = oneshot::channel();
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Item { args, keys, reply });
        loop {
            // Wait for a sender's slot, unless a batch carries this call
            // meanwhile.
            let slot = tokio::select! {
                biased;
                answer = &mut answer => {
                    return answer.unwrap_or_else(|_| Err(super::unanswered()));
                }
                slot = self.senders.acquire() => slot,
            };
            let items: Vec<Item> = {
                let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
                // A call whose caller stopped waiting before it was sent is
                // not sent: nothing then acts on what it might change.
                let mut items = Vec::new();
                while items.len() < BATCH_MAX && !queue.is_empty() {
                    let n = (BATCH_MAX - items.len()).min(queue.len());
                    items.extend(queue.drain(..n).filter(|item| !item.reply.is_closed()));
                }
                items
            };
            if items.is_empty() {
                // This call is in a batch on its way.
                drop(slot);
                return answer.await.unwrap_or_else(|_| Err(super::unanswered()));
            }
            // Boxed: a call's future stays small while it waits (most calls
            // never send), which under load is thousands.
            Box::pin(self.send(conn.clone(), items)).await;
            drop(slot);
        }
    }

    /// Sends `items` as one call and hands each its answer.
    async fn send(&self, mut conn: Conn, items: Vec<Item>) {
        let build = || {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(self.script.get_hash());
            cmd.arg(items.iter().map(|item| item.keys).sum::<usize>());
            for item in &items {
                for arg in item.args.args_iter().take(item.keys) {
                    push(&mut cmd, arg);
                }
            }
            cmd.arg(items.len());
            for item in &items {
                let args = item.args.args_iter().count();
                cmd.arg(item.keys).arg(args - item.keys);
            }
            for item in &items {
                for arg in item.args.args_iter().skip(item.keys) {
                    push(&mut cmd, arg);
                }
            }
            cmd
        };
        let mut result: Result<Value, redis::RedisError> = build().query_async(&mut conn).await;
        if let Err(e) = &result
            && e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        {
            // Nothing ran: load the script and send the batch again.
            result = match self.script.prepare_invoke().load_async(&mut conn).await {
                Ok(_) => build().query_async(&mut conn).await,
                Err(e) => Err(e),
            };
        }
        match result {
            Ok(Value::Array(replies)) if replies.len() == items.len() => {
                for (item, reply) in items.into_iter().zip(replies) {
                    let _ = item.reply.send(item_answer(reply));
                }
            }
            Ok(other) => {
                for item in items {
                    let _ = item.reply.send(Err(super::protocol("batch", &other)));
                }
            }
            Err(e) => {
                // Each call gets the batch's error: a timeout or a dropped
                // connection stays ambiguous for every one of them.
                for item in items {
                    let _ = item.reply.send(Err(StoreError::Redis(e.clone())));
                }
            }
        }
    }
}

/// Appends one argument of a call to the batch's command. Calls are built
/// with plain `arg`s only: nothing else has a meaning in a script call.
fn push(cmd: &mut Cmd, arg: redis::Arg<&[u8]>) {
    if let redis::Arg::Simple(bytes) = arg {
        cmd.arg(bytes);
    }
}

/// One item's answer in a batch's reply: `{1, reply}` or `{0, error}`.
fn item_answer(reply: Value) -> Result<Value, StoreError> {
    let Value::Array(mut pair) = reply else {
        return Err(super::protocol("batch item", &reply));
    };
    match (pair.pop(), pair.pop(), pair.is_empty()) {
        (Some(reply), Some(Value::Int(1)), true) => Ok(reply),
        (Some(error), Some(Value::Int(0)), true) => {
            let message = super::as_string(&error).unwrap_or_else(|| format!("{error:?}"));
            // What the script raised (say WRONGTYPE from a key another
            // writer made): definite, nothing to read back.
            Err(StoreError::Redis(redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "script error",
                message,
            ))))
        }
        (last, first, _) => Err(super::protocol(
            "batch item",
            &Value::Array(first.into_iter().chain(last).collect()),
        )),
    }
}
