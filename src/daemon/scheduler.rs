//! The job loops, one per job (an alarm in the replica's `timer` between
//! ticks, a task only while a tick is due): started at start, and started,
//! stopped or restarted by a SIGHUP reload that changes the job table (runs
//! in flight keep the definition they started with).

use super::ctx::Ctx;
use super::systemd::{self, Notice};
use super::table::{JobTable, job_table};
use super::time::to_datetime;
use crate::config::Config;
use crate::config::Job;
use crate::config::followers_of;
use crate::task::Tasks;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use super::step::Step;
use super::tick;
use super::timer::Alarm;
use crate::task::Task;

/// The job loops, one per job, and what each was started with.
pub(super) struct Scheduler {
    pub(super) loops: HashMap<String, (Arc<Job>, CancellationToken)>,
    /// The timer's task and the jobs' steps; shutdown waits for it.
    pub(super) tracker: TaskTracker,
    pub(super) claiming: CancellationToken,
}

impl Scheduler {
    /// A scheduler without jobs, its timer, the trigger consumer, the
    /// chains' follower and the backfill task running until `claiming` is cancelled.
    pub(super) fn new(ctx: &Arc<Ctx>, claiming: CancellationToken) -> Scheduler {
        let tracker = TaskTracker::new();
        tracker.spawn(tick::ring(ctx.clone(), tracker.clone(), claiming.clone()));
        // Beside the job loops, which the drain waits for before the runs:
        // a manual, a follower's or a backfill run claimed as the shutdown begins is
        // then waited for (or interrupted) and recorded like theirs. Quorum
        // mode has neither (no one stream all replicas read).
        if !ctx.store.is_quorum() {
            tracker.spawn(super::triggers::trigger_consumer(
                ctx.clone(),
                claiming.clone(),
            ));
            tracker.spawn(super::follow::follower(ctx.clone(), claiming.clone()));
            tracker.spawn(super::backfill::backfiller(ctx.clone(), claiming.clone()));
        }
        Scheduler {
            loops: HashMap::new(),
            tracker,
            claiming,
        }
    }

    /// Starts, stops and restarts job loops so they match `table`. Runs in
    /// flight are not touched: they own their job definition.
    pub(super) fn apply(
        &mut self,
        ctx: &Arc<Ctx>,
        table: &JobTable,
    ) -> (Vec<String>, Vec<String>, Vec<String>) {
        let (mut added, mut removed, mut changed) = (Vec::new(), Vec::new(), Vec::new());
        self.loops
            .retain(|name, (job, token)| match table.get(name) {
                None => {
                    token.cancel();
                    removed.push(name.clone());
                    false
                }
                Some(new) if new.definition_hash() != job.definition_hash() => {
                    token.cancel();
                    changed.push(name.clone());
                    false
                }
                Some(_) => true,
            });
        // A set, not the list: a reload that changes 100,000 jobs would
        // otherwise compare every name with every changed one.
        let was_changed: std::collections::HashSet<&str> =
            changed.iter().map(String::as_str).collect();
        for (name, job) in table {
            if self.loops.contains_key(name) {
                continue;
            }
            if !was_changed.contains(name.as_str()) {
                added.push(name.clone());
            }
            self.start_loop(ctx, job.clone());
        }
        if !removed.is_empty() || !changed.is_empty() {
            ctx.timer.forget_cancelled();
        }
        (added, removed, changed)
    }

    /// Starts the loop of `job`, whose name has none.
    fn start_loop(&mut self, ctx: &Arc<Ctx>, job: Arc<Job>) {
        let token = self.claiming.child_token();
        // A new loop catches up first.
        ctx.timer.set(Alarm {
            at: Instant::now(),
            job: job.clone(),
            cancel: token.clone(),
            step: Step::CatchUp,
        });
        self.loops.insert(job.name.clone(), (job, token));
    }

    /// Stops the loop of the job `name`, if it has one; whether it had.
    fn stop_loop(&mut self, name: &str) -> bool {
        match self.loops.remove(name) {
            Some((_, token)) => {
                token.cancel();
                true
            }
            None => false,
        }
    }
}

/// What a reload replaces or changes.
pub enum Reload {
    /// SIGHUP: read the config file again; a valid one replaces the job
    /// table, an invalid one is logged and the old table kept.
    File,
    /// An embedded scheduler's new job table and the tasks its jobs run
    /// (validated by its sender).
    Table { jobs: Vec<Job>, tasks: Tasks },
    /// An embedded scheduler's new job (validated, its name new to the
    /// table) and the task it runs: the other jobs are not touched.
    Add { job: Box<Job>, task: Arc<dyn Task> },
    /// An embedded scheduler's job removed: its loop stops; a run in
    /// flight goes on.
    Remove { name: String },
}

impl std::fmt::Debug for Reload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reload::File => f.write_str("File"),
            Reload::Table { jobs, tasks } => f
                .debug_struct("Table")
                .field("jobs", jobs)
                .field("tasks", tasks)
                .finish(),
            Reload::Add { job, .. } => f
                .debug_struct("Add")
                .field("job", job)
                .finish_non_exhaustive(),
            Reload::Remove { name } => f.debug_struct("Remove").field("name", name).finish(),
        }
    }
}

/// Applies reloads in the order they were asked for: a run of added and
/// removed jobs as one change of the table (a service that adds 10,000
/// jobs one by one does not copy the table 10,000 times), a new table or
/// file as a replacement. Runs in flight keep the definition they started
/// with.
pub(super) async fn reload_jobs(ctx: &Arc<Ctx>, scheduler: &mut Scheduler, requests: Vec<Reload>) {
    let mut edits = Vec::new();
    for request in requests {
        match request {
            Reload::Add { .. } | Reload::Remove { .. } => edits.push(request),
            whole => {
                edit_table(ctx, scheduler, std::mem::take(&mut edits));
                replace_table(ctx, scheduler, whole).await;
            }
        }
    }
    edit_table(ctx, scheduler, edits);
}

/// Adds and removes the jobs `edits` name (every other request is left
/// out), each job's loop started or stopped, the table copied once.
fn edit_table(ctx: &Arc<Ctx>, scheduler: &mut Scheduler, edits: Vec<Reload>) {
    if edits.is_empty() {
        return;
    }
    systemd::notify(&[Notice::Reloading]);
    let mut table: JobTable = (**ctx.jobs.borrow()).clone();
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    let tasks = || {
        ctx.runs
            .tasks
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    for edit in edits {
        match edit {
            Reload::Add { job, task } => {
                if let Err(e) = ctx.check_job_limits(&job) {
                    error!("job {:?} not added: {e}", job.name);
                    continue;
                }
                scheduler.stop_loop(&job.name);
                tasks().insert(&job.name, task);
                let job = Arc::<Job>::from(job);
                scheduler.start_loop(ctx, job.clone());
                added.push(job.name.clone());
                table.insert(job.name.clone(), job);
            }
            Reload::Remove { name } => {
                scheduler.stop_loop(&name);
                tasks().remove(&name);
                if table.remove(&name).is_some() {
                    removed.push(name);
                }
            }
            Reload::File | Reload::Table { .. } => {}
        }
    }
    let relinked = relink(&mut table);
    for name in &relinked {
        scheduler.stop_loop(name);
        scheduler.start_loop(ctx, table[name].clone());
    }
    if !removed.is_empty() || !relinked.is_empty() {
        ctx.timer.forget_cancelled();
    }
    ctx.jobs.send_replace(Arc::new(table));
    ctx.heartbeat_now.notify_one();
    info!(?added, ?removed, "job table changed");
    notify(&[Notice::Ready], ctx);
}

/// Tells each job of `table` its followers after jobs were added or
/// removed (an added job may follow one that was there); the names of the
/// jobs whose followers changed, whose loops run the old definition.
fn relink(table: &mut JobTable) -> Vec<String> {
    let mut followers = followers_of(table.values().map(|job| &**job));
    let mut changed = Vec::new();
    for (name, job) in table.iter_mut() {
        let now = followers.remove(name).unwrap_or_default();
        if job.followers != now {
            let mut linked = (**job).clone();
            linked.followers = now;
            *job = Arc::new(linked);
            changed.push(name.clone());
        }
    }
    changed
}

/// Replaces the job table with the file's or the one `reload` carries:
/// the job loops follow the new table.
async fn replace_table(ctx: &Arc<Ctx>, scheduler: &mut Scheduler, reload: Reload) {
    systemd::notify(&[Notice::Reloading]);
    let table = match reload {
        Reload::Add { .. } | Reload::Remove { .. } => None,
        Reload::File => read_table(ctx).await,
        Reload::Table { jobs, tasks } => {
            *ctx.runs
                .tasks
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = tasks;
            Some(Arc::new(
                jobs.into_iter()
                    .map(|job| (job.name.clone(), Arc::new(job)))
                    .collect(),
            ))
        }
    };
    let table = table.filter(|table| match ctx.check_limits(table) {
        Ok(()) => true,
        Err(e) => {
            error!("reload rejected, keeping the old job table: {e}");
            false
        }
    });
    if let Some(table) = table {
        let (added, removed, changed) = scheduler.apply(ctx, &table);
        ctx.jobs.send_replace(table);
        ctx.heartbeat_now.notify_one();
        info!(?added, ?removed, ?changed, "job table reloaded");
    }
    notify(&[Notice::Ready], ctx);
}

/// The config file's job table, read again; None (logged) when it is not
/// valid.
async fn read_table(ctx: &Ctx) -> Option<Arc<JobTable>> {
    let path = ctx.config.source.clone();
    info!(config = %path.display(), "SIGHUP: reloading the job table");
    match tokio::task::spawn_blocking(move || Config::load(&path)).await {
        Ok(Ok(new)) => {
            for warning in new.warnings(to_datetime(ctx.clock.now_ms())) {
                warn!("{warning}");
            }
            if ctx.config.restart_settings_differ(&new) {
                warn!(
                    "changes to [redis] or [daemon] take effect at the next restart; jobs and [dashboard] tokens are reloaded now"
                );
            }
            // The tokens first: one that cannot be read keeps the old
            // tokens and the old job table, never half of a reload.
            let keys = match super::serve::reload_keys(&ctx.config, &new) {
                Ok(keys) => keys,
                Err(e) => {
                    error!("reload rejected, keeping the old job table and dashboard tokens: {e}");
                    return None;
                }
            };
            if let Some(keys) = keys {
                super::serve::replace_keys(&ctx.dashboard_keys, keys);
            }
            #[cfg(feature = "process")]
            super::runs::renew_replica_env(ctx, &new);
            Some(job_table(new.jobs))
        }
        Ok(Err(e)) => {
            error!("reload rejected, keeping the old job table: {e}");
            None
        }
        Err(e) => {
            error!(error = %e, "reload failed; keeping the old job table");
            None
        }
    }
}

/// Sends `states` plus a one-line STATUS to systemd (a no-op outside it).
pub(super) fn notify(notices: &[Notice<'_>], ctx: &Ctx) {
    let status = format!(
        "{} jobs, {} runs in flight, Redis {}",
        ctx.jobs.borrow().len(),
        ctx.runs.tracker.len(),
        if *ctx.redis.up.borrow() {
            "up"
        } else {
            "unreachable"
        }
    );
    let mut all = notices.to_vec();
    all.push(Notice::Status(&status));
    systemd::notify(&all);
}
