-- Raises a lock's fence to ARGV[1] where it is lower, and then keeps its
-- state the idle TTL ARGV[2] from now. Quorum mode, after a lock won a
-- majority: to the acquisition's (the highest of the majority's), on
-- every master, so that every later acquisition, whose majority shares a
-- master with this one, gets a higher fence, and a re-entry or
-- `Store::lock_holder` reads the holder's. And after a grant whose fence
-- is more than 29 days old (lock_acquire.lua): to the holder's Redis time
-- in µs, which pushes the state's expiry back.
-- KEYS: state    ARGV: fence, idle_ms
local state, fence = KEYS[1], ARGV[1]
if tonumber(redis.call('HGET', state, 'fence') or '0') < tonumber(fence) then
  redis.call('HSET', state, 'fence', fence)
  redis.call('PEXPIRE', state, ARGV[2])
end
return 1
