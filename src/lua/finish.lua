-- Records the outcome of one run and releases what it held; then, if the
-- job has a pending rerun (see sweep.lua) and the lease is now free, starts
-- it for the caller.
-- KEYS: state, running, lease_key, runs, done (the previous release's dedup
--       window, only read), lease (the job's base lease key), reruns, done_at,
--       events (see read_notices), then the followers' inboxes
--       (read_followers)
-- ARGV: run_id, maxlen, window_ms, window_count, may_rerun ('1'/'0'),
--       overlap, lease_ms, new run id (for a rerun), min_fence, replica,
--       host, delivery ('first': no earlier attempt sent this outcome, so
--       the dedup window cannot hold it yet; 'again': a retry or a spooled
--       copy), the job's notification rules (read_notices; '' for none),
--       its followers (read_followers; '' for none), whether the run may
--       hold a concurrency group's slot ('1': its entry is read for it;
--       '0': the job has no group), then outcome field name/value pairs
-- The outcome is current when the run was still in `running`. When it was
-- not, either someone recorded it (a sweep, abandoned; or this very
-- outcome, delivered before the dedup window forgot it): it is appended
-- marked stale; or Redis lost the job's state after the run started (see
-- lost_since), and no record of the run can exist: it is current again,
-- answered `restored`. Within the dedup window (see remember_done) a second
-- delivery of the same outcome (a retry after a lost reply, a spooled copy)
-- is a no-op.
-- A `killed` outcome gets `killed_by`, who asked (the run's entry's `kill`).
-- Returns {current|restored|stale|duplicate, stream id[, rerun tick, fence,
-- lease_key, started, ctx]}.
local state, running, lease_key, runs, done = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lease, reruns, done_at = KEYS[6], KEYS[7], KEYS[8]
local notices = read_notices(KEYS[9], ARGV[13])
local followers = read_followers(ARGV[14], KEYS, 10)
local run_id, maxlen = ARGV[1], ARGV[2]
local window_ms, window_count = tonumber(ARGV[3]), tonumber(ARGV[4])
local may_rerun, overlap, lease_ms = ARGV[5] == '1', ARGV[6], tonumber(ARGV[7])
local new_run_id, min_fence, replica, host = ARGV[8], tonumber(ARGV[9]), ARGV[10], ARGV[11]
if ARGV[12] ~= 'first' then
  local at = redis.call('ZSCORE', done_at, run_id)
  if at then return {'duplicate', done_id(runs, done, run_id, at)} end
end
local fields = {unpack(ARGV, 16)}
-- A run an operator stopped (kill.lua): who asked, from its entry in
-- flight ('' once the entry is gone: recorded already, or Redis lost it).
for i = 1, #fields - 1, 2 do
  if fields[i] == 'status' then
    if fields[i + 1] == 'killed' then
      local e = read_entry(redis.call('HGET', running, run_id) or '')
      fields[#fields + 1] = 'killed_by'
      fields[#fields + 1] = e and type(e.kill) == 'string' and e.kill or ''
    end
    break
  end
end
local kind = 'current'
-- The run's concurrency group slot, if it holds one, is given back.
if ARGV[15] == '1' then
  group_give(read_entry(redis.call('HGET', running, run_id) or ''), run_id)
end
if redis.call('HDEL', running, run_id) == 0 then
  kind = 'stale'
  for i = 16, #ARGV - 1, 2 do
    if ARGV[i] == 'started_ms' then
      if lost_since(state, tonumber(ARGV[i + 1]) or 0) then kind = 'restored' end
      break
    end
  end
end
if redis.call('GET', lease_key) == run_id then redis.call('DEL', lease_key) end
local id = record_outcome(state, runs, maxlen, fields, kind == 'stale')
if kind ~= 'stale' then
  if notices then outcome_events(notices, state, fields, id_ms(id)) end
  tell_followers(followers, state, fields, id_ms(id))
end
-- Recorded when its stream entry was: no TIME for the window's clock.
remember_done(done_at, run_id, id_ms(id), window_count, window_ms)
if may_rerun then
  local started = take_rerun(state, running, lease, reruns, lease_ms, overlap, replica, host,
    new_run_id, min_fence, now_ms())
  if started then return {kind, id, started[1], started[2], started[3], started[4], started[5]} end
end
return {kind, id}
