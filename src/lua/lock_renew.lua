-- Extends a lock's lease if its value still begins with token ARGV[1]
-- (see lock_acquire.lua). Part of a pipeline that renews every lock a
-- cluster holds. The daemon's runs are renewed by renew.lua.
-- KEYS: lease    ARGV: token, lease_ms
-- Returns 1 when renewed, 0 when the lease is no longer ours.
local lease, token = KEYS[1], ARGV[1]
local current = redis.call('GET', lease)
if not current or string.find(current, token, 1, true) ~= 1 then return 0 end
redis.call('PEXPIRE', lease, ARGV[2])
return 1
