-- `cronlease kill JOB [RUN_ID]`: asks the holders of one job's runs in
-- flight to stop them. Each run's `running` entry gets `kill` (who asked;
-- the first asker stays), which the renew script reads with the entry, so
-- the holder learns of it at its next renewal even when the PUBLISH that
-- follows (the run id, on the kill channel) reaches no one; the finish
-- script copies it into the outcome as `killed_by`.
-- KEYS: running    ARGV: who, run id ('' for every run in flight), channel
-- Returns the run ids asked to stop.
local running = KEYS[1]
local who, only, channel = ARGV[1], ARGV[2], ARGV[3]
local asked = {}
local function ask(run_id, raw)
  local e = read_entry(raw)
  if not e then return end
  if type(e.kill) ~= 'string' then
    e.kill = who
    redis.call('HSET', running, run_id, cjson.encode(e))
  end
  redis.call('PUBLISH', channel, run_id)
  asked[#asked + 1] = run_id
end
if only ~= '' then
  local raw = redis.call('HGET', running, only)
  if raw then ask(only, raw) end
else
  local entries = redis.call('HGETALL', running)
  for i = 1, #entries, 2 do ask(entries[i], entries[i + 1]) end
end
return asked
