-- Plans a backfill (`cronlease backfill`): of the candidate ticks (ARGV[6..],
-- ms, ascending; the caller took them from the job's schedule), decides in
-- one call which already ran and which are to run, and with mode 'queue'
-- queues the latter in the job's pending set under the backfill's id, so two
-- operators backfilling the same range at once cannot both queue a tick.
-- A tick later than `last_tick` is the schedule's (claim.lua decides it, and
-- only ticks later than `last_tick`): left out, so a backfill and a
-- scheduled claim never decide the same tick. A tick ran when the runs
-- stream holds a run's outcome of it (any status but `missed` and
-- `skipped_overlap`: ticks nobody ran), a run of it is in flight or waits
-- to be rerun, or a backfill ran it (`backfilled`, which outlives the
-- stream's trimming) or has it queued.
-- KEYS: state, running, runs, reruns, pending (sorted set: '<tick> <backfill
--       id>' scored by tick), backfilled (sorted set: '<tick> <run id>'
--       scored by tick)
-- ARGV: backfill id, concurrency, mode ('plan' | 'queue'), wake channel,
--       job name (published there once ticks are queued), then the
--       candidate ticks
-- Returns {'plan', last_tick (-1: none), {ticks to run}, {skipped: tick,
-- why, status, run id, …}, {ticks later than last_tick}} | {'corrupt', …}.
local state, running, runs, reruns, pending, backfilled = KEYS[1], KEYS[2], KEYS[3],
  KEYS[4], KEYS[5], KEYS[6]
local id, concurrency, mode, channel, job = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local FIRST = 6
-- Runs of a tick of the schedule: a manual run's or a follower's tick is
-- the moment it was asked for, not a tick.
local TICK_TRIGGERS = {schedule = true, misfire = true, rerun = true, backfill = true}
local NOT_RUN = {missed = true, skipped_overlap = true}

local corrupt = corrupt_state(state)
if corrupt then return corrupt end
if #ARGV < FIRST then return {'plan', -1, {}, {}, {}} end
local first, last = tonumber(ARGV[FIRST]), tonumber(ARGV[#ARGV])
local last_tick = tonumber(redis.call('HGET', state, 'last_tick') or '-1')

-- What each tick of the range has: {why, status, run id}. A member or
-- entry that is not one cronlease wrote (no tick) says nothing of a tick.
local had = {}
local function note(tick, why, status, run_id)
  if tick and tick >= first and tick <= last and not had[tick] then
    had[tick] = {why, status, run_id}
  end
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', backfilled, first, last)) do
  local tick, run_id = string.match(m, '^(%d+) (%S+)$')
  note(tonumber(tick or ''), 'backfilled', 'backfill', run_id)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', pending, first, last)) do
  local tick, owner = string.match(m, '^(%d+) (%S+)$')
  note(tonumber(tick or ''), 'queued', 'queued', owner)
end
local entries = redis.call('HGETALL', running)
for i = 1, #entries, 2 do
  local e = read_entry(entries[i + 1])
  if e and TICK_TRIGGERS[e.trigger] then note(e.tick, 'running', 'running', entries[i]) end
end
for _, key in ipairs(redis.call('HKEYS', reruns)) do
  local tick = tonumber(string.match(key, '^(%d+)$') or string.match(key, '^(%d+):') or '')
  note(tick, 'rerun', 'rerun', '')
end
-- An outcome is recorded when its run ends, never before its tick by Redis
-- time: the stream from the first tick on holds every outcome of the range
-- (a minute earlier, should Redis's clock have stepped back).
for _, entry in ipairs(redis.call('XRANGE', runs, math.max(first - 60000, 0), '+')) do
  local f, fields = {}, entry[2]
  for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
  local trigger = f.trigger or 'schedule'
  if f.status and not NOT_RUN[f.status] and TICK_TRIGGERS[trigger] then
    note(tonumber(f.tick or ''), 'ran', f.status, f.run_id or '')
  end
end

local to_run, skipped, later = {}, {}, {}
for i = FIRST, #ARGV do
  local tick = tonumber(ARGV[i])
  local h = had[tick]
  if tick > last_tick then
    later[#later + 1] = ARGV[i]
  elseif h then
    skipped[#skipped + 1] = ARGV[i]
    skipped[#skipped + 1] = h[1]
    skipped[#skipped + 1] = h[2]
    skipped[#skipped + 1] = h[3]
  else
    to_run[#to_run + 1] = ARGV[i]
  end
end
if mode == 'queue' and #to_run > 0 then
  local batch = {}
  for i, tick in ipairs(to_run) do
    batch[#batch + 1] = tick
    batch[#batch + 1] = tick .. ' ' .. id
    if #batch >= 1000 or i == #to_run then
      redis.call('ZADD', pending, unpack(batch))
      batch = {}
    end
  end
  redis.call('HINCRBY', state, 'backfill_queued', #to_run)
  redis.call('HSET', state, 'backfill_concurrency', concurrency)
  redis.call('PUBLISH', channel, job)
end
return {'plan', string.format('%d', last_tick), to_run, skipped, later}
