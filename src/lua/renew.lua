-- Extends one run's lease if it still holds our run id. Part of a pipeline
-- that renews every run of a replica at once.
-- KEYS: lease_key, running    ARGV: run_id, lease_ms
-- Returns 1 when renewed, 2 when renewed and an operator asked for the run
-- to stop (its entry's `kill`, written by kill.lua: read with the entry,
-- at no further cost), 0 when the lease is not ours.
local lease_key, running = KEYS[1], KEYS[2]
local run_id, lease_ms = ARGV[1], tonumber(ARGV[2])
if redis.call('GET', lease_key) ~= run_id then return 0 end
local raw = redis.call('HGET', running, run_id)
if not raw then return 0 end
-- An entry someone else overwrote proves no lease: the run stops.
local e = read_entry(raw)
if not e then return 0 end
redis.call('PEXPIRE', lease_key, lease_ms)
e.expires = now_ms() + lease_ms
-- The run's concurrency group slot lasts as long as its lease.
if type(e.group) == 'string' then
  redis.call('ZADD', e.group, 'XX', e.expires, run_id)
  redis.call('PEXPIRE', e.group, lease_ms + GROUP_SLOTS_SPARE_MS)
end
redis.call('HSET', running, run_id, cjson.encode(e))
if e.kill then return 2 end
return 1
