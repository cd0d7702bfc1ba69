-- Pauses (ARGV[1] = '1') or resumes ('0') a job, recording who and when.
-- KEYS: state    ARGV: paused, who
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'paused', '1', 'paused_by', ARGV[2], 'paused_at_ms', now)
else
  redis.call('HSET', KEYS[1], 'paused', '0', 'resumed_by', ARGV[2], 'resumed_at_ms', now)
  redis.call('HDEL', KEYS[1], 'paused_by', 'paused_at_ms')
end
return now
