-- Quorum mode: after a lock won a majority, raises one master's fence of
-- the lock to the acquisition's (the highest of the majority's), so that
-- every later acquisition, whose majority shares a master with this one,
-- gets a higher fence, and a re-entry or `Store::lock_holder` reads the
-- holder's. A state made here gets the idle TTL ARGV[2], as the
-- acquisition's would.
-- KEYS: state    ARGV: fence, idle_ms
local state, fence = KEYS[1], ARGV[1]
if tonumber(redis.call('HGET', state, 'fence') or '0') < tonumber(fence) then
  redis.call('HSET', state, 'fence', fence)
  if redis.call('PTTL', state) < 0 then redis.call('PEXPIRE', state, ARGV[2]) end
end
return 1
