-- Claims tick ARGV[1] of one job for run id ARGV[2]. See DESIGN.md "The claim".
-- KEYS: state, running, lease, runs, actions
-- ARGV: tick_ms, run_id, lease_ms, overlap, replica, host, lead_ms, maxlen,
--       min_tick (highest last_tick this replica saw, -1 if none), min_fence,
--       trigger (schedule|misfire), wait_if_busy ('1': answer wait instead of
--       recording skipped_overlap, for catch-up of missed ticks),
--       channel and job name: when the high-water mark moves (claimed,
--       paused, busy), "<job> <tick> <fence>" is published there (a
--       batch's claims as one message of such lines, see announce_claim),
--       so replicas waiting their turn need not ask; inside the script, so no
--       replica hears of a claim later than its claimant (a Sentinel
--       failover that loses the claim's write cannot lose what the others
--       heard, and remember: daemon/rendezvous.rs),
--       deadline_ms (Redis time after which this claim must not take effect;
--       -1: none), attempt ('first': no earlier attempt of this run id was
--       sent, so none can have won; 'again': a retry), max_runs (how many
--       ticks may start a run, counted in the state's `runs_started`; -1:
--       no limit, and nothing counted), the cluster's pause (cluster_holds:
--       'none', 'hold' or the Redis ms it ends at), exclusion ('' when the
--       job's calendars keep the tick; else 'exclude <calendar>' or 'only
--       <calendars>', decided by the replica from its config: the tick is
--       recorded `excluded` instead of run), and, when the job is to be
--       told of late starts, its notification rules (read_notices) with the
--       events stream as KEYS[6]; then, for a job in a concurrency group,
--       the group's name, its max and the Redis ms until which the tick
--       may wait for a slot ('' when the job has none), with the group's
--       slots and waiting ticks as the last two KEYS (group_take)
-- lead_ms: how far ahead of its tick (Redis time) the tick may be claimed.
-- Only a plain claim is made ahead: a paused job, or a run in flight that
-- the overlap policy would skip or replace, answers `early` until the tick
-- comes, so what is decided at the tick is decided at the tick. A claim
-- made ahead starts nothing early: every `claimed` answer ends with Redis
-- time in µs, and the caller starts the run (tick - now) after the answer.
local state, running, lease, runs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local tick, run_id, lease_ms = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local overlap, replica, host = ARGV[4], ARGV[5], ARGV[6]
local lead, maxlen = tonumber(ARGV[7]), ARGV[8]
local min_tick, min_fence = tonumber(ARGV[9]), tonumber(ARGV[10])
local trigger, wait_if_busy = ARGV[11], ARGV[12] == '1'
local channel, job = ARGV[13], ARGV[14]
local deadline = tonumber(ARGV[15])
local retry = ARGV[16] ~= 'first'
local max_runs = tonumber(ARGV[17])
local exclusion = ARGV[19]
local group = ARGV[21] or ''
local group_slots, group_waiting, group_max, group_until
if group ~= '' then
  group_slots, group_waiting = KEYS[#KEYS - 1], KEYS[#KEYS]
  group_max, group_until = tonumber(ARGV[22]), tonumber(ARGV[23])
end
local function announce(fence)
  announce_claim(channel, job .. ' ' .. ARGV[1] .. ' ' .. fence)
end

local now, now_us = clock()
-- A retry after an ambiguous reply: the first attempt may have won. The
-- claim holds only while its lease does: the lease is renewed from now, so
-- the caller's watchdog may count it from when it sent this retry.
local mine = retry and redis.call('HGET', running, run_id)
if mine then
  local e = read_entry(mine)
  -- An entry that is no longer readable proves nothing: not ours to run.
  if not e or e.expires < now or redis.call('GET', e.lease_key) ~= run_id then
    -- Won, but the lease lapsed before the winner heard of it: a sweep
    -- records the run abandoned.
    return {'lapsed'}
  end
  redis.call('PEXPIRE', e.lease_key, lease_ms)
  e.expires = now + lease_ms
  redis.call('HSET', running, run_id, cjson.encode(e))
  -- previous -2: unknown (the first attempt's answer had it).
  return {'claimed', e.fence, e.started, e.lease_key, 0, 0, -2, now_us}
end
if tick > now + lead then return {'early', tick - now} end
local ahead = tick > now
-- The job's state in one read. Every answer carries its fence, so each
-- replica knows the highest fence handed out even for ticks it did not win.
local fields = redis.call('HMGET', state, 'last_tick', 'fence', 'paused', 'runs_started', 'paused_until_ms')
local corrupt = corrupt_values(fields[1], fields[2])
if corrupt then return corrupt end
local current_fence = tonumber(fields[2] or '0')
-- `max_runs` reached: the job has no more ticks. Nothing is claimed or
-- recorded; every replica that asks hears it and stops the job's loop.
-- A count that is not a count is taken as none (at worst the job runs
-- its max_runs again, never more than that at once).
local runs_started = tonumber(fields[4] or '0') or 0
if max_runs >= 0 and runs_started >= max_runs then
  return {'ended', runs_started, current_fence}
end

local stored = tonumber(fields[1] or '-1')
-- State no honest writer produces (a high-water mark later than any claim
-- could have set, a fence past what a number holds exactly) is evidence,
-- not authority: it is treated as lost (the caller's marks re-seed it, and
-- this claim overwrites it), and kept beside it for `status` until
-- `cronlease repair` clears it. The reply names the field instead of the
-- regression flag. A caller's mark past the same bounds is not used.
local regressed = 0
if min_tick > now + MAX_AHEAD_MS then min_tick = -1 end
if min_fence > MAX_FENCE then min_fence = 0 end
-- Such state, or a state loss, is corrected at the tick, never by a claim
-- made ahead of it: an `early` answer says nothing of what it found, and
-- the claim at the tick must (its caller counts missed ticks by it).
if ahead and (current_fence > MAX_FENCE or stored > now + MAX_AHEAD_MS or stored < min_tick) then
  return {'early', tick - now}
end
local implausible, forged_fence = nil, false
if current_fence > MAX_FENCE then
  implausible, forged_fence, current_fence = 'fence', true, 0
  note_finding(state, 'fence', fields[2], now)
end
if stored > now + MAX_AHEAD_MS then
  implausible, stored = 'last_tick', -1
  note_finding(state, 'last_tick', fields[1], now)
  redis.call('HDEL', state, 'last_tick')
end
if implausible then regressed = implausible end
if stored < min_tick then
  -- Redis forgot ticks this replica saw claimed: state was lost. Re-seed.
  if regressed == 0 then regressed = 1 end
  redis.call('HSET', state, 'last_tick', min_tick)
  stored = min_tick
end
if tick <= stored then
  if group ~= '' then redis.call('ZREM', group_waiting, group_waiter(job, tick, group_until)) end
  return {'taken', stored, regressed, current_fence}
end
-- Past the caller's deadline (an attempt that sat in a paused or slow Redis,
-- or a retry after the caller stopped waiting): take no effect. Redis runs
-- scripts one at a time, so once a retry hears this, no earlier attempt of
-- the same run id can still win; the caller knows for sure it lost.
if deadline >= 0 and now > deadline then return {'expired', now - tick} end
-- The high-water mark before this tick: ticks of the schedule between it and
-- this one were never claimed (the caller records them as missed). Unknown
-- (-2) when Redis lost it or it was forged: the caller's mark that took its
-- place says nothing of the ticks other replicas ran since, and they must
-- not be recorded as missed.
local previous = stored
if regressed ~= 0 then previous = -2 end

-- A timed pause whose end has come is over, whether or not a sweep saw
-- it yet: this claim ends it (once, see end_pause). A tick before its end
-- is still one of the pause, as is a tick the cluster's pause holds.
local pause_until = tonumber(fields[5] or '')
if fields[3] == '1' and pause_until and now >= pause_until
    and end_pause(state, KEYS[5], now, nil) and previous ~= -2 then
  previous = math.max(previous, pause_until - 1)
end
if pause_holds(fields[3], pause_until, tick) or cluster_holds(ARGV[18], tick) then
  if ahead then return {'early', tick - now} end
  if tick > (tonumber(redis.call('HGET', state, 'last_tick') or '-1') or -1) then
    redis.call('HSET', state, 'last_tick', tick)
  end
  announce(current_fence)
  return {'paused', regressed, previous, current_fence}
end

-- A tick the job's calendars leave out: recorded `excluded` with the
-- calendar, in the same call that moves the high-water mark to it, and
-- only at the tick, so whichever replica claims it records it once.
if exclusion ~= '' then
  if ahead then return {'early', tick - now} end
  local rule, calendar = string.match(exclusion, '^(%S+) (%S+)$')
  redis.call('HSET', state, 'last_tick', tick)
  record_outcome(state, runs, maxlen, {'tick', tick, 'fence', '0', 'run_id', run_id,
    'replica', replica, 'host', host, 'started_ms', now, 'finished_ms', now,
    'duration_ms', '0', 'status', 'excluded', 'attempts', '0', 'output', '',
    'trigger', trigger, 'calendar', calendar or exclusion,
    'calendar_rule', rule or 'exclude'}, false)
  announce(current_fence)
  return {'excluded', regressed, previous, current_fence}
end

if overlap ~= 'allow' then
  local holder = redis.call('GET', lease)
  if holder and ahead then return {'early', tick - now} end
  if holder and overlap == 'skip' then
    if wait_if_busy then return {'wait', redis.call('PTTL', lease)} end
    redis.call('HSET', state, 'last_tick', tick)
    record_outcome(state, runs, maxlen, skip_fields(tick, run_id, replica, host, now, trigger), false)
    announce(current_fence)
    return {'busy', holder, regressed, previous, current_fence}
  end
  -- overlap == 'replace': the new lease overwrites the old one, whose holder
  -- sees its next renewal fail and stops its run.
end

-- The job's concurrency group: a slot, or nothing changes (no high-water
-- mark moves) and the caller waits, within its grace, for one to free.
if group ~= '' then
  local full = group_take(group_slots, group_waiting, group_max, run_id, job, tick,
    group_until, now, lease_ms)
  if full ~= true then
    if ahead then return {'early', tick - now} end
    return {'group_full', full[1], full[2], current_fence}
  end
end

-- Counted before this run's entry is added, which has not lapsed.
local expired = count_expired(running, now)
local started = math.max(now, tick)
-- The next fence (above the highest this replica saw, see next_fence), the
-- high-water mark and, when a lineage begins, `born`, in one write: the
-- fence was read above.
local fence = math.max(current_fence, min_fence) + 1
if lineage_begins(not forged_fence and fields[2] and current_fence, min_fence) then
  redis.call('HSET', state, 'fence', string.format('%d', fence), 'last_tick', ARGV[1], 'born', now)
else
  redis.call('HSET', state, 'fence', string.format('%d', fence), 'last_tick', ARGV[1])
end
if max_runs >= 0 then
  redis.call('HSET', state, 'runs_started', runs_started + 1)
end
local lease_key = start_run(running, lease, run_id, tick, lease_ms, overlap,
  replica, host, trigger, 0, fence, now, started, nil, group_slots)
announce(fence)
local notices = read_notices(KEYS[6], ARGV[20])
if notices and notices.late_ms > 0 and started - tick > notices.late_ms then
  emit(notices, state, 'late', {'tick', ARGV[1], 'run_id', run_id, 'fence', fence,
    'replica', replica, 'status', 'running', 'attempt', '1',
    'late_ms', started - tick})
end
return {'claimed', fence, started, lease_key, expired, regressed, previous, now_us}
