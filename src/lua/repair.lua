-- `cronlease repair JOB`: clears what no honest writer puts in one job's
-- state (see claim.lua): a high-water mark later than any claim could set,
-- a fence past what a number holds exactly, either field not a number,
-- the finding a claim or a sweep recorded (`repair_field`, `repair_value`,
-- `repair_at`), and the `running` entries a sweep quarantined. What is
-- removed the replicas re-seed from what their own answers showed.
-- KEYS: state, quarantine
-- Returns the names of what was cleared.
local state, quarantine = KEYS[1], KEYS[2]
local now = now_ms()
local values = redis.call('HMGET', state, 'last_tick', 'fence', 'repair_field')
local cleared = {}
local last_tick, fence = tonumber(values[1]), tonumber(values[2])
if values[1] and (not last_tick or last_tick > now + MAX_AHEAD_MS) then
  redis.call('HDEL', state, 'last_tick')
  cleared[#cleared + 1] = 'last_tick'
end
if values[2] and (not fence or fence > MAX_FENCE) then
  redis.call('HDEL', state, 'fence')
  cleared[#cleared + 1] = 'fence'
end
if values[3] then
  redis.call('HDEL', state, 'repair_field', 'repair_value', 'repair_at')
  cleared[#cleared + 1] = 'finding'
end
if redis.call('DEL', quarantine) == 1 then
  cleared[#cleared + 1] = 'quarantine'
end
return cleared
