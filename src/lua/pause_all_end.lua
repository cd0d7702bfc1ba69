-- Ends the cluster's timed pause whose end has come, if it is still the
-- pause with id ARGV[1]: once, whichever replica comes first (each looks
-- at every heartbeat). Claims need not wait for it: they compare their
-- tick with the pause's end themselves.
-- KEYS: pause_all, pause_all_actions    ARGV: id
-- Answers 1 when this call ended it, 0 when it was over or is another.
local record, actions = KEYS[1], KEYS[2]
local f = redis.call('HMGET', record, 'paused', 'id', 'until_ms', 'reason')
local until_ms = tonumber(f[3] or '')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if f[1] ~= '1' or f[2] ~= ARGV[1] or not until_ms or now < until_ms then return 0 end
redis.call('HSET', record, 'paused', '0', 'by', 'cronlease (timed pause ended)', 'at_ms', now)
redis.call('HDEL', record, 'until_ms', 'reason')
redis.call('XADD', actions, 'MAXLEN', '~', 200, '*', 'action', 'resume',
  'who', 'cronlease (timed pause ended)', 'detail', f[2], 'until_ms', f[3], 'reason', f[4] or '')
return 1
