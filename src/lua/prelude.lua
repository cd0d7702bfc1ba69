-- Shared by every cronlease script (prepended to each). Keys of one job share
-- the hash tag {job}, so a script touches one Redis Cluster slot.

-- Bounds no honest writer passes (store::MAX_CLAIM_AHEAD_MS, store::MAX_FENCE):
-- a claim is made at most its lead (under a second) ahead of its tick, so a
-- high-water mark further ahead of Redis time was forged; a fence above
-- 2^53 - 1 cannot be counted exactly in a Lua number.
local MAX_AHEAD_MS = 2000
local MAX_FENCE = 9007199254740991

-- Redis server time in ms: the one clock all replicas agree on.
-- Redis time in ms, and in µs.
local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

local function now_ms()
  local ms = clock()
  return ms
end

-- Claim announcements (claim.lua): nil when a script runs alone, and each
-- claim publishes its own line; a batch of claims (store/batch.rs) sets a
-- table of lines per channel and publishes each channel's lines in one
-- message after its last item, still inside the script.
local announcements = nil

local function announce_claim(channel, line)
  if announcements then
    local lines = announcements[channel]
    if not lines then
      lines = {}
      announcements[channel] = lines
    end
    lines[#lines + 1] = line
  else
    redis.call('PUBLISH', channel, line)
  end
end

-- The outcome fields the job's summary keeps, and their names there.
local SUMMARY_FIELDS = {
  status = 'outcome_status', tick = 'outcome_tick', fence = 'outcome_fence',
  replica = 'outcome_replica', finished_ms = 'outcome_finished_ms',
  duration_ms = 'outcome_duration_ms', run_id = 'outcome_run_id',
  killed_by = 'outcome_killed_by',
}

-- Appends one outcome to the job's stream and, unless it is stale, makes it
-- the job's current summary in the state hash (fields `outcome_*`, and
-- `last_ok_id`; never `last_tick`, which is the claim's high-water mark and
-- only ever moves forward). `fields` is a flat list of name, value pairs.
local function record_outcome(state, runs, maxlen, fields, stale)
  fields[#fields + 1] = 'stale'
  fields[#fields + 1] = stale and '1' or '0'
  local id = redis.call('XADD', runs, 'MAXLEN', '~', maxlen, '*', unpack(fields))
  if not stale then
    local summary = {'outcome_id', id}
    for i = 1, #fields, 2 do
      local name, value = fields[i], fields[i + 1]
      local kept = SUMMARY_FIELDS[name]
      if kept then
        summary[#summary + 1] = kept
        summary[#summary + 1] = value
        if name == 'status' and value == 'ok' then
          summary[#summary + 1] = 'last_ok_id'
          summary[#summary + 1] = id
        end
      end
    end
    redis.call('HSET', state, unpack(summary))
  end
  return id
end

-- The dedup window: which run ids have a recorded outcome (sorted set
-- `done_at`: run id scored by the ms of its outcome's stream id), so a second
-- delivery of an outcome (a retry after a lost reply, a spooled copy) is
-- recognised. Bounded: the newest `count` run ids; the key expires
-- `window_ms` after the job's last outcome (a job removed from the table).
local function remember_done(done_at, run_id, ms, count, window_ms)
  redis.call('ZADD', done_at, ms, run_id)
  redis.call('ZREMRANGEBYRANK', done_at, 0, -count - 1)
  redis.call('PEXPIRE', done_at, window_ms)
end

-- The stream id of run_id's outcome, which the dedup window dated `ms`: the
-- entry of that ms with its run id, or the previous release's `done` hash
-- (run id -> stream id, read only); '' once the stream trimmed it.
local function done_id(runs, done, run_id, ms)
  for _, entry in ipairs(redis.call('XRANGE', runs, ms, ms)) do
    local fields = entry[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'run_id' and fields[i + 1] == run_id then return entry[1] end
    end
  end
  return redis.call('HGET', done, run_id) or ''
end

-- The ms part of a stream id: Redis time when the entry was added (or just
-- after the stream's previous entry, should the clock have stepped back).
local function id_ms(id)
  return tonumber(string.match(id, '^(%d+)'))
end

-- A `running` entry as start_run writes it, decoded; nil when it is not one
-- (another writer, a bug, a partial restore). Readers skip such an entry and
-- the sweep moves it to the job's quarantine hash.
local function read_entry(raw)
  local ok, e = pcall(cjson.decode, raw)
  if not ok or type(e) ~= 'table' or type(e.tick) ~= 'number' or type(e.fence) ~= 'number'
    or type(e.started) ~= 'number' or type(e.expires) ~= 'number'
    or type(e.lease_key) ~= 'string' or type(e.replica) ~= 'string'
    or type(e.host) ~= 'string' or type(e.trigger) ~= 'string' or type(e.rerun) ~= 'number' then
    return nil
  end
  return e
end

-- {'corrupt', field, value} when the job's state hash holds a high-water
-- mark or fence that is not a number (cronlease never writes one): the
-- caller claims nothing rather than guess which ticks ran. Nil otherwise.
local function corrupt_values(last_tick, fence)
  if last_tick and not tonumber(last_tick) then return {'corrupt', 'last_tick', last_tick} end
  if fence and not tonumber(fence) then return {'corrupt', 'fence', fence} end
  return nil
end
local function corrupt_state(state)
  local values = redis.call('HMGET', state, 'last_tick', 'fence')
  return corrupt_values(values[1], values[2])
end

-- The job's state has a lineage: it begins with the first run ever started
-- and again whenever Redis lost the state (the fence missing, or below the
-- highest fence a replica saw). A run starter that finds it so writes `born`
-- (Redis ms) beside the fence; a finish compares it with its run's start to
-- tell "someone recorded this run" from "Redis forgot this run" (finish.lua).
-- A state with a fence and no `born` (written by an older release) is one
-- lineage since before any run now in flight.
local function lineage_begins(fence_before, min_fence)
  return not fence_before or fence_before < min_fence
end

-- Records in the job's state that `field` held `raw`, a value no honest
-- writer produces: `status` shows the job as needing repair until
-- `cronlease repair` (repair.lua) clears the finding.
local function note_finding(state, field, raw, now)
  redis.call('HSET', state, 'repair_field', field, 'repair_value', string.sub(raw, 1, 40),
    'repair_at', now)
end

-- The fence after `min_fence`, the highest this replica has seen: a Redis
-- that lost state never hands out a fence that was already used. A fence
-- past MAX_FENCE (forged) counts as lost, and is noted.
local function next_fence(state, min_fence, now)
  local raw = redis.call('HGET', state, 'fence')
  local before = tonumber(raw or '0')
  if before > MAX_FENCE then
    note_finding(state, 'fence', raw, now)
    before = 0
  end
  local fence = math.max(before, min_fence) + 1
  if lineage_begins(before > 0 and before or nil, min_fence) then
    redis.call('HSET', state, 'fence', string.format('%d', fence), 'born', now)
  else
    redis.call('HSET', state, 'fence', string.format('%d', fence))
  end
  return fence
end

-- Whether Redis lost this job's state after `started_ms` (a run's start,
-- Redis ms): its fence is gone (nothing started a run since), or a lineage
-- began later. Then nothing current can exist for a run started before.
local function lost_since(state, started_ms)
  local values = redis.call('HMGET', state, 'fence', 'born')
  if not values[1] then return true end
  local born = tonumber(values[2])
  return born ~= nil and born > started_ms
end

-- A run's context: what it carries besides its tick, as outcome fields
-- (name, value pairs: `root_tick` and `upstream_*` for a follower's run,
-- see after.lua; `param.<name>` for its parameters), kept in its `running`
-- entry so that whoever records or reruns it has them. Nil when there is
-- none, or when what is stored is not such a list.
local function read_context(ctx)
  if type(ctx) ~= 'table' or #ctx == 0 or #ctx % 2 ~= 0 then return nil end
  for _, item in ipairs(ctx) do
    if type(item) ~= 'string' then return nil end
  end
  return ctx
end

-- Appends the pairs of `ctx` (read_context) to the outcome fields `fields`.
local function add_context(fields, ctx)
  if not ctx then return fields end
  for _, item in ipairs(ctx) do fields[#fields + 1] = item end
  return fields
end

-- Starts a run with `fence` (the caller took it: next_fence, or the claim's
-- own count): running entry, lease. Returns the lease key.
-- `started`: when the run starts by Redis time (now, or the tick when it
-- is claimed ahead of it, see claim.lua); the lease counts from now.
-- `ctx`: the run's context (read_context), or nil.
-- `group`: the key of the concurrency group's slots the run holds
-- (group_take), or nil; renew.lua extends the slot with the lease, and
-- whoever records the run gives it back (group_give).
local function start_run(running, lease, run_id, tick, lease_ms, overlap,
                         replica, host, trigger, rerun, fence, now, started, ctx, group)
  local lease_key = lease
  if overlap == 'allow' then lease_key = lease .. ':' .. run_id end
  redis.call('HSET', running, run_id, cjson.encode({
    tick = tick, fence = fence, replica = replica, host = host, started = started,
    expires = now + lease_ms, lease_key = lease_key, trigger = trigger, rerun = rerun,
    ctx = ctx, group = group,
  }))
  redis.call('SET', lease_key, run_id, 'PX', lease_ms)
  return lease_key
end

-- A pending rerun of a tick run at `fence` with context `ctx` (sweep.lua):
-- keyed by its tick, or with a context by its tick and run id (a
-- follower's runs may share a tick), the fence or {fence, ctx} beside it.
local function add_rerun(reruns, tick, run_id, fence, ctx)
  if ctx then
    redis.call('HSET', reruns, string.format('%d', tick) .. ':' .. run_id,
      cjson.encode({fence = fence, ctx = ctx}))
  else
    redis.call('HSET', reruns, string.format('%d', tick), fence)
  end
end

-- Starts the oldest pending rerun (see sweep.lua) when nothing holds the
-- job's lease, or overlap does not care. Returns {tick, fence, lease_key,
-- started, ctx} for the caller to run (ctx: the run's context, {} for
-- none), or nil.
local function take_rerun(state, running, lease, reruns, lease_ms, overlap, replica, host,
                          run_id, min_fence, now)
  local pending = redis.call('HKEYS', reruns)
  if #pending == 0 or corrupt_state(state) then return nil end
  if overlap == 'skip' and redis.call('EXISTS', lease) == 1 then return nil end
  local oldest, oldest_key = nil, nil
  for _, key in ipairs(pending) do
    local tick = tonumber(string.match(key, '^(%d+)$') or string.match(key, '^(%d+):[%w-]+$'))
    -- A key that is not a tick is not ours: left where it is.
    if tick and (oldest == nil or tick < oldest) then oldest, oldest_key = tick, key end
  end
  if oldest == nil then return nil end
  local ctx = nil
  if oldest_key ~= string.format('%d', oldest) then
    local ok, saved = pcall(cjson.decode, redis.call('HGET', reruns, oldest_key) or '')
    if ok and type(saved) == 'table' then ctx = read_context(saved.ctx) end
  end
  redis.call('HDEL', reruns, oldest_key)
  local fence = next_fence(state, min_fence, now)
  local lease_key = start_run(running, lease, run_id, oldest, lease_ms, overlap,
    replica, host, 'rerun', 1, fence, now, now, ctx)
  return {oldest, fence, lease_key, now, ctx or {}}
end

-- Chains. A job's followers (jobs whose `after` names it) are passed as
-- one argument, 'job|wake channel|follower=on|…' (on: ok, failed or any),
-- and each follower's inbox as a key, in the same order (the upstream's
-- hash tag: `<prefix>:{job}:after:<follower>`); '' when it has none. Each
-- current outcome of a run that a follower's `on` matches is added to that
-- follower's inbox in the same call that records it, so no crash can lose
-- it; the follower's replicas start its run from there (after.lua).
local INBOX_MAXLEN = 10000
local RAN = {ok = true, failed = true, timeout = true, lost_lease = true, interrupted = true,
  abandoned = true, killed = true}

local function read_followers(raw, keys, first)
  if not raw or raw == '' then return nil end
  local parts = {}
  for part in string.gmatch(raw, '[^|]+') do parts[#parts + 1] = part end
  if #parts < 3 then return nil end
  local followers = {job = parts[1], wake = parts[2], inboxes = {}}
  for i = 3, #parts do
    local job, on = string.match(parts[i], '^([^=]+)=(%a+)$')
    local key = keys[first + i - 3]
    if job and key then
      followers.inboxes[#followers.inboxes + 1] = {key = key, job = job, on = on}
    end
  end
  return followers
end

-- Tells the followers whose `on` matches of the outcome `fields` (name,
-- value pairs), recorded at Redis ms `at`: a run that ended (never a tick
-- skipped or missed), carrying its root tick (its own tick, unless it
-- followed another run) and its parameters. An inbox at its cap drops its
-- oldest entries, counted in `inbox_dropped` of the job's state.
local function tell_followers(followers, state, fields, at)
  if not followers then return end
  local f = {}
  for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
  local status = f.status
  if not RAN[status] then return end
  local entry = {'run_id', f.run_id or '', 'status', status, 'tick', f.tick or '',
    'fence', f.fence or '', 'root_tick', f.root_tick or f.tick or '', 'at', at}
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 6) == 'param.' then
      entry[#entry + 1] = fields[i]
      entry[#entry + 1] = fields[i + 1]
    end
  end
  local told = false
  for _, inbox in ipairs(followers.inboxes) do
    if inbox.on == 'any' or (inbox.on == 'ok') == (status == 'ok') then
      if redis.call('XLEN', inbox.key) >= INBOX_MAXLEN then
        redis.call('HINCRBY', state, 'inbox_dropped', 1)
      end
      redis.call('XADD', inbox.key, 'MAXLEN', INBOX_MAXLEN, '*', unpack(entry))
      told = true
    end
  end
  if told then redis.call('PUBLISH', followers.wake, followers.job) end
end

-- Outcome fields for a tick that was not run (skipped_overlap).
local function skip_fields(tick, run_id, replica, host, now, trigger)
  return {'tick', tick, 'fence', '0', 'run_id', run_id, 'replica', replica, 'host', host,
    'started_ms', now, 'finished_ms', now, 'duration_ms', '0', 'status', 'skipped_overlap',
    'attempts', '0', 'output', '', 'trigger', trigger}
end

-- How many runs in flight have not been renewed within their lease: their
-- holder is gone, and a sweep should record them.
local function count_expired(running, now)
  if redis.call('HLEN', running) == 0 then return 0 end
  local n = 0
  local entries = redis.call('HGETALL', running)
  for i = 2, #entries, 2 do
    -- An unreadable entry also needs the sweep, which quarantines it.
    local e = read_entry(entries[i])
    if not e or e.expires < now then n = n + 1 end
  end
  return n
end

-- Notifications. A script that records something an operator may want to
-- hear of writes the event in the same call, into the job's events stream
-- (its own Cluster slot, passed in KEYS), one entry per channel, so a
-- replica dying right after cannot lose it; the replicas' consumer group
-- `deliver` delivers each entry (daemon/notifier.rs). The caller passes
-- the job's rules as one argument (store::Notices::arg):
-- 'job|wake channel|event,event,…|channel,channel,…|repeat_ms|late_ms'
-- (no job for the replicas' own events); '' when there are none.
local EVENTS_MAXLEN = 10000
local FAILING = {failed = true, timeout = true, lost_lease = true, abandoned = true}

local function read_notices(events, raw)
  if not events or not raw or raw == '' then return nil end
  local job, wake, kinds, channels, repeat_ms, late_ms =
    string.match(raw, '^([^|]*)|([^|]+)|([^|]*)|([^|]+)|(%d+)|(%d+)$')
  if not job then return nil end
  local notices = {events = events, job = job, wake = wake, kinds = {}, channels = {},
    repeat_ms = tonumber(repeat_ms), late_ms = tonumber(late_ms)}
  for kind in string.gmatch(kinds, '[^,]+') do notices.kinds[kind] = true end
  for channel in string.gmatch(channels, '[^,]+') do
    notices.channels[#notices.channels + 1] = channel
  end
  return notices
end

-- Writes event `kind` (if the rules ask for it) once per channel; `fields`
-- is a flat list of name, value pairs. An events stream at its cap (its
-- receivers unreachable for long) drops its oldest entries, counted in
-- `events_dropped` of the hash `counts` (the job's state).
local function emit(notices, counts, kind, fields)
  if not notices or not notices.kinds[kind] then return end
  local events = notices.events
  if redis.call('EXISTS', events) == 0 then
    redis.call('XGROUP', 'CREATE', events, 'deliver', '0', 'MKSTREAM')
  elseif redis.call('XLEN', events) >= EVENTS_MAXLEN then
    redis.call('HINCRBY', counts, 'events_dropped', #notices.channels)
  end
  for _, channel in ipairs(notices.channels) do
    redis.call('XADD', events, 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'event', kind,
      'channel', channel, 'job', notices.job, unpack(fields))
  end
  redis.call('PUBLISH', notices.wake, events)
end

-- The events one recorded outcome causes: a failure starts a streak (its
-- first failure is told, then at most one reminder per `repeat_ms`), the
-- first `ok` after a failure ends it (`recovered`). Each event carries the
-- streak's `count` of failures and, after the first, when it began
-- (`failing_since`). `fields` are the outcome's, `at` its Redis ms.
local function outcome_events(notices, state, fields, at)
  local f = {}
  for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
  local status = f.status
  local since = tonumber(redis.call('HGET', state, 'failing_since') or '')
  local about = {'tick', f.tick or '', 'run_id', f.run_id or '', 'fence', f.fence or '',
    'replica', f.replica or '', 'status', status or '', 'attempt', f.attempts or '',
    'output', string.sub(f.output or '', -2000)}
  if FAILING[status] then
    if not since then
      redis.call('HSET', state, 'failing_since', at, 'failing_count', 1, 'failing_told_ms', at)
      about[#about + 1] = 'count'
      about[#about + 1] = 1
      emit(notices, state, status, about)
      return
    end
    local count = redis.call('HINCRBY', state, 'failing_count', 1)
    local told = tonumber(redis.call('HGET', state, 'failing_told_ms') or '0') or 0
    if at - told >= notices.repeat_ms then
      redis.call('HSET', state, 'failing_told_ms', at)
      about[#about + 1] = 'count'
      about[#about + 1] = count
      about[#about + 1] = 'failing_since'
      about[#about + 1] = since
      emit(notices, state, status, about)
    end
  elseif status == 'ok' and since then
    local count = redis.call('HGET', state, 'failing_count') or '1'
    redis.call('HDEL', state, 'failing_since', 'failing_count', 'failing_told_ms')
    about[#about + 1] = 'count'
    about[#about + 1] = count
    about[#about + 1] = 'failing_since'
    about[#about + 1] = since
    emit(notices, state, 'recovered', about)
  end
end

-- A job's pause (pause.lua) in its state hash: `paused` '1', who, when, and
-- optionally `paused_until_ms` (Redis ms: the pause ends there by itself)
-- and `paused_reason`. The fields a pause writes, cleared when it ends.
local PAUSE_FIELDS = {'paused_by', 'paused_at_ms', 'paused_until_ms', 'paused_reason'}

-- Whether a job whose state hash says `paused` and `until_ms` (nil: until
-- resumed) holds its tick `tick`: a tick before the end is in the pause,
-- whenever it is claimed.
local function pause_holds(paused, until_ms, tick)
  if paused ~= '1' then return false end
  return until_ms == nil or tick < until_ms
end

-- Ends the job's timed pause once its end has come (Redis time `now` at
-- or after `paused_until_ms`), if it is still the pause that ends at
-- `until_ms` (nil: whichever it is): clears it, moves the high-water mark
-- to just before the end (a tick of the pause is never claimed later, by
-- a catch-up of missed ticks either), and records the end in the job's
-- actions. Whoever calls it first (a claim, a replica's sweep) records it;
-- the others find it over. Returns whether this call ended it.
local function end_pause(state, actions, now, until_ms)
  local f = redis.call('HMGET', state, 'paused', 'paused_until_ms', 'paused_reason', 'last_tick')
  local stored = tonumber(f[2] or '')
  if f[1] ~= '1' or not stored or now < stored then return false end
  if until_ms and stored ~= until_ms then return false end
  redis.call('HSET', state, 'paused', '0', 'resumed_by', 'cronlease (timed pause ended)',
    'resumed_at_ms', now)
  redis.call('HDEL', state, unpack(PAUSE_FIELDS))
  local last = tonumber(f[4] or '')
  if not f[4] or (last and last < stored - 1) then
    redis.call('HSET', state, 'last_tick', string.format('%d', stored - 1))
  end
  redis.call('XADD', actions, 'MAXLEN', '~', 200, '*', 'action', 'resume',
    'who', 'cronlease (timed pause ended)', 'detail', 'the pause ended at its until',
    'until_ms', f[2], 'reason', f[3] or '')
  return true
end

-- Whether the cluster's pause (`cronlease pause --all`, as the replica
-- read it from `<prefix>:pause_all` and passed it: 'none', 'hold' (until
-- resumed) or the Redis ms it ends at) holds tick `tick`.
local function cluster_holds(hold, tick)
  if hold == 'none' or hold == nil or hold == '' then return false end
  if hold == 'hold' then return true end
  local until_ms = tonumber(hold)
  return until_ms == nil or tick < until_ms
end

-- Concurrency groups (`[groups.<name>]`). A group's slots are a sorted set
-- `<prefix>:{group:<name>}:slots`, run id scored by its lease's end (Redis
-- ms): renew.lua extends a score with its lease, the run's record gives
-- the slot back, and a slot whose score passed (its holder died or
-- stalled) is dropped by the next claim, so it comes back when the lease
-- lapses. Ticks waiting for a slot are a sorted set
-- `<prefix>:{group:<name>}:waiting`, members "<job> <tick> <until>" scored
-- by tick, each live until its `until` (the end of its grace): a claim is
-- admitted only while the free slots outnumber the live waiters older
-- than its tick, so waiting ticks go oldest first. Not in the job's hash
-- slot: a group is refused with `[redis] cluster` and `quorum` (config).
local GROUP_SLOTS_SPARE_MS = 60000

local function group_waiter(job, tick, until_ms)
  return job .. ' ' .. string.format('%d', tick) .. ' ' .. string.format('%d', until_ms)
end

-- Whether a run may take a slot of the group now, for a tick `tick`:
-- slots whose lease passed and waiters whose grace passed are dropped
-- first; then the free slots must outnumber the live waiters older than
-- the tick. Also answers the slots in use.
local function group_admits(slots, waiting, max, tick, now)
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  local used = redis.call('ZCARD', slots)
  local older = 0
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', waiting, '-inf', '(' .. string.format('%d', tick))) do
    local u = tonumber(string.match(w, ' (%-?%d+)$') or '')
    if not u or u < now then redis.call('ZREM', waiting, w) else older = older + 1 end
  end
  return max - used > older, used
end

-- Holds a slot of the group for `run_id` while its lease lasts.
local function group_hold(slots, run_id, now, lease_ms)
  redis.call('ZADD', slots, now + lease_ms, run_id)
  redis.call('PEXPIRE', slots, lease_ms + GROUP_SLOTS_SPARE_MS)
end

-- Takes a slot of the group for `run_id` (true), or registers the tick
-- as waiting until `until_ms` and answers {slots used, ticks waiting}.
local function group_take(slots, waiting, max, run_id, job, tick, until_ms, now, lease_ms)
  local admitted, used = group_admits(slots, waiting, max, tick, now)
  local me = group_waiter(job, tick, until_ms)
  if admitted then
    redis.call('ZREM', waiting, me)
    group_hold(slots, run_id, now, lease_ms)
    return true
  end
  if until_ms > now then
    redis.call('ZADD', waiting, tick, me)
    if redis.call('PTTL', waiting) < until_ms - now + GROUP_SLOTS_SPARE_MS then
      redis.call('PEXPIRE', waiting, until_ms - now + GROUP_SLOTS_SPARE_MS)
    end
  end
  return {used, redis.call('ZCARD', waiting)}
end

-- Gives back the group slot of a run whose entry `e` (read_entry) names
-- one.
local function group_give(e, run_id)
  if e and type(e.group) == 'string' then redis.call('ZREM', e.group, run_id) end
end
