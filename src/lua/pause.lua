-- Pauses (ARGV[1] = 'pause') or resumes ('resume') a job, and records the
-- action in the job's actions stream, in one step.
-- KEYS: state, actions
-- ARGV: action, who, until (Redis ms the pause ends at; '' until resumed),
--       reason
-- Answers {'paused' | 'resumed', now}, or {'past', now} for an until that
-- is not after Redis time (nothing changed).
local state, actions = KEYS[1], KEYS[2]
local who, until_ms, reason = ARGV[2], ARGV[3], ARGV[4]
local now = now_ms()
if ARGV[1] == 'pause' then
  if until_ms ~= '' and tonumber(until_ms) <= now then return {'past', now} end
  redis.call('HDEL', state, unpack(PAUSE_FIELDS))
  redis.call('HSET', state, 'paused', '1', 'paused_by', who, 'paused_at_ms', now)
  if until_ms ~= '' then redis.call('HSET', state, 'paused_until_ms', until_ms) end
  if reason ~= '' then redis.call('HSET', state, 'paused_reason', reason) end
  redis.call('XADD', actions, 'MAXLEN', '~', 200, '*', 'action', 'pause', 'who', who,
    'detail', '', 'until_ms', until_ms, 'reason', reason)
  return {'paused', now}
end
redis.call('HSET', state, 'paused', '0', 'resumed_by', who, 'resumed_at_ms', now)
redis.call('HDEL', state, unpack(PAUSE_FIELDS))
redis.call('XADD', actions, 'MAXLEN', '~', 200, '*', 'action', 'resume', 'who', who,
  'detail', '', 'until_ms', '', 'reason', '')
return {'resumed', now}
