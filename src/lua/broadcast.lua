-- Claims tick ARGV[1] of a broadcast job (`mode = "every_replica"`) for
-- one replica, run id ARGV[2]: each live matching replica runs each tick
-- once. No rendezvous: every replica claims its own, against its own
-- high-water mark (field <replica> of the job's replica_ticks hash), so a
-- replica restarted under the same name never runs a tick twice. The run
-- gets a fence from the job's state (next_fence) and a `running` entry
-- under a lease of its own (`<lease>:replica:<replica>`, or per run with
-- overlap = "allow"), so the watchdog, kill, timeouts, sweeps and the
-- finish treat it as any run. The job's `last_tick` is not moved: it
-- belongs to the ticks no replica may run (unplaced.lua).
-- KEYS: state, running, lease (this replica's), runs, actions,
--       replica_ticks, then the events stream when told of (as claim.lua)
-- ARGV: as claim.lua's (tick_ms, run_id, lease_ms, overlap, replica, host,
--       lead_ms (unused: never claimed ahead), maxlen, min_tick (unused),
--       min_fence, trigger, wait_if_busy, channel (unused), job name,
--       deadline_ms, attempt, max_runs (unused: refused with a broadcast),
--       the cluster's pause, exclusion, notification rules)
-- Replies as claim.lua's: claimed, early, taken, expired, paused, busy,
-- wait, excluded, lapsed; `previous` is always -2 (a replica records no
-- gap of its own as missed).
local state, running, lease, runs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local marks = KEYS[6]
local tick, run_id, lease_ms = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local overlap, replica, host = ARGV[4], ARGV[5], ARGV[6]
local maxlen, min_fence = ARGV[8], tonumber(ARGV[10])
local trigger, wait_if_busy = ARGV[11], ARGV[12] == '1'
local deadline = tonumber(ARGV[15])
local retry = ARGV[16] ~= 'first'
local exclusion = ARGV[19]

local now, now_us = clock()
-- A retry after an ambiguous reply, as in claim.lua.
local mine = retry and redis.call('HGET', running, run_id)
if mine then
  local e = read_entry(mine)
  if not e or e.expires < now or redis.call('GET', e.lease_key) ~= run_id then
    return {'lapsed'}
  end
  redis.call('PEXPIRE', e.lease_key, lease_ms)
  e.expires = now + lease_ms
  redis.call('HSET', running, run_id, cjson.encode(e))
  return {'claimed', e.fence, e.started, e.lease_key, 0, 0, -2, now_us}
end
if tick > now then return {'early', tick - now} end
local fields = redis.call('HMGET', state, 'fence', 'paused', 'paused_until_ms')
local corrupt = corrupt_values(nil, fields[1])
if corrupt then return corrupt end
local current_fence = tonumber(fields[1] or '0')
if current_fence > MAX_FENCE then current_fence = 0 end
-- A mark that is not a number counts as none: at worst this replica runs
-- a tick it ran, never another replica's.
local stored = tonumber(redis.call('HGET', marks, replica) or '-1') or -1
if stored > now + MAX_AHEAD_MS then stored = -1 end
if tick <= stored then return {'taken', stored, 0, current_fence} end
if deadline >= 0 and now > deadline then return {'expired', now - tick} end

local pause_until = tonumber(fields[3] or '')
if fields[2] == '1' and pause_until and now >= pause_until then
  end_pause(state, KEYS[5], now, nil)
end
if pause_holds(fields[2], pause_until, tick) or cluster_holds(ARGV[18], tick) then
  redis.call('HSET', marks, replica, ARGV[1])
  return {'paused', 0, -2, current_fence}
end
if exclusion ~= '' then
  local rule, calendar = string.match(exclusion, '^(%S+) (%S+)$')
  redis.call('HSET', marks, replica, ARGV[1])
  record_outcome(state, runs, maxlen, {'tick', tick, 'fence', '0', 'run_id', run_id,
    'replica', replica, 'host', host, 'started_ms', now, 'finished_ms', now,
    'duration_ms', '0', 'status', 'excluded', 'attempts', '0', 'output', '',
    'trigger', trigger, 'calendar', calendar or exclusion,
    'calendar_rule', rule or 'exclude'}, false)
  return {'excluded', 0, -2, current_fence}
end
if overlap ~= 'allow' then
  local holder = redis.call('GET', lease)
  if holder then
    if wait_if_busy then return {'wait', redis.call('PTTL', lease)} end
    redis.call('HSET', marks, replica, ARGV[1])
    record_outcome(state, runs, maxlen, skip_fields(tick, run_id, replica, host, now, trigger), false)
    return {'busy', holder, 0, -2, current_fence}
  end
end
local expired = count_expired(running, now)
local fence = next_fence(state, min_fence, now)
redis.call('HSET', marks, replica, ARGV[1])
local lease_key = start_run(running, lease, run_id, tick, lease_ms, overlap,
  replica, host, trigger, 0, fence, now, now)
local notices = read_notices(KEYS[7], ARGV[20])
if notices and notices.late_ms > 0 and now - tick > notices.late_ms then
  emit(notices, state, 'late', {'tick', ARGV[1], 'run_id', run_id, 'fence', fence,
    'replica', replica, 'status', 'running', 'attempt', '1', 'late_ms', now - tick})
end
return {'claimed', fence, now, lease_key, expired, 0, -2, now_us}
