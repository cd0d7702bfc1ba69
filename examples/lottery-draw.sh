#!/usr/bin/env bash
# The reference job: the lottery draw. cronlease starts it once per tick; this
# script shows what a job with external side effects does with the fence so
# that a stale or duplicate run can never change a draw, whatever the
# scheduler does:
#
#   - the highest fence ever used is kept in Redis (`lottery:fence`); a run
#     whose CRONLEASE_FENCE is lower was claimed before some later run and has
#     lost its lease meanwhile (a paused or partitioned replica): it refuses;
#   - each tick's draw is written once (`SET lottery:draw:<tick_ms> … NX`);
#     a second run for the same tick finds it and refuses.
#
# Both checks and both writes happen in ONE Lua script, so no other run can
# slip between the check and the write.
#
# Usage: lottery-draw.sh [--winners N]        (default 3)
# Environment (set by cronlease): CRONLEASE_TICK, CRONLEASE_TICK_MS,
#   CRONLEASE_FENCE, CRONLEASE_REPLICA (CRONLEASE_JOB and CRONLEASE_RUN_ID are
#   shown when present); from the job's `env`: LOTTERY_REDIS_URL.
# Exit status: 0 drawn, 1 Redis failed, 2 usage, 3 stale fence, 4 tick
#   already drawn.
# Keys: lottery:entrants (set, seeded with ten names when empty),
#   lottery:fence (string), lottery:draw:<tick_ms> (string
#   "<fence> <replica> <winner>…"). With Redis Cluster these keys would need a
#   common hash tag; the demo and the tests use a single node.
set -euo pipefail

me="lottery-draw"

die() {
    local code=$1
    shift
    echo "$me: $*" >&2
    exit "$code"
}

usage() {
    echo "usage: $me [--winners N]" >&2
    exit 2
}

winners=3
while [ $# -gt 0 ]; do
    case "$1" in
    --winners)
        [ $# -ge 2 ] || usage
        winners=$2
        shift 2
        ;;
    --winners=*)
        winners=${1#--winners=}
        shift
        ;;
    -h | --help)
        sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
        exit 0
        ;;
    *)
        echo "$me: unknown argument '$1'" >&2
        usage
        ;;
    esac
done
[[ $winners =~ ^[1-9][0-9]*$ ]] || die 2 "--winners must be a positive integer, got '$winners'"

for name in CRONLEASE_TICK CRONLEASE_TICK_MS CRONLEASE_FENCE CRONLEASE_REPLICA LOTTERY_REDIS_URL; do
    [ -n "${!name:-}" ] || die 2 "environment variable $name is missing (this script is meant to be run by cronlease; LOTTERY_REDIS_URL comes from the job's env)"
done
[[ $CRONLEASE_TICK_MS =~ ^[0-9]+$ ]] || die 2 "CRONLEASE_TICK_MS must be milliseconds since the epoch, got '$CRONLEASE_TICK_MS'"
[[ $CRONLEASE_FENCE =~ ^[0-9]+$ ]] || die 2 "CRONLEASE_FENCE must be a non-negative integer, got '$CRONLEASE_FENCE'"
command -v redis-cli >/dev/null 2>&1 || die 1 "redis-cli not found on PATH (run scripts/install-deps)"

# Runs one command; redis-cli exits 0 even on an error reply (printed on
# stdout as "ERR …"), so error replies are recognised here.
redis() {
    local out
    if ! out=$(redis-cli --no-auth-warning -u "$LOTTERY_REDIS_URL" "$@" 2>&1); then
        die 1 "redis-cli $1 failed: $out"
    fi
    case "$out" in
    ERR* | WRONGTYPE* | NOSCRIPT* | NOAUTH* | LOADING* | BUSY* | READONLY* | MISCONF* | OOM* | "(error)"*)
        die 1 "redis $1 failed: $out"
        ;;
    esac
    printf '%s\n' "$out"
}

entrants=$(redis SCARD lottery:entrants)
[[ $entrants =~ ^[0-9]+$ ]] || die 1 "unexpected SCARD reply: $entrants"
if [ "$entrants" -eq 0 ]; then
    # SADD is idempotent: two first runs seeding at once do no harm.
    redis SADD lottery:entrants alice bob carol dave erin frank grace heidi ivan judy >/dev/null
fi

# Not `mapfile < <(redis …)`: a failure inside a process substitution would
# go unnoticed.
picked=$(redis SRANDMEMBER lottery:entrants "$winners")
mapfile -t drawn <<<"$picked"
[ "${#drawn[@]}" -gt 0 ] && [ -n "${drawn[0]}" ] || die 1 "lottery:entrants is empty after seeding"

# KEYS[1] fence high-water mark, KEYS[2] this tick's draw.
# ARGV[1] fence, ARGV[2] replica, ARGV[3…] winners.
# Returns "ok", "stale <highest>" or "drawn <existing value>".
# shellcheck disable=SC2016 # Lua, not shell
script='
local fence = tonumber(ARGV[1])
local highest = tonumber(redis.call("GET", KEYS[1]) or "0")
if fence < highest then
  return "stale " .. highest
end
if fence > highest then
  redis.call("SET", KEYS[1], ARGV[1])
end
local value = table.concat(ARGV, " ")
if not redis.call("SET", KEYS[2], value, "NX") then
  return "drawn " .. redis.call("GET", KEYS[2])
end
return "ok"
'
reply=$(redis EVAL "$script" 2 lottery:fence "lottery:draw:$CRONLEASE_TICK_MS" \
    "$CRONLEASE_FENCE" "$CRONLEASE_REPLICA" "${drawn[@]}")

run="job ${CRONLEASE_JOB:-?} run ${CRONLEASE_RUN_ID:-?} on $CRONLEASE_REPLICA"
case "$reply" in
ok)
    echo "tick $CRONLEASE_TICK fence $CRONLEASE_FENCE winners: ${drawn[*]}"
    ;;
stale\ *)
    die 3 "stale fence $CRONLEASE_FENCE < ${reply#stale } ($run, tick $CRONLEASE_TICK): refusing to draw"
    ;;
drawn\ *)
    die 4 "tick already drawn: $CRONLEASE_TICK is \"${reply#drawn }\" ($run, fence $CRONLEASE_FENCE)"
    ;;
*)
    die 1 "unexpected reply from the draw script: $reply"
    ;;
esac
