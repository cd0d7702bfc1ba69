-- Records `abandoned` for each run in flight whose lease was not renewed in
-- time (its replica died or stalled). With on_holder_lost = "rerun", such a
-- tick (unless it was itself a rerun, or an operator asked for it to stop:
-- its entry's `kill`, kept in the record as `kill_asked_by`) joins the
-- job's pending reruns, and the
-- oldest pending rerun is started for the caller if the lease is free;
-- otherwise the finish of the run holding it starts the rerun.
-- An entry of `running` that is not one cronlease wrote (another writer, a
-- bug, a partial restore) is moved to the job's quarantine hash as
-- `running:<run id>` → the raw value, and named in the reply.
-- KEYS: state, running, lease, runs, reruns, quarantine, events, then the
--       followers' inboxes (read_followers)
-- ARGV: recorder replica, host, maxlen, rerun ('1'/'0'), overlap, lease_ms,
--       new run id (for a rerun), min_fence, notification rules
--       (read_notices; '' for none), followers (read_followers; '' for none)
-- Returns {n_abandoned, {quarantined run ids}, rerun_tick, fence, lease_key,
-- started, ctx} (the last five only when a rerun was started).
local state, running, lease, runs, reruns = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local quarantine = KEYS[6]
local recorder, host, maxlen = ARGV[1], ARGV[2], ARGV[3]
local rerun, overlap, lease_ms = ARGV[4] == '1', ARGV[5], tonumber(ARGV[6])
local new_run_id, min_fence = ARGV[7], tonumber(ARGV[8])
local notices = read_notices(KEYS[7], ARGV[9])
local followers = read_followers(ARGV[10], KEYS, 8)
local now = now_ms()
local abandoned, quarantined = 0, {}
local entries = redis.call('HGETALL', running)
for i = 1, #entries, 2 do
  local run_id, e = entries[i], read_entry(entries[i + 1])
  if not e then
    redis.call('HDEL', running, run_id)
    redis.call('HSET', quarantine, 'running:' .. run_id, entries[i + 1])
    redis.call('PEXPIRE', quarantine, 30 * 24 * 3600 * 1000)
    note_finding(state, 'running', run_id, now)
    quarantined[#quarantined + 1] = run_id
  elseif e.expires < now then
    abandoned = abandoned + 1
    redis.call('HDEL', running, run_id)
    group_give(e, run_id)
    if redis.call('GET', e.lease_key) == run_id then redis.call('DEL', e.lease_key) end
    local ctx = read_context(e.ctx)
    local fields = add_context({'tick', e.tick, 'fence', e.fence, 'run_id', run_id,
      'replica', e.replica, 'host', e.host, 'started_ms', e.started, 'finished_ms', now,
      'duration_ms', now - e.started, 'status', 'abandoned', 'attempts', '0', 'output', '',
      'trigger', e.trigger, 'recorded_by', recorder}, ctx)
    if type(e.kill) == 'string' then
      fields[#fields + 1] = 'kill_asked_by'
      fields[#fields + 1] = e.kill
    end
    local id = record_outcome(state, runs, maxlen, fields, false)
    if notices then outcome_events(notices, state, fields, id_ms(id)) end
    tell_followers(followers, state, fields, id_ms(id))
    if rerun and e.rerun == 0 and not e.kill then
      add_rerun(reruns, e.tick, run_id, e.fence, ctx)
    end
  end
end
if rerun then
  local started = take_rerun(state, running, lease, reruns, lease_ms, overlap, recorder, host,
    new_run_id, min_fence, now)
  if started then
    return {abandoned, quarantined, started[1], started[2], started[3], started[4], started[5]}
  end
end
return {abandoned, quarantined}
