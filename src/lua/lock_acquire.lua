-- Takes the cluster-wide lock of `cronlease lock NAME` (or the library's)
-- for run id ARGV[1], with a new fence, unless someone holds it.
-- A lock is two keys: `lease` (the holder's run id, PX the lease) and
-- `state`, one hash with the fence and the holder's record (`run_id`,
-- `holder`, `host`, `since_s` and `since_us` from Redis TIME, `holds`),
-- written by one HSET. There is no `running` entry: nothing but the lock
-- scripts and `Store::lock_holder` reads a lock's keys.
-- A lock unused for ARGV[5] ms forgets its keys (they expire), so lock
-- names used once do not stay in Redis for ever. Its fence then starts
-- again from the Redis time in µs, plus one. Every fence it handed out
-- before is below that: they were a small counter, or such a start plus
-- one per acquisition since, and no lock is acquired a million times a
-- second (a Redis does not run that many scripts). So fences of one lock
-- only grow, across expiries too.
-- A holder that asks again with the run id it holds by (a library lock
-- with an owner) re-enters: one more hold (`holds`), the same fence; the
-- lock is free after as many releases (lock_release.lua).
-- This runs on every acquisition, so it is kept cheap: the lease is taken
-- first with SET NX (a free lock costs no GET), no prelude (its
-- function definitions cost every call), Redis TIME's two parts stored as
-- they come, and numbers go to Redis as strings (ARGV as given, `%d`): a
-- Lua number handed to redis.call is printed as a float, which costs more
-- than a command.
-- KEYS: state, lease
-- ARGV: run_id, lease_ms, holder, host, idle_ms
-- Returns {'acquired', fence}, {'reentered', fence, holds} or
-- {'held', holder's run id, pttl_ms}.
local state, lease = KEYS[1], KEYS[2]
local run_id = ARGV[1]
if not redis.call('SET', lease, run_id, 'NX', 'PX', ARGV[2]) then
  local current = redis.call('GET', lease)
  if current == run_id then
    local holds = redis.call('HINCRBY', state, 'holds', '1')
    return {'reentered', tonumber(redis.call('HGET', state, 'fence')), holds}
  end
  return {'held', current, redis.call('PTTL', lease)}
end
local fence = redis.call('HINCRBY', state, 'fence', '1')
local t = redis.call('TIME')
if fence == 1 then
  -- The lock's keys had expired (or never were): start from the time.
  fence = tonumber(t[1]) * 1000000 + tonumber(t[2]) + 1
  redis.call('HSET', state, 'fence', string.format('%d', fence))
end
redis.call('HSET', state, 'run_id', run_id, 'holds', '1', 'holder', ARGV[3],
  'host', ARGV[4], 'since_s', t[1], 'since_us', t[2])
redis.call('PEXPIRE', state, ARGV[5])
return {'acquired', fence}
