-- Quorum mode: after a lock won a majority, raises one master's fence of
-- the lock to the acquisition's (the highest of the majority's), so that
-- every later acquisition, whose majority shares a master with this one,
-- gets a higher fence; and where the lease still begins with token
-- ARGV[2], writes that fence into its record (lock_acquire.lua), so that
-- a re-entry and `Store::lock_holder` read it there. A state made here
-- gets the idle TTL ARGV[3] as the acquisition's would.
-- KEYS: state, lease    ARGV: fence, token, idle_ms
local state, lease, fence, token = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
if tonumber(redis.call('HGET', state, 'fence') or '0') < tonumber(fence) then
  redis.call('HSET', state, 'fence', fence)
  if redis.call('PTTL', state) < 0 then redis.call('PEXPIRE', state, ARGV[3]) end
end
local current = redis.call('GET', lease)
if current and string.find(current, token, 1, true) == 1 then
  local head, rest = string.match(current, '^(.*)|%d+(|%d+w?)$')
  if head then
    redis.call('SET', lease, head .. '|' .. fence .. rest,
      'PX', math.max(redis.call('PTTL', lease), 1))
  end
end
return 1
