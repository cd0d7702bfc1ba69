-- Records ticks that nobody claimed as `missed` outcomes, each once.
-- The replica whose claim moved the high-water mark past them calls this;
-- `missed_until` makes a repeated call (a retry) record nothing twice.
-- KEYS: state, runs, events
-- ARGV: recorder replica, host, maxlen, notification rules (read_notices;
--       '' for none), then the missed ticks (ms, ascending): one `missed`
--       event tells of them all. A tick the job's calendars leave out is
--       given as '<ms> exclude <calendar>' or '<ms> only <calendars>' and
--       recorded `excluded` with its calendar instead (neither counted
--       nor told as missed).
-- Returns how many were recorded missed.
local state, runs = KEYS[1], KEYS[2]
local recorder, host, maxlen = ARGV[1], ARGV[2], ARGV[3]
local notices = read_notices(KEYS[3], ARGV[4])
-- A value cronlease did not write counts as none: at worst a missed tick is
-- recorded twice, never a run.
local recorded_until = tonumber(redis.call('HGET', state, 'missed_until') or '-1') or -1
local now = now_ms()
local n, highest, first = 0, recorded_until, nil
local any, last_missed = false, nil
for i = 5, #ARGV do
  local text, rule, calendar = string.match(ARGV[i], '^(%S+) (%S+) (%S+)$')
  local tick = tonumber(text or ARGV[i])
  if tick > recorded_until then
    local fields = {'tick', tick, 'fence', '0', 'run_id', '',
      'replica', '', 'host', host, 'started_ms', now, 'finished_ms', now, 'duration_ms', '0',
      'status', rule and 'excluded' or 'missed', 'attempts', '0', 'output', '', 'trigger', 'schedule',
      'recorded_by', recorder}
    if rule then
      fields[#fields + 1] = 'calendar'
      fields[#fields + 1] = calendar
      fields[#fields + 1] = 'calendar_rule'
      fields[#fields + 1] = rule
    end
    record_outcome(state, runs, maxlen, fields, false)
    any = true
    if tick > highest then highest = tick end
    if not rule then
      n = n + 1
      last_missed = tick
      if not first then first = tick end
    end
  end
end
if any then
  redis.call('HSET', state, 'missed_until', highest)
end
if n > 0 then
  redis.call('HINCRBY', state, 'missed_total', n)
  emit(notices, state, 'missed', {'tick', first, 'status', 'missed', 'replica', recorder,
    'last_tick', last_missed, 'count', n})
end
return n
