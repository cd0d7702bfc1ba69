-- Takes the cluster-wide lock of `cronlease lock NAME` (or the library's)
-- with a new fence, unless someone else holds it.
-- A lock is two keys. `lease` (PX the lease) holds the holder's record,
-- one string, ARGV[1] as the caller wrote it: its token (the run id,
-- length-prefixed, so that no token is the beginning of another's),
-- holder and host (length-prefixed), `|since_ms` (its estimate of the
-- Redis time) and `|holds`; a `w` is appended when an acquisition is
-- refused (a waiter, or a try that gives up), and lock_release.lua
-- publishes the release only then. `state` is a hash with the lock's
-- `fence`: the holder's, since only a grant (and, with quorum,
-- lock_fence.lua's raise to the holder's) changes it. Nothing but the
-- lock scripts and `Store::lock_holder` reads a lock's keys; a release,
-- renewal or re-entry looks for the token at the beginning of the lease.
-- The state's TTL (30 days, `LOCK_IDLE_TTL`) is set when it is made, and
-- pushed back by the holder's renewals and, when a grant's fence is more
-- than 29 days old (below the caller's Redis time then, in µs), by the
-- caller, which lifts the fence to its Redis time in µs (lock_fence.lua)
-- before it takes the grant. A state lives on while its lock is used, and
-- a hold never outlives it. A forgotten state's fence starts again from
-- the Redis time in µs, plus one. Every fence handed out before is below
-- that: they were a small counter, or such a start plus one per grant
-- since, and no lock is granted a million times a second (a Redis does
-- not run that many scripts). So fences of one lock only grow, across
-- expiries too.
-- A holder that asks again with the token it holds by (a library lock
-- with an owner) re-enters: one more hold, the same fence; the lock is
-- free after as many releases (lock_release.lua).
-- This runs on every acquisition, so it is kept cheap: the lease first
-- and its value as it comes (a free lock costs SET and HINCRBY, nothing
-- made in Lua), no prelude (its function definitions cost every call), no
-- TIME but for a new state, numbers go to Redis as strings (`%d`: a
-- Lua number handed to redis.call is printed as a float), and the token is
-- looked for at the beginning of a value rather than cut out of it (each
-- new Lua string is hashed whole).
-- KEYS: state, lease
-- ARGV: the record, lease_ms
-- Returns the fence (acquired), {'reentered', fence, holds} or
-- {'held', the lease's value, pttl_ms}.
local state, lease = KEYS[1], KEYS[2]
if redis.call('SET', lease, ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.call('HINCRBY', state, 'fence', '1')
  if fence == 1 then
    -- A new state (its keys had expired, or never were): start from the
    -- time, above every fence so far.
    local t = redis.call('TIME')
    fence = tonumber(t[1]) * 1000000 + tonumber(t[2]) + 1
    redis.call('HSET', state, 'fence', string.format('%d', fence))
    redis.call('PEXPIRE', state, '2592000000')
  end
  return fence
end
local current = redis.call('GET', lease)
-- A record of this layout, not an older cronlease's run id (which its
-- holder compares whole, so it is never marked).
local ours = string.find(current, '^%d+:')
local head, holds, waiters = string.match(current, '^(.*)|(%d+)(w?)$')
if ours and head then
  local colon = string.find(ARGV[1], ':', 1, true)
  local token = string.sub(ARGV[1], 1, colon + tonumber(string.sub(ARGV[1], 1, colon - 1)))
  if string.find(current, token, 1, true) == 1 then
    local fence = redis.call('HGET', state, 'fence')
    if not fence then
      -- Only if the state expired under the hold (see above: a holder
      -- whose clock ran days behind), until the next renewal makes it again.
      return redis.error_reply('the state of held lock ' .. state .. ' is gone: its fence is not known')
    end
    holds = tonumber(holds) + 1
    redis.call('SET', lease, head .. '|' .. holds .. waiters,
      'PX', math.max(redis.call('PTTL', lease), 1))
    return {'reentered', tonumber(fence), holds}
  end
  if waiters == '' then
    redis.call('APPEND', lease, 'w')
  end
end
return {'held', current, redis.call('PTTL', lease)}
