-- Starts the run of a follower (a job with `after`) that one entry of an
-- upstream's inbox asks for (tell_followers wrote it with the upstream's
-- outcome), exactly once: the entry's upstream run id is remembered in
-- `caused` before anything starts, so a second delivery (two replicas read
-- the same entry, or one read it again before it was deleted) is a
-- duplicate. With `after_all`, the arrivals of one root tick wait in
-- `joins` until every upstream has one, and the last starts the run.
-- The run is the follower's like any other: its own fence and lease, and
-- its overlap and misfire policies. Its claim is announced on the claims
-- channel as claim.lua's are, so that every replica hears its fence and
-- asks a Redis that lost its data to stay above it (MarkBook::hear); with
-- tick 0, since a follower's run is for no tick of a schedule, and a tick
-- heard ends a replica's wait for its turn at the job's scheduled ticks.
-- `caused` forgets an upstream run once the caller deleted the inbox entry
-- (it re-scores the member then, see store/chain.rs) and CAUSED_KEEP_MS
-- passed: a reader of the entry that had not deleted it yet holds a
-- deadline (ARGV[6]) shorter than that, after which this script refuses
-- its call.
-- A follower in a concurrency group is refused (`group_full`) before
-- anything is written when its group has no slot for it (group_admits):
-- the entry stays in the inbox and is read again.
-- KEYS: state, running, lease, runs, caused, joins, then for a group its
--       slots and waiting ticks
-- ARGV: upstream job, upstream run id, upstream status, root tick (ms), at
--       (Redis ms of the upstream's outcome: the follower's tick),
--       deadline (Redis ms), run id, lease_ms, overlap, replica, host,
--       maxlen, min_fence, join ('' for each outcome; for after_all, the
--       upstreams, comma-separated), misfire ('skip' or 'run'), misfire
--       grace (ms), claims channel, the follower's name, the cluster's
--       pause (cluster_holds), the group's name ('' for none) and max,
--       then the run's parameters, name/value pairs
-- Returns {claimed, fence, started, lease_key, ctx, expired} | {waiting} | {busy,
-- holder} | {missed} | {paused} | {duplicate} | {expired} | {corrupt, …}.
local CAUSED_KEEP_MS = 3600 * 1000
-- The score of a cause whose inbox entry may still be there.
local PENDING = 9007199254740991
-- Root ticks an after_all follower keeps waiting for at most: beyond, the
-- oldest is given up, recorded `missed`.
local JOINS_MAX = 1000

local state, running, lease, runs, caused, joins = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5], KEYS[6]
local up_job, up_run, up_status, root = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local at, deadline, run_id = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local lease_ms, overlap, replica, host = tonumber(ARGV[8]), ARGV[9], ARGV[10], ARGV[11]
local maxlen, min_fence, join = ARGV[12], tonumber(ARGV[13]), ARGV[14]
local misfire, grace = ARGV[15], tonumber(ARGV[16])
local channel, job = ARGV[17], ARGV[18]
local group, group_max = ARGV[20], tonumber(ARGV[21])

local now = now_ms()
if now > deadline then return {'expired'} end
local cause = up_job .. ' ' .. up_run
if redis.call('ZSCORE', caused, cause) then return {'duplicate'} end
local corrupt = corrupt_state(state)
if corrupt then return corrupt end
local slots = nil
if group ~= '' then
  slots = KEYS[7]
  if not group_admits(slots, KEYS[8], group_max, now, now) then return {'group_full'} end
end
redis.call('ZREMRANGEBYSCORE', caused, '-inf', now - CAUSED_KEEP_MS)
redis.call('ZADD', caused, PENDING, cause)

local function params(ctx)
  for i = 22, #ARGV - 1, 2 do
    ctx[#ctx + 1] = ARGV[i]
    ctx[#ctx + 1] = ARGV[i + 1]
  end
  return ctx
end

-- Outcome fields of a run that was not started, with its context.
local function not_run(status, ctx, output)
  local fields = {'tick', at, 'fence', '0', 'run_id', run_id, 'replica', replica,
    'host', host, 'started_ms', now, 'finished_ms', now, 'duration_ms', '0',
    'status', status, 'attempts', '0', 'output', output, 'trigger', 'chain'}
  return add_context(fields, ctx)
end

local ctx = {'root_tick', root, 'upstream_job', up_job, 'upstream_run_id', up_run,
  'upstream_status', up_status}
if join ~= '' then
  local arrived = {}
  local ok, saved = pcall(cjson.decode, redis.call('HGET', joins, root) or '')
  if ok and type(saved) == 'table' then arrived = saved end
  arrived[up_job] = {up_run, up_status}
  local jobs, run_ids, statuses = {}, {}, {}
  for upstream in string.gmatch(join, '[^,]+') do
    local a = arrived[upstream]
    if type(a) ~= 'table' or type(a[1]) ~= 'string' or type(a[2]) ~= 'string' then
      jobs = nil
      break
    end
    jobs[#jobs + 1] = upstream
    run_ids[#run_ids + 1] = a[1]
    statuses[#statuses + 1] = a[2]
  end
  if not jobs then
    redis.call('HSET', joins, root, cjson.encode(arrived))
    if redis.call('HLEN', joins) > JOINS_MAX then
      local oldest = nil
      for _, key in ipairs(redis.call('HKEYS', joins)) do
        local tick = tonumber(key)
        if tick and (not oldest or tick < oldest) then oldest = tick end
      end
      if oldest then
        local key = string.format('%d', oldest)
        redis.call('HDEL', joins, key)
        record_outcome(state, runs, maxlen, not_run('missed', {'root_tick', key},
          'after_all: given up waiting for every upstream of this root tick'), false)
      end
    end
    return {'waiting'}
  end
  redis.call('HDEL', joins, root)
  ctx = {'root_tick', root, 'upstream_job', table.concat(jobs, ','),
    'upstream_run_id', table.concat(run_ids, ','), 'upstream_status', table.concat(statuses, ',')}
end
ctx = params(ctx)

local pause = redis.call('HMGET', state, 'paused', 'paused_until_ms')
if pause_holds(pause[1], tonumber(pause[2] or ''), now) or cluster_holds(ARGV[19], now) then
  return {'paused'}
end
if misfire == 'skip' and now - at > grace then
  record_outcome(state, runs, maxlen, not_run('missed', ctx, ''), false)
  return {'missed'}
end
if overlap == 'skip' then
  local holder = redis.call('GET', lease)
  if holder then
    record_outcome(state, runs, maxlen, not_run('skipped_overlap', ctx, ''), false)
    return {'busy', holder}
  end
end
-- Runs in flight whose holder stopped renewing (count_expired): a
-- follower has no ticks whose claims would notice them, so its claims
-- tell the caller, who sweeps them (abandoned; a rerun if asked for), as
-- claim.lua's do; a holder restarted at once under its name would
-- otherwise leave them in flight for good.
local expired = count_expired(running, now)
local fence = next_fence(state, min_fence, now)
if slots then group_hold(slots, run_id, now, lease_ms) end
local lease_key = start_run(running, lease, run_id, at, lease_ms, overlap, replica, host,
  'chain', 0, fence, now, now, ctx, slots)
announce_claim(channel, job .. ' 0 ' .. string.format('%d', fence))
return {'claimed', fence, now, lease_key, ctx, expired}
