-- Records `abandoned` for each run in flight whose lease was not renewed in
-- time (its replica died or stalled), and, for on_holder_lost = "rerun",
-- claims one rerun of such a tick for the caller, with a new fence. A run
-- that is itself a rerun is not rerun again.
-- KEYS: state, running, lease, runs
-- ARGV: recorder replica, host, maxlen, rerun ('1'/'0'), overlap, lease_ms,
--       new run id (for a rerun), min_fence
-- Returns {n_abandoned, rerun_tick, fence, lease_key, started} (the last four
-- only when a rerun was claimed).
local state, running, lease, runs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local recorder, host, maxlen = ARGV[1], ARGV[2], ARGV[3]
local rerun, overlap, lease_ms = ARGV[4] == '1', ARGV[5], tonumber(ARGV[6])
local new_run_id, min_fence = ARGV[7], tonumber(ARGV[8])
local now = now_ms()
local abandoned, reply = 0, nil
local entries = redis.call('HGETALL', running)
for i = 1, #entries, 2 do
  local run_id, e = entries[i], cjson.decode(entries[i + 1])
  if e.expires < now then
    abandoned = abandoned + 1
    redis.call('HDEL', running, run_id)
    record_outcome(state, runs, maxlen, {'tick', e.tick, 'fence', e.fence, 'run_id', run_id,
      'replica', e.replica, 'host', e.host, 'started_ms', e.started, 'finished_ms', now,
      'duration_ms', now - e.started, 'status', 'abandoned', 'attempts', '0', 'output', '',
      'trigger', e.trigger, 'recorded_by', recorder}, false)
    if rerun and e.rerun == 0 and reply == nil then
      local holder = (overlap ~= 'allow') and redis.call('GET', lease)
      if holder == run_id then holder = false end
      if holder and overlap == 'skip' then
        record_outcome(state, runs, maxlen,
          skip_fields(e.tick, new_run_id, recorder, host, now, 'rerun'), false)
      else
        local fence, lease_key = start_run(state, running, lease, new_run_id, e.tick, lease_ms,
          overlap, recorder, host, 'rerun', 1, min_fence, now)
        reply = {e.tick, fence, lease_key, now}
      end
    end
  end
end
if reply then return {abandoned, reply[1], reply[2], reply[3], reply[4]} end
return {abandoned}
