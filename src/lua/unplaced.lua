-- Records a tick of a job that no live replica may run (none has every tag
-- of its `run_on`) as `missed` with the reason `no_matching_replica`, once.
-- A replica that does not match the job calls it at or after the tick, once
-- its rendezvous wait is over and its view of the live replicas has no
-- match. Like a claim that finds the tick excluded, it moves the job's
-- high-water mark to the tick (only when tick > last_tick: a matching
-- replica that claimed it meanwhile, or another recorder, wins), announces
-- it on the claims channel, and records the outcome, so a claim that
-- follows sees no gap there.
-- KEYS: state, runs, events
-- ARGV: tick_ms, recorder replica, host, maxlen, notification rules
--       (read_notices; '' for none), channel, job name, run_on (the tags,
--       space-separated)
-- Returns the high-water mark it moved past (-1: none) when it recorded
-- the tick: the caller records the schedule's ticks between the two as
-- missed (missed.lua), as after a claim. -2 when it did not record it: a
-- claim or a record covers it already, it is still ahead by Redis time,
-- or the state holds values cronlease did not write (the claims name
-- those). `missed_until` is left to missed.lua, which records the ticks
-- before this one.
local state, runs = KEYS[1], KEYS[2]
local tick, recorder, host, maxlen = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local channel, job, run_on = ARGV[6], ARGV[7], ARGV[8]
local fields = redis.call('HMGET', state, 'last_tick', 'fence')
local corrupt = corrupt_values(fields[1], fields[2])
if corrupt then return -2 end
local stored = tonumber(fields[1] or '-1')
local fence = tonumber(fields[2] or '0')
if tick <= stored then return -2 end
local now = now_ms()
if tick > now then return -2 end
redis.call('HSET', state, 'last_tick', ARGV[1])
record_outcome(state, runs, maxlen, {'tick', ARGV[1], 'fence', '0', 'run_id', '',
  'replica', '', 'host', host, 'started_ms', now, 'finished_ms', now, 'duration_ms', '0',
  'status', 'missed', 'attempts', '0', 'output', '', 'trigger', 'schedule',
  'recorded_by', recorder, 'reason', 'no_matching_replica', 'run_on', run_on}, false)
redis.call('HINCRBY', state, 'missed_total', 1)
announce_claim(channel, job .. ' ' .. ARGV[1] .. ' ' .. string.format('%d', fence))
emit(read_notices(KEYS[3], ARGV[5]), state, 'missed', {'tick', ARGV[1], 'status', 'missed',
  'replica', recorder, 'last_tick', ARGV[1], 'count', 1, 'reason', 'no_matching_replica'})
return stored
