-- Quorum mode: after a claim won a majority, raises one master's fence to
-- the claim's (the highest of the majority's), so that every later claim,
-- whose majority shares a master with this one, gets a higher fence.
-- KEYS: state    ARGV: fence
local state, fence = KEYS[1], tonumber(ARGV[1])
if tonumber(redis.call('HGET', state, 'fence') or '0') < fence then
  redis.call('HSET', state, 'fence', fence)
end
return 1
