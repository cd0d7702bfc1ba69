-- Releases one hold of a lock (`cronlease lock NAME`, or the library's)
-- if its lease still begins with token ARGV[1] (see lock_acquire.lua):
-- the last hold frees it, and wakes the waiters, if an acquisition was
-- refused meanwhile (`w` at the lease's end), by a PUBLISH on the lock's
-- channel, whose name is the
-- lease key's with `released` for `lease` (`Keys::lock_channel`). With
-- ARGV[2] = 'owner' (a token that can re-enter) an earlier hold only
-- counts down; any other token holds once, and its release frees the lock
-- without counting. Runs without the prelude.
-- KEYS: lease    ARGV: token, 'owner' or 'once'
-- Returns 1 when freed, 2 when held on by the same owner, 0 when the lock
-- was no longer ours.
local lease, token = KEYS[1], ARGV[1]
local current = redis.call('GET', lease)
if not current or string.find(current, token, 1, true) ~= 1 then return 0 end
local waited = string.byte(current, -1) == 119
if ARGV[2] == 'owner' then
  -- One hold (`|1` or `|1w` at the end), the usual case, frees it without
  -- a pattern match.
  local back = waited and 1 or 0
  local bar, one = string.byte(current, -2 - back, -1 - back)
  if bar ~= 124 or one ~= 49 then
    local head, holds, waiters = string.match(current, '^(.*)|(%d+)(w?)$')
    if head and tonumber(holds) > 1 then
      redis.call('SET', lease, head .. '|' .. (tonumber(holds) - 1) .. waiters,
        'PX', math.max(redis.call('PTTL', lease), 1))
      return 2
    end
  end
end
redis.call('DEL', lease)
if waited then
  redis.call('PUBLISH', string.sub(lease, 1, -6) .. 'released', token)
end
return 1
