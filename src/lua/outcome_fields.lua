-- The newest ARGV[1] entries of a job's outcome stream, newest first,
-- each with only the fields named in ARGV[2..] (in the entry's order):
-- what the dashboard's overview shows, without the output tails, which
-- would be most of the reply. Reads only; runs without the prelude.
-- KEYS: the stream    ARGV: count, field names
-- Returns XREVRANGE's shape: {{id, {field, value, ...}}, ...}.
local wanted = {}
for i = 2, #ARGV do wanted[ARGV[i]] = true end
local entries = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[1])
for _, entry in ipairs(entries) do
  local fields, kept = entry[2], {}
  for i = 1, #fields, 2 do
    if wanted[fields[i]] then
      kept[#kept + 1] = fields[i]
      kept[#kept + 1] = fields[i + 1]
    end
  end
  entry[2] = kept
end
return entries
