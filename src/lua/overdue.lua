-- The dead man's switch of one job: an `overdue` event once the job has had
-- no `ok` outcome for `within_ms` of Redis time, counted from its last `ok`
-- (the state's `last_ok_id`) or, for a job that never had one, from when
-- the replicas first watched it (`watch_since`). Every replica asks on its
-- own; the state makes it one event per such silence, whichever replicas
-- are alive and however often they restarted. Not while the job is paused.
-- KEYS: state, events    ARGV: within_ms, notification rules (read_notices)
-- Returns 1 when it told, 0 otherwise.
local state = KEYS[1]
local within = tonumber(ARGV[1])
local notices = read_notices(KEYS[2], ARGV[2])
if not notices or not within then return 0 end
local now = now_ms()
local values = redis.call('HMGET', state, 'last_ok_id', 'watch_since', 'overdue_for', 'paused')
-- A value cronlease did not write counts as none.
local since = values[1] and id_ms(values[1]) or tonumber(values[2] or '')
if not since then
  redis.call('HSET', state, 'watch_since', now)
  return 0
end
if values[4] == '1' or now - since < within then return 0 end
local marker = string.format('%d', since)
if values[3] == marker then return 0 end
redis.call('HSET', state, 'overdue_for', marker)
emit(notices, state, 'overdue', {'status', 'overdue', 'ok_since', marker, 'within_ms', within})
return 1
