-- Releases the lock of `cronlease lock NAME` if run id ARGV[1] still holds
-- it, and wakes the waiters (PUBLISH on ARGV[2]).
-- KEYS: running, lease    ARGV: run_id, channel
-- Returns 1 when released, 0 when the lock was no longer ours.
local running, lease = KEYS[1], KEYS[2]
local run_id, channel = ARGV[1], ARGV[2]
redis.call('HDEL', running, run_id)
if redis.call('GET', lease) ~= run_id then return 0 end
redis.call('DEL', lease)
redis.call('PUBLISH', channel, run_id)
return 1
