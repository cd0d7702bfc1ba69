-- Releases one hold of a lock (`cronlease lock NAME`, or the library's)
-- if run id ARGV[1] still holds it: the last hold frees it and wakes the
-- waiters (PUBLISH on ARGV[2]). With ARGV[3] = 'owner' (a run id that can
-- re-enter, see lock_acquire.lua, which sets `holds` to 1 on every new
-- acquisition) an earlier hold only counts down; any other run id holds
-- once, and its release frees the lock without counting. Runs without the
-- prelude.
-- KEYS: lease, state    ARGV: run_id, channel, 'owner' or 'once'
-- Returns 1 when freed, 2 when held on by the same owner, 0 when the lock
-- was no longer ours.
local lease, state = KEYS[1], KEYS[2]
local run_id = ARGV[1]
if redis.call('GET', lease) ~= run_id then return 0 end
if ARGV[3] == 'owner' and redis.call('HINCRBY', state, 'holds', '-1') > 0 then
  return 2
end
redis.call('DEL', lease)
redis.call('PUBLISH', ARGV[2], run_id)
return 1
