-- Tells once that a replica stopped: its heartbeat record still shows the
-- `last_seen_ms` the caller saw (it has not spoken since), and no replica
-- told of this silence before (`told`: `dead:<replica>` → the
-- `last_seen_ms` told of; forget_replica.lua removes it with the replica).
-- KEYS: replicas, told, events (all in the replicas' slot: see
--       `Keys::replica_jobs`)
-- ARGV: replica id, last_seen_ms as seen, silent_ms, notification rules
--       (read_notices)
-- Returns 1 when it told, 0 otherwise.
local replicas, told, events = KEYS[1], KEYS[2], KEYS[3]
local replica, seen = ARGV[1], ARGV[2]
local notices = read_notices(events, ARGV[4])
if not notices then return 0 end
local raw = redis.call('HGET', replicas, replica)
if not raw then return 0 end
local ok, record = pcall(cjson.decode, raw)
if not ok or type(record) ~= 'table' or record.last_seen_ms ~= tonumber(seen) then return 0 end
if redis.call('HGET', told, 'dead:' .. replica) == seen then return 0 end
redis.call('HSET', told, 'dead:' .. replica, seen)
local host = record.host
if type(host) ~= 'string' then host = '' end
emit(notices, told, 'replica_dead', {'replica', replica, 'host', host, 'last_seen_ms', seen,
  'silent_ms', ARGV[3]})
return 1
