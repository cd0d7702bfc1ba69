-- Extends a lock's lease if its value still begins with token ARGV[1]
-- (see lock_acquire.lua), and keeps the lock's state from expiring while
-- it is held: pushed back to the idle TTL ARGV[3], and made again with the
-- holder's fence ARGV[4] should it have expired all the same (a holder
-- whose clock ran days behind Redis's). Part of a pipeline that renews
-- every lock a cluster holds. The daemon's runs are renewed by renew.lua.
-- KEYS: lease, state    ARGV: token, lease_ms, idle_ms, fence
-- Returns 1 when renewed, 0 when the lease is no longer ours.
local lease, state, token = KEYS[1], KEYS[2], ARGV[1]
local current = redis.call('GET', lease)
if not current or string.find(current, token, 1, true) ~= 1 then return 0 end
redis.call('PEXPIRE', lease, ARGV[2])
redis.call('HSETNX', state, 'fence', ARGV[4])
redis.call('PEXPIRE', state, ARGV[3])
return 1
