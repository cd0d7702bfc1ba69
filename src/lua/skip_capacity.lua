-- Records tick ARGV[1] of one job `skipped_capacity`: its grace passed
-- while every replica that could claim it had its `[daemon] max_runs` in
-- flight, or the job's concurrency group had no slot free. The high-water
-- mark moves to the tick in the same call, so whichever replica gives up
-- first records it once; a tick claimed meanwhile answers `taken`.
-- KEYS: state, runs, then for a group the group's waiting ticks
-- ARGV: tick_ms, run_id, replica, host, maxlen, trigger, reason
--       ('capacity' or 'group'), group name ('' for none), claims channel,
--       job name, waiter's until (group_waiter; '' for none)
-- Returns {'skipped', previous high-water mark (-1: none), fence} or
-- {'taken', last_tick, fence}, or {'corrupt', field, value}.
local state, runs = KEYS[1], KEYS[2]
local tick = tonumber(ARGV[1])
local job, group = ARGV[10], ARGV[8]
if KEYS[3] and ARGV[11] ~= '' then
  redis.call('ZREM', KEYS[3], group_waiter(job, tick, tonumber(ARGV[11])))
end
local f = redis.call('HMGET', state, 'last_tick', 'fence')
local corrupt = corrupt_values(f[1], f[2])
if corrupt then return corrupt end
local stored = tonumber(f[1] or '-1')
local fence = f[2] or '0'
if tick <= stored then return {'taken', stored, fence} end
local now = now_ms()
redis.call('HSET', state, 'last_tick', ARGV[1])
local fields = {'tick', ARGV[1], 'fence', '0', 'run_id', ARGV[2], 'replica', ARGV[3],
  'host', ARGV[4], 'started_ms', now, 'finished_ms', now, 'duration_ms', '0',
  'status', 'skipped_capacity', 'attempts', '0', 'output', '', 'trigger', ARGV[6],
  'reason', ARGV[7]}
if group ~= '' then
  fields[#fields + 1] = 'group'
  fields[#fields + 1] = group
end
record_outcome(state, runs, ARGV[5], fields, false)
announce_claim(ARGV[9], job .. ' ' .. ARGV[1] .. ' ' .. fence)
return {'skipped', stored, fence}
