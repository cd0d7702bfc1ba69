-- Pauses (ARGV[1] = 'pause') or resumes ('resume') every job of the
-- cluster (`cronlease pause --all`), and records it in the cluster's
-- actions stream, in one step. The replicas read the record and pass it to
-- their claims; they acknowledge its id in their heartbeats.
-- KEYS: pause_all, pause_all_actions
-- ARGV: action, who, until (Redis ms; '' until resumed), reason, id
-- Answers {'paused' | 'resumed', now}, or {'past', now} for an until that
-- is not after Redis time (nothing changed).
local record, actions = KEYS[1], KEYS[2]
local who, until_ms, reason, id = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[1] == 'pause' then
  if until_ms ~= '' and tonumber(until_ms) <= now then return {'past', now} end
  redis.call('DEL', record)
  redis.call('HSET', record, 'paused', '1', 'id', id, 'by', who, 'at_ms', now)
  if until_ms ~= '' then redis.call('HSET', record, 'until_ms', until_ms) end
  if reason ~= '' then redis.call('HSET', record, 'reason', reason) end
  redis.call('XADD', actions, 'MAXLEN', '~', 200, '*', 'action', 'pause', 'who', who,
    'detail', id, 'until_ms', until_ms, 'reason', reason)
  return {'paused', now}
end
redis.call('DEL', record)
redis.call('HSET', record, 'paused', '0', 'id', id, 'by', who, 'at_ms', now)
redis.call('XADD', actions, 'MAXLEN', '~', 200, '*', 'action', 'resume', 'who', who,
  'detail', id, 'until_ms', '', 'reason', '')
return {'resumed', now}
