-- Records ticks that nobody claimed as `missed` outcomes, each once.
-- The replica whose claim moved the high-water mark past them calls this;
-- `missed_until` makes a repeated call (a retry) record nothing twice.
-- KEYS: state, runs, events
-- ARGV: recorder replica, host, maxlen, notification rules (read_notices;
--       '' for none), then the missed ticks (ms, ascending): one `missed`
--       event tells of them all
-- Returns how many were recorded.
local state, runs = KEYS[1], KEYS[2]
local recorder, host, maxlen = ARGV[1], ARGV[2], ARGV[3]
local notices = read_notices(KEYS[3], ARGV[4])
-- A value cronlease did not write counts as none: at worst a missed tick is
-- recorded twice, never a run.
local recorded_until = tonumber(redis.call('HGET', state, 'missed_until') or '-1') or -1
local now = now_ms()
local n, highest, first = 0, recorded_until, nil
for i = 5, #ARGV do
  local tick = tonumber(ARGV[i])
  if tick > recorded_until then
    record_outcome(state, runs, maxlen, {'tick', tick, 'fence', '0', 'run_id', '',
      'replica', '', 'host', host, 'started_ms', now, 'finished_ms', now, 'duration_ms', '0',
      'status', 'missed', 'attempts', '0', 'output', '', 'trigger', 'schedule',
      'recorded_by', recorder}, false)
    n = n + 1
    if tick > highest then highest = tick end
    if not first then first = tick end
  end
end
if n > 0 then
  redis.call('HSET', state, 'missed_until', highest)
  redis.call('HINCRBY', state, 'missed_total', n)
  emit(notices, state, 'missed', {'tick', first, 'status', 'missed', 'replica', recorder,
    'last_tick', highest, 'count', n})
end
return n
