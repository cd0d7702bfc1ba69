-- Starts the run of the lowest pending backfill tick (backfill_plan.lua
-- queued it) for the calling replica, exactly once: the tick leaves the
-- pending set and joins `backfilled` in the same call that starts its run.
-- Nothing starts while the job is paused (a timed pause until its end) or
-- the cluster's pause holds, while `backfill_concurrency`
-- backfill runs are in flight, or (overlap 'skip' or 'replace') while any
-- run holds the job's lease: the tick waits, it is never skipped. The run
-- is the job's like any other: the next fence, its lease, its entry in
-- `running` (trigger `backfill`), swept as `abandoned` if its holder dies.
-- Its claim is announced on the claims channel as after.lua's are, with
-- tick 0: a backfilled tick is at or below `last_tick`, and no replica's
-- wait for a scheduled tick should end on it.
-- A job in a concurrency group takes a slot too (group_admits), or the
-- tick waits.
-- KEYS: state, running, lease, pending, backfilled, then for a group its
--       slots and waiting ticks
-- ARGV: run id, lease_ms, overlap, replica, host, min_fence, claims
--       channel, job name, the cluster's pause (cluster_holds: 'none',
--       'hold' or the Redis ms it ends at), the group's name ('' for none)
--       and max
-- Returns {'claimed', tick, fence, started, lease_key, expired, backfill id}
-- | {'wait', expired} | {'paused'} | {'empty'} | {'corrupt', …}; expired:
-- runs in flight whose holder stopped renewing, for the caller to sweep.
-- Ticks of `backfilled` kept at most (the oldest go first).
local BACKFILLED_KEEP = 100000

local state, running, lease, pending, backfilled = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local run_id, lease_ms, overlap = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local replica, host, min_fence = ARGV[4], ARGV[5], tonumber(ARGV[6])
local channel, job = ARGV[7], ARGV[8]

local corrupt = corrupt_state(state)
if corrupt then return corrupt end
local function done()
  if redis.call('ZCARD', pending) == 0 then
    redis.call('HDEL', state, 'backfill_queued', 'backfill_concurrency')
    return true
  end
  return false
end
if done() then return {'empty'} end
local now = now_ms()
local pause = redis.call('HMGET', state, 'paused', 'paused_until_ms')
if pause_holds(pause[1], tonumber(pause[2] or ''), now) or cluster_holds(ARGV[9], now) then
  return {'paused'}
end
local limit = tonumber(redis.call('HGET', state, 'backfill_concurrency') or '1') or 1
local in_flight, expired = 0, 0
local entries = redis.call('HGETALL', running)
for i = 2, #entries, 2 do
  local e = read_entry(entries[i])
  if not e or e.expires < now then
    expired = expired + 1
  elseif e.trigger == 'backfill' then
    in_flight = in_flight + 1
  end
end
if in_flight >= limit then return {'wait', expired} end
if overlap ~= 'allow' and redis.call('EXISTS', lease) == 1 then return {'wait', expired} end
local slots = nil
if (ARGV[10] or '') ~= '' then
  slots = KEYS[6]
  if not group_admits(slots, KEYS[7], tonumber(ARGV[11]), now, now) then
    return {'wait', expired}
  end
end
local last_tick = tonumber(redis.call('HGET', state, 'last_tick') or '-1')
while true do
  local member = redis.call('ZRANGE', pending, 0, 0)[1]
  if not member then
    done()
    return {'empty'}
  end
  redis.call('ZREM', pending, member)
  local tick_text, owner = string.match(member, '^(%d+) (%S+)$')
  local tick = tonumber(tick_text or '')
  -- A member cronlease did not write, a tick past the high-water mark
  -- (Redis lost the state the plan saw) or one a backfill already ran:
  -- dropped, nothing run for it.
  if tick and tick <= last_tick
    and #redis.call('ZRANGEBYSCORE', backfilled, tick, tick, 'LIMIT', 0, 1) == 0 then
    local fence = next_fence(state, min_fence, now)
    if slots then group_hold(slots, run_id, now, lease_ms) end
    local lease_key = start_run(running, lease, run_id, tick, lease_ms, overlap,
      replica, host, 'backfill', 0, fence, now, now, nil, slots)
    redis.call('ZADD', backfilled, tick, tick_text .. ' ' .. run_id)
    if redis.call('ZCARD', backfilled) > BACKFILLED_KEEP then
      redis.call('ZREMRANGEBYRANK', backfilled, 0, -BACKFILLED_KEEP - 1)
    end
    done()
    announce_claim(channel, job .. ' 0 ' .. string.format('%d', fence))
    return {'claimed', tick_text, fence, now, lease_key, expired, owner}
  end
end
