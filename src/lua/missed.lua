-- Records ticks that nobody claimed as `missed` outcomes, each once.
-- The replica whose claim moved the high-water mark past them calls this;
-- `missed_until` makes a repeated call (a retry) record nothing twice.
-- KEYS: state, runs
-- ARGV: recorder replica, host, maxlen, then the missed ticks (ms, ascending)
-- Returns how many were recorded.
local state, runs = KEYS[1], KEYS[2]
local recorder, host, maxlen = ARGV[1], ARGV[2], ARGV[3]
-- A value cronlease did not write counts as none: at worst a missed tick is
-- recorded twice, never a run.
local recorded_until = tonumber(redis.call('HGET', state, 'missed_until') or '-1') or -1
local now = now_ms()
local n, highest = 0, recorded_until
for i = 4, #ARGV do
  local tick = tonumber(ARGV[i])
  if tick > recorded_until then
    record_outcome(state, runs, maxlen, {'tick', tick, 'fence', '0', 'run_id', '',
      'replica', '', 'host', host, 'started_ms', now, 'finished_ms', now, 'duration_ms', '0',
      'status', 'missed', 'attempts', '0', 'output', '', 'trigger', 'schedule',
      'recorded_by', recorder}, false)
    n = n + 1
    if tick > highest then highest = tick end
  end
end
if n > 0 then
  redis.call('HSET', state, 'missed_until', highest)
  redis.call('HINCRBY', state, 'missed_total', n)
end
return n
