-- Releases one hold of a lock (`cronlease lock NAME`, or the library's)
-- if run id ARGV[1] still holds it: the last hold frees it and wakes the
-- waiters (PUBLISH on ARGV[2]); an earlier one of a re-entered lock only
-- counts down (see lock_acquire.lua, which sets `holds` to 1 on every new
-- acquisition). Runs without the prelude.
-- KEYS: running, lease, state    ARGV: run_id, channel
-- Returns 1 when freed, 2 when held on by the same owner, 0 when the lock
-- was no longer ours.
local running, lease, state = KEYS[1], KEYS[2], KEYS[3]
local run_id, channel = ARGV[1], ARGV[2]
if redis.call('GET', lease) ~= run_id then
  redis.call('HDEL', running, run_id)
  return 0
end
if redis.call('HINCRBY', state, 'holds', '-1') > 0 then return 2 end
redis.call('HDEL', running, run_id)
redis.call('DEL', lease)
redis.call('PUBLISH', channel, run_id)
return 1
