-- Undoes one run id's claim on a quorum master where it landed, when the
-- claim did not reach a majority: the run never starts.
-- KEYS: state, running, lease (the job's base lease key)
-- ARGV: run_id, tick_ms, previous (the high-water mark before the claim:
--       -1 none, -2 unknown)
-- The high-water mark goes back to `previous` only if it is still this
-- tick, so the tick stays claimable; the fence is not taken back (fences
-- only need to grow). Returns 1 when something was undone.
local state, running, base_lease = KEYS[1], KEYS[2], KEYS[3]
local run_id, tick, previous = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local raw = redis.call('HGET', running, run_id)
if not raw then return 0 end
local ok, e = pcall(cjson.decode, raw)
redis.call('HDEL', running, run_id)
if ok and type(e) == 'table' and type(e.group) == 'string' then
  redis.call('ZREM', e.group, run_id)
end
local lease_key = (ok and type(e) == 'table' and type(e.lease_key) == 'string' and e.lease_key)
  or base_lease
if redis.call('GET', lease_key) == run_id then redis.call('DEL', lease_key) end
if previous ~= -2 and tonumber(redis.call('HGET', state, 'last_tick') or '-1') == tick then
  if previous == -1 then
    redis.call('HDEL', state, 'last_tick')
  else
    redis.call('HSET', state, 'last_tick', previous)
  end
end
return 1
