-- Takes the cluster-wide lock of `cronlease lock NAME` for run id ARGV[1],
-- with a new fence, unless someone holds it. Entries of holders that died
-- (expired) are dropped from `running` on the way.
-- A lock unused for ARGV[5] ms forgets its keys (they expire), so lock
-- names used once do not stay in Redis for ever. Its fence then starts
-- again from the Redis time in ms: above every fence it handed out before
-- (those were either small counters or earlier times plus one per
-- acquisition), so fences of one lock still only grow.
-- A holder that asks again with the run id it holds by (a library lock
-- with an owner) re-enters: one more hold (the state's `holds`), the same
-- fence; the lock is free after as many releases (lock_release.lua).
-- KEYS: state, running, lease    ARGV: run_id, lease_ms, holder, host, idle_ms
-- Returns {'acquired', fence, lease_key}, {'reentered', fence, lease_key,
-- holds} or {'held', holder, pttl_ms}.
local state, running, lease = KEYS[1], KEYS[2], KEYS[3]
local run_id, lease_ms, holder, host = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local idle_ms = tonumber(ARGV[5])
local current = redis.call('GET', lease)
if current == run_id then
  local entry = redis.call('HGET', running, run_id)
  if entry then
    local holds = redis.call('HINCRBY', state, 'holds', 1)
    return {'reentered', cjson.decode(entry).fence, lease, holds}
  end
end
if current then return {'held', current, redis.call('PTTL', lease)} end
local now = now_ms()
local entries = redis.call('HGETALL', running)
for i = 1, #entries, 2 do
  if cjson.decode(entries[i + 1]).expires < now then redis.call('HDEL', running, entries[i]) end
end
local min_fence = 0
if redis.call('EXISTS', state) == 0 then min_fence = now end
local fence, lease_key = start_run(state, running, lease, run_id, now, lease_ms, 'skip',
  holder, host, 'lock', 0, min_fence, now)
redis.call('HSET', state, 'holds', 1)
redis.call('PEXPIRE', state, idle_ms)
redis.call('PEXPIRE', running, idle_ms + lease_ms)
return {'acquired', fence, lease_key}
