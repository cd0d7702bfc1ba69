-- Extends a lock's lease if run id ARGV[1] still holds it, and keeps the
-- lock's state (its fence and holder's record) from expiring while it is
-- held, however long. Part of a pipeline that renews every lock a
-- cluster holds. The daemon's runs are renewed by renew.lua.
-- KEYS: lease, state    ARGV: run_id, lease_ms, idle_ms
-- Returns 1 when renewed, 0 when the lease is no longer ours.
local lease, state = KEYS[1], KEYS[2]
if redis.call('GET', lease) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', lease, ARGV[2])
redis.call('PEXPIRE', state, ARGV[3])
return 1
