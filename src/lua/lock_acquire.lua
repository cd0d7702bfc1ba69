-- Takes the cluster-wide lock of `cronlease lock NAME` (or the library's)
-- with a new fence, unless someone else holds it.
-- A lock is two keys. `lease` (PX the lease) holds the holder's record,
-- one string: ARGV[1], which the caller wrote (its token, the run id
-- length-prefixed so that no token is the beginning of another's; holder
-- and host, length-prefixed; `|since_ms`, its estimate of the Redis
-- time), then `|fence|holds`, and a `w` once a waiter waits for the
-- release (lock_release.lua publishes only then). `state` is a hash with
-- the lock's `fence`. Nothing but the lock scripts and
-- `Store::lock_holder` reads a lock's keys; a release, renewal or
-- re-entry looks for the token at the beginning of the lease.
-- The fence rises on every attempt, granted or not (a refused one only
-- leaves a gap), so that a grant is two commands. The state's TTL (30
-- days, `LOCK_IDLE_TTL`) is set when the state is made and never pushed
-- back: a lock's state is forgotten 30 days after it was made, used or
-- not, and its fence then starts again from the Redis time in µs, plus
-- one. Every fence it handed out before is below that: they were a small
-- counter, or such a start plus one per attempt since, and no lock is
-- attempted a million times a second (a Redis does not run that many
-- scripts). So fences of one lock only grow, across expiries too.
-- A holder that asks again with the token it holds by (a library lock
-- with an owner) re-enters: one more hold, the same fence; the lock is
-- free after as many releases (lock_release.lua).
-- This runs on every acquisition, so it is kept cheap: no prelude (its
-- function definitions cost every call), no TIME but for a new state, the
-- record's beginning written by the caller and its end by one
-- concatenation, numbers go to Redis as strings (`%d`: a Lua number
-- handed to redis.call or `..` is printed as a float), and the token is
-- looked for at the beginning of a value rather than cut out of it (each
-- new Lua string is hashed whole).
-- KEYS: state, lease
-- ARGV: the record's beginning, lease_ms,
--       'wait' (the caller waits for a release if refused) or 'try'
-- Returns the fence (acquired), {'reentered', fence, holds} or
-- {'held', the lease's value, pttl_ms}.
local state, lease = KEYS[1], KEYS[2]
local fence = redis.call('HINCRBY', state, 'fence', '1')
if fence == 1 then
  -- The lock's state had expired (or never was): start from the time.
  local t = redis.call('TIME')
  fence = tonumber(t[1]) * 1000000 + tonumber(t[2]) + 1
  redis.call('HSET', state, 'fence', string.format('%d', fence))
  redis.call('PEXPIRE', state, '2592000000')
end
if redis.call('SET', lease, ARGV[1] .. '|' .. string.format('%d', fence) .. '|1',
    'NX', 'PX', ARGV[2]) then
  return fence
end
local current = redis.call('GET', lease)
-- A record of this layout, not an older cronlease's run id (which its
-- holder compares whole, so it is never marked).
local ours = string.find(current, '^%d+:')
local head, held_fence, holds, waiters = string.match(current, '^(.*)|(%d+)|(%d+)(w?)$')
if ours and head then
  local colon = string.find(ARGV[1], ':', 1, true)
  local token = string.sub(ARGV[1], 1, colon + tonumber(string.sub(ARGV[1], 1, colon - 1)))
  if string.find(current, token, 1, true) == 1 then
    holds = tonumber(holds) + 1
    redis.call('SET', lease, head .. '|' .. held_fence .. '|' .. holds .. waiters,
      'PX', math.max(redis.call('PTTL', lease), 1))
    return {'reentered', tonumber(held_fence), holds}
  end
  if ARGV[3] == 'wait' and waiters == '' then
    redis.call('APPEND', lease, 'w')
  end
end
return {'held', current, redis.call('PTTL', lease)}
