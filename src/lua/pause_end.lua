-- Ends a job's timed pause whose end has come, if it is still the pause
-- that ends at ARGV[1] (a replica's sweep of ended pauses; a claim does
-- the same, see end_pause): once, whoever comes first.
-- KEYS: state, actions    ARGV: until_ms
-- Answers 1 when this call ended it, 0 when it was over or is another.
if end_pause(KEYS[1], KEYS[2], now_ms(), tonumber(ARGV[1])) then return 1 end
return 0
