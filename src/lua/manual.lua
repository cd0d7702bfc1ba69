-- Starts a manual run (`cronlease trigger`) of one job for run id ARGV[2].
-- Unlike a claim it has no tick to win: it never reads or moves `last_tick`.
-- The run id comes from the trigger request, so a request delivered twice
-- (its first consumer died, XAUTOCLAIM gave it to another) starts at most
-- one run.
-- A job in a concurrency group takes a slot (group_admits: waiting
-- ticks of the group go first), or nothing changes and the answer is
-- `group_full`: the request stays pending for later.
-- KEYS: state, running, lease, runs, done_at (the dedup window, see
--       remember_done), then for a group its slots and waiting ticks
-- ARGV: tick_ms (the request's time), run_id, lease_ms, overlap, replica,
--       host, maxlen, min_fence, window_ms, window_count, the group's name
--       ('' for none) and max, then the run's parameters as outcome
--       fields, name/value pairs (its context, see read_context)
local state, running, lease, runs, done_at = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local tick, run_id, lease_ms = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local overlap, replica, host = ARGV[4], ARGV[5], ARGV[6]
local maxlen, min_fence = ARGV[7], tonumber(ARGV[8])
local window_ms, window_count = tonumber(ARGV[9]), tonumber(ARGV[10])
local group, group_max = ARGV[11], tonumber(ARGV[12])
if redis.call('HEXISTS', running, run_id) == 1 or redis.call('ZSCORE', done_at, run_id) then
  return {'duplicate'}
end
local corrupt = corrupt_state(state)
if corrupt then return corrupt end
local now = now_ms()
if overlap == 'skip' then
  local holder = redis.call('GET', lease)
  if holder then
    local id = record_outcome(state, runs, maxlen, add_context(
      skip_fields(tick, run_id, replica, host, now, 'manual'), read_context({unpack(ARGV, 13)})), false)
    remember_done(done_at, run_id, id_ms(id), window_count, window_ms)
    return {'busy', holder}
  end
end
local slots = nil
if group ~= '' then
  slots = KEYS[6]
  if not group_admits(slots, KEYS[7], group_max, now, now) then return {'group_full'} end
  group_hold(slots, run_id, now, lease_ms)
end
local fence = next_fence(state, min_fence, now)
local lease_key = start_run(running, lease, run_id, tick, lease_ms, overlap,
  replica, host, 'manual', 0, fence, now, now, read_context({unpack(ARGV, 13)}), slots)
return {'claimed', fence, now, lease_key}
