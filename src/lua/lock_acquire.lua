-- Takes the cluster-wide lock of `cronlease lock NAME` (or the library's)
-- for run id ARGV[1], with a new fence, unless someone holds it.
-- A lock unused for ARGV[5] ms forgets its keys (they expire), so lock
-- names used once do not stay in Redis for ever. Its fence then starts
-- again from the Redis time in ms: above every fence it handed out before
-- (those were either small counters or earlier times plus one per
-- acquisition), so fences of one lock still only grow.
-- A holder that asks again with the run id it holds by (a library lock
-- with an owner) re-enters: one more hold (the state's `holds`), the same
-- fence; the lock is free after as many releases (lock_release.lua).
-- A lock has one lease, so when it is free every entry left in `running`
-- is of a holder that died: they are dropped, not read.
-- This runs on every acquisition, so it is kept cheap: no prelude (its
-- function definitions cost every call; the time is read as its now_ms
-- does), and numbers go to Redis as strings (ARGV as given, `%d`): a Lua
-- number handed to redis.call or cjson is printed as a float, which cost
-- more than the script's Redis commands. The `running` entry has
-- start_run's fields (prelude.lua).
-- KEYS: state, running, lease
-- ARGV: run_id, lease_ms, holder, host, idle_ms, running_ttl_ms (idle_ms +
-- lease_ms)
-- Returns {'acquired', fence, lease_key}, {'reentered', fence, lease_key,
-- holds} or {'held', holder, pttl_ms}.
local state, running, lease = KEYS[1], KEYS[2], KEYS[3]
local run_id, lease_ms, holder, host = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local idle_ms, running_ttl_ms = ARGV[5], ARGV[6]
local current = redis.call('GET', lease)
if current == run_id then
  local entry = redis.call('HGET', running, run_id)
  if entry then
    local holds = redis.call('HINCRBY', state, 'holds', '1')
    return {'reentered', cjson.decode(entry).fence, lease, holds}
  end
end
if current then return {'held', current, redis.call('PTTL', lease)} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('DEL', running)
local fence = redis.call('HINCRBY', state, 'fence', '1')
if fence == 1 then
  -- The lock's keys had expired (or never were): start from the time.
  fence = now + 1
  redis.call('HSET', state, 'fence', string.format('%d', fence))
end
redis.call('HSET', state, 'holds', '1')
redis.call('PEXPIRE', state, idle_ms)
redis.call('HSET', running, run_id, string.format(
  '{"tick":0,"fence":%d,"replica":%s,"host":%s,"started":%d,"expires":%d,"lease_key":%s,"trigger":"lock","rerun":0}',
  fence, cjson.encode(holder), cjson.encode(host), now, now + tonumber(lease_ms), cjson.encode(lease)))
redis.call('PEXPIRE', running, running_ttl_ms)
redis.call('SET', lease, run_id, 'PX', lease_ms)
return {'acquired', fence, lease}
