//! The heartbeat task: every `heartbeat`, this replica's record goes to
//! Redis and everyone's comes back; from them the clock offset, the epoch
//! (state loss), the live replicas the claims rank among, the runs of dead
//! replicas to sweep, and replicas silent long enough to forget.

use super::*;

/// The heartbeat reads Redis time (for the clock offset) every this many
/// beats.
pub(super) const CLOCK_EVERY_N_HEARTBEATS: u64 = 6;

pub(super) async fn heartbeat_loop(ctx: Arc<Ctx>, cancel: CancellationToken) {
    let mut interval = tokio::time::interval(ctx.config.daemon.heartbeat);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let new_epoch = Uuid::new_v4().to_string();
    let own_heartbeat_ms =
        i64::try_from(ctx.config.daemon.heartbeat.as_millis()).unwrap_or(i64::MAX / 8);
    // Per Redis master (one but with `quorum`).
    let mut epoch_seen: HashMap<String, String> = HashMap::new();
    let mut beats: u64 = 0;
    // Replicas whose record did not parse, named once each in the log.
    let mut unreadable: std::collections::HashSet<String> = std::collections::HashSet::new();
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = interval.tick() => {}
            () = ctx.heartbeat_now.notified() => {}
        }
        let runs = ctx.watchdog.list().await;
        let config_hash = ctx
            .jobs
            .borrow()
            .values()
            .map(|job| (job.name.clone(), job.definition_hash()))
            .collect();
        let record = Heartbeat {
            host: ctx.identity.host.clone(),
            pid: u64::from(ctx.identity.pid),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_ms: ctx.started_ms,
            last_seen_ms: ctx.clock.now_ms(),
            heartbeat_ms: own_heartbeat_ms,
            lease_ms: i64::try_from(ctx.config.daemon.lease.as_millis()).unwrap_or(i64::MAX / 8),
            config_hash,
            runs,
        }
        .to_json();
        let sent = local_now_ms();
        // The clock offset drifts slowly: measure it every few heartbeats
        // (an idle replica sends as few commands as it can).
        let time = if beats.is_multiple_of(CLOCK_EVERY_N_HEARTBEATS) {
            ServerTime::Read
        } else {
            ServerTime::Skip
        };
        beats += 1;
        let reply = match ctx
            .store
            .heartbeat(&ctx.identity.replica, &record, &new_epoch, time)
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                ctx.redis_failed(&e);
                continue;
            }
        };
        if let Some(server_ms) = reply.server_ms {
            ctx.clock.observe(server_ms, sent, local_now_ms());
        }
        let server_ms = reply.server_ms.unwrap_or_else(|| ctx.clock.now_ms());
        ctx.redis_answered();
        for now in &reply.epochs {
            match epoch_seen.insert(now.node.clone(), now.epoch.clone()) {
                None if now.created => info!(epoch = %now.epoch, redis = %now.node, "created the deployment epoch"),
                Some(previous) if previous != now.epoch => ctx.state_loss(
                    None,
                    &format!("the deployment epoch of {} changed from {previous} to {} (Redis restarted without its data, or failed over to a replica that lacked it)", now.node, now.epoch),
                ),
                _ => {}
            }
        }
        let mut others: Vec<(&str, Heartbeat)> = Vec::with_capacity(reply.replicas.len());
        for (id, raw) in &reply.replicas {
            if *id == ctx.identity.replica {
                continue;
            }
            match Heartbeat::parse(raw) {
                Ok(record) => others.push((id, record)),
                Err(e) => {
                    if unreadable.insert(id.clone()) {
                        warn!(replica = %id, error = %e, "unreadable heartbeat record in Redis; that replica is taken as absent");
                    }
                }
            }
        }
        let mut live: Vec<String> = others
            .iter()
            .filter(|(_, record)| record.is_alive(server_ms))
            .map(|(id, _)| id.to_string())
            .collect();
        if !live.contains(&ctx.identity.replica) {
            live.push(ctx.identity.replica.clone());
        }
        ctx.live.replace(live);
        for (replica, record) in &others {
            // Silent past its heartbeat and lease: its runs are swept on every
            // heartbeat for a while (a lease renewed just before it died
            // expires up to a lease later); after that it is just history.
            let silent_for = record.silent_for_ms(server_ms);
            if silent_for > REPLICA_FORGET_AFTER.as_millis() as i64 {
                match ctx.store.forget_replica(replica, record.last_seen_ms).await {
                    Ok(true) => {
                        info!(%replica, silent_ms = silent_for, "forgot a replica silent for longer than {}", humantime::format_duration(REPLICA_FORGET_AFTER));
                    }
                    Ok(false) => {}
                    Err(e) => {
                        debug!(%replica, error = %e, "cannot forget a long-silent replica yet")
                    }
                }
                continue;
            }
            let dead_after = record.dead_after_ms();
            let sweep_until =
                dead_after + 2 * (record.lease_ms + record.heartbeat_ms) + 2 * own_heartbeat_ms;
            if silent_for <= dead_after || silent_for > sweep_until {
                continue;
            }
            let jobs: Vec<String> = record.runs.iter().map(|r| r.job.clone()).collect();
            if !jobs.is_empty() {
                debug!(%replica, silent_ms = silent_for, runs = jobs.len(), "replica is silent; sweeping its runs");
            }
            for name in jobs {
                let job = ctx.jobs.borrow().get(&name).cloned();
                if let Some(job) = job {
                    start_reruns(&ctx, &job, sweep(&ctx, &job).await);
                }
            }
        }
    }
}
