-- Removes the heartbeat entry of a replica that has been silent for a long
-- time, and its job hashes, unless it spoke again since the caller looked
-- (its entry's `last_seen_ms` is no longer the one the caller saw).
-- KEYS: replicas, replica_jobs, told (replica_dead.lua's; same slot: see
--       `Keys::replica_jobs`)
-- ARGV: replica id, last_seen_ms as seen
-- Returns 1 when removed, 0 when it was gone or had come back.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local ok, record = pcall(cjson.decode, raw)
if ok and type(record) == 'table' and record.last_seen_ms ~= tonumber(ARGV[2]) then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], 'dead:' .. ARGV[1])
return 1
