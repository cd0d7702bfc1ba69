-- Records the outcome of one run and releases what it held.
-- KEYS: state, running, lease_key, runs, done (a marker per run id)
-- ARGV: run_id, maxlen, done_ttl_ms, then outcome field name/value pairs
-- The outcome is current when the run was still in `running`; when someone
-- already recorded it (abandoned), it is appended marked stale. The done
-- marker makes a second delivery of the same outcome (a retry after a lost
-- reply, a spooled copy) a no-op.
local state, running, lease_key, runs, done = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local run_id, maxlen, done_ttl = ARGV[1], ARGV[2], ARGV[3]
local previous = redis.call('GET', done)
if previous then return {'duplicate', previous} end
local stale = not redis.call('HGET', running, run_id)
if redis.call('GET', lease_key) == run_id then redis.call('DEL', lease_key) end
redis.call('HDEL', running, run_id)
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = record_outcome(state, runs, maxlen, fields, stale)
redis.call('SET', done, id, 'PX', done_ttl)
if stale then return {'stale', id} end
return {'current', id}
