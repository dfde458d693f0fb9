"""Lua scripts of the job queue: every state change of a job is one atomic script.

Layout under the prefix P (``ks:jobs:``), per pool: a *lane* stream per (priority, submitter)
(``lane:<pool>:<prio>:<submitter>``, consumer group ``workers``) holding that submitter's waiting and
running jobs; ``lanes:<pool>`` (zset lane -> priority); ``queued:<pool>`` / ``running:<pool>`` (hash
submitter -> count); ``served:<pool>`` (zset submitter -> serial of its last start, for fairness);
``active:<pool>`` (zset of running job ids); ``bell:<pool>`` (a stream that wakes long-polling
workers); ``dead:<pool>`` (dead letters); ``recent:<pool>`` (list of finished ids); ``unreported``
(zset of finished job ids whose evidence and notice the gateway has not delivered yet). Per job:
``job:<id>`` (hash) and ``logs:<id>`` (string). Keys are derived inside the scripts, so this layout
needs a single Redis (not a cluster).

A job's entry is acknowledged and deleted when the job reaches a final state, so a lane holds exactly
the submitter's live jobs and is deleted when it empties. Every script that ends an attempt checks the
attempt number and the consumer first, which makes finishing idempotent: a second finish of the same
attempt, or a finish by a worker whose attempt was reclaimed, changes nothing.
"""

from __future__ import annotations

_COMMON = """
local P = ARGV[1]
local function fields(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end
local function lane_key(pool, lane) return P .. 'lane:' .. pool .. ':' .. lane end
local function next_undelivered(lk)
  if redis.call('EXISTS', lk) == 0 then return nil end
  local last = '0-0'
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', lk)) do
    local name, ld
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then ld = g[i + 1] end
    end
    if name == 'workers' then last = ld end
  end
  return redis.call('XRANGE', lk, '(' .. last, '+', 'COUNT', 1)[1]
end
local function ensure_lane(pool, lane, prio)
  local lk = lane_key(pool, lane)
  if redis.call('EXISTS', lk) == 0 then redis.call('XGROUP', 'CREATE', lk, 'workers', '0', 'MKSTREAM') end
  redis.call('ZADD', P .. 'lanes:' .. pool, prio, lane)
  return lk
end
local function drop_lane_if_empty(pool, lane)
  local lk = lane_key(pool, lane)
  if redis.call('XLEN', lk) == 0 then
    redis.call('DEL', lk)
    redis.call('ZREM', P .. 'lanes:' .. pool, lane)
  end
end
local function drop_entry(pool, lane, eid)
  local lk = lane_key(pool, lane)
  redis.call('XACK', lk, 'workers', eid)
  redis.call('XDEL', lk, eid)
  drop_lane_if_empty(pool, lane)
end
local function ring(pool, id)
  redis.call('XADD', P .. 'bell:' .. pool, 'MAXLEN', '~', '100', '*', 'job', id)
end
local function counter(key, field, delta)
  local v = redis.call('HINCRBY', key, field, delta)
  if v <= 0 then redis.call('HDEL', key, field) end
end
-- A job reached a final state: list it as recent, and as unreported until the gateway has recorded
-- its verification evidence and sent its notice (the same script that ends the job, so no final
-- state can be missed by a crash in between).
local function recent(pool, id, keep, now)
  redis.call('LPUSH', P .. 'recent:' .. pool, id)
  redis.call('LTRIM', P .. 'recent:' .. pool, 0, keep - 1)
  redis.call('ZADD', P .. 'unreported', now, id)
end
local function append_log(id, chunk, max)
  if chunk == nil or chunk == '' then return end
  local lk = P .. 'logs:' .. id
  local len = redis.call('STRLEN', lk)
  if len < max then redis.call('APPEND', lk, string.sub(chunk, 1, max - len)) end
end
"""

# ARGV: P, pool, lane, prio, submitter, id, devices, max_queued, now, nfields, fields...
SUBMIT = (
    _COMMON
    + """
local pool, lane, prio, sub, id = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local q = tonumber(redis.call('HGET', P .. 'queued:' .. pool, sub) or '0')
if q >= tonumber(ARGV[8]) then return {'refused', tostring(q)} end
local jk = P .. 'job:' .. id
if redis.call('EXISTS', jk) == 1 then return {'exists', id} end
local f = {}
for i = 1, tonumber(ARGV[10]) do f[i] = ARGV[10 + i] end
redis.call('HSET', jk, unpack(f))
local lk = ensure_lane(pool, lane, prio)
local eid = redis.call('XADD', lk, '*', 'job', id, 'devices', ARGV[7])
redis.call('HSET', jk, 'entry', eid, 'lane', lane, 'state', 'queued', 'attempts', '0')
redis.call('HINCRBY', P .. 'queued:' .. pool, sub, 1)
redis.call('ZADD', P .. 'all', ARGV[9], id)
ring(pool, id)
return {'ok', eid}
"""
)

# ARGV: P, pool -> {{lane, prio, entry, job, devices, running, served}, ...}
PEEK = (
    _COMMON
    + """
local pool = ARGV[2]
local out = {}
local lanes = redis.call('ZRANGE', P .. 'lanes:' .. pool, 0, -1, 'WITHSCORES')
for i = 1, #lanes, 2 do
  local lane = lanes[i]
  local head = next_undelivered(lane_key(pool, lane))
  if head then
    local f = fields(head[2])
    local sub = string.match(lane, '^[^:]*:(.*)$')
    local running = redis.call('HGET', P .. 'running:' .. pool, sub) or '0'
    local served = redis.call('ZSCORE', P .. 'served:' .. pool, sub) or '0'
    table.insert(out, {lane, lanes[i + 1], head[1], f['job'], f['devices'], running, served})
  end
end
return out
"""
)

# ARGV: P, pool, lane, expected entry, consumer, max_running, now, node, allocated(csv)
TAKE = (
    _COMMON
    + """
local pool, lane, expect, consumer = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local lk = lane_key(pool, lane)
local head = next_undelivered(lk)
if not head or head[1] ~= expect then return {'conflict'} end
local sub = string.match(lane, '^[^:]*:(.*)$')
if tonumber(redis.call('HGET', P .. 'running:' .. pool, sub) or '0') >= tonumber(ARGV[6]) then
  return {'conflict'}
end
local got = redis.call('XREADGROUP', 'GROUP', 'workers', consumer, 'COUNT', 1, 'STREAMS', lk, '>')
local eid = got[1][2][1][1]
local id = fields(got[1][2][1][2])['job']
local jk = P .. 'job:' .. id
if redis.call('HGET', jk, 'state') ~= 'queued' then
  drop_entry(pool, lane, eid)
  return {'conflict'}
end
counter(P .. 'queued:' .. pool, sub, -1)
redis.call('HINCRBY', P .. 'running:' .. pool, sub, 1)
redis.call('ZADD', P .. 'served:' .. pool, redis.call('INCR', P .. 'serial:' .. pool), sub)
local attempt = redis.call('HINCRBY', jk, 'attempts', 1)
redis.call('HSET', jk, 'state', 'running', 'worker', consumer, 'node', ARGV[8], 'allocated', ARGV[9],
  'started', ARGV[7], 'entry', eid, 'cancel_requested', '0')
redis.call('ZADD', P .. 'active:' .. pool, ARGV[7], id)
return {'ok', id, tostring(attempt)}
"""
)

# ARGV: P, id, consumer, attempt, log chunk, max log bytes -> {'ok', cancel} | {'stale', state}
HEARTBEAT = (
    _COMMON
    + """
local jk = P .. 'job:' .. ARGV[2]
local s = redis.call('HMGET', jk, 'state', 'worker', 'attempts', 'pool', 'lane', 'entry', 'cancel_requested')
if s[1] ~= 'running' or s[2] ~= ARGV[3] or s[3] ~= ARGV[4] then return {'stale', s[1] or ''} end
redis.call('XCLAIM', lane_key(s[4], s[5]), 'workers', ARGV[3], 0, s[6], 'JUSTID')
append_log(ARGV[2], ARGV[5], tonumber(ARGV[6]))
return {'ok', s[7] or '0'}
"""
)

# ARGV: P, id, consumer, attempt, state, now, log, max log, recent kept, nfields, fields...
FINISH = (
    _COMMON
    + """
local id = ARGV[2]
local jk = P .. 'job:' .. id
local s = redis.call('HMGET', jk, 'state', 'worker', 'attempts', 'pool', 'lane', 'entry', 'submitter')
if s[1] ~= 'running' or s[2] ~= ARGV[3] or s[3] ~= ARGV[4] then return {'stale', s[1] or ''} end
append_log(id, ARGV[7], tonumber(ARGV[8]))
local f = {}
for i = 1, tonumber(ARGV[10]) do f[i] = ARGV[10 + i] end
if #f > 0 then redis.call('HSET', jk, unpack(f)) end
redis.call('HSET', jk, 'state', ARGV[5], 'finished', ARGV[6])
local pool = s[4]
counter(P .. 'running:' .. pool, s[7], -1)
redis.call('ZREM', P .. 'active:' .. pool, id)
drop_entry(pool, s[5], s[6])
recent(pool, id, tonumber(ARGV[9]), ARGV[6])
ring(pool, id)
return {'ok', ARGV[5]}
"""
)

# An entry XAUTOCLAIM took from a silent consumer: retry the job at the front, or dead-letter it.
# ARGV: P, pool, lane, entry, now, recent kept, max log
# -> {'requeued'|'dead'|'cancelled'|'dropped'|'gone', id}
REQUEUE = (
    _COMMON
    + """
local pool, lane, eid, now = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local e = redis.call('XRANGE', lane_key(pool, lane), eid, eid)
if #e == 0 then return {'gone', ''} end
local id = fields(e[1][2])['job']
local jk = P .. 'job:' .. id
local s = redis.call('HMGET', jk, 'state', 'entry', 'attempts', 'max_attempts', 'worker', 'submitter',
  'devices', 'cancel_requested')
if s[1] ~= 'running' or s[2] ~= eid then
  drop_entry(pool, lane, eid)
  return {'dropped', id}
end
local sub = s[6]
counter(P .. 'running:' .. pool, sub, -1)
redis.call('ZREM', P .. 'active:' .. pool, id)
drop_entry(pool, lane, eid)
local attempts, worker = tonumber(s[3]), s[5] or '?'
local lost = 'attempt ' .. attempts .. ' lost: worker ' .. worker .. ' stopped heartbeating'
append_log(id, '\\n[kswarm] ' .. lost .. '\\n', tonumber(ARGV[7]))
if s[8] == '1' then
  redis.call('HSET', jk, 'state', 'cancelled', 'finished', now, 'error', 'cancelled; ' .. lost)
  recent(pool, id, tonumber(ARGV[6]), now)
  return {'cancelled', id}
end
if attempts >= tonumber(s[4]) then
  local reason = 'dead-lettered after ' .. attempts .. ' attempts: each time its worker died or stopped '
    .. 'heartbeating while running it (last: ' .. worker .. ')'
  redis.call('HSET', jk, 'state', 'error', 'verdict', 'error', 'error', reason, 'finished', now)
  redis.call('XADD', P .. 'dead:' .. pool, 'MAXLEN', '~', '10000', '*', 'job', id, 'reason', reason,
    'attempts', tostring(attempts), 'worker', worker, 'ts', now)
  recent(pool, id, tonumber(ARGV[6]), now)
  return {'dead', id}
end
local rlane = '0:' .. sub
local neid = redis.call('XADD', ensure_lane(pool, rlane, 0), '*', 'job', id, 'devices', s[7])
redis.call('HSET', jk, 'state', 'queued', 'entry', neid, 'lane', rlane, 'worker', '', 'allocated', '')
redis.call('HINCRBY', P .. 'queued:' .. pool, sub, 1)
ring(pool, id)
return {'requeued', id}
"""
)

# ARGV: P, id, now, recent kept -> {'cancelled'|'cancelling'|'final'|'missing', state}
CANCEL = (
    _COMMON
    + """
local id = ARGV[2]
local jk = P .. 'job:' .. id
local s = redis.call('HMGET', jk, 'state', 'pool', 'lane', 'entry', 'submitter')
if not s[1] then return {'missing', ''} end
if s[1] == 'queued' then
  local pool = s[2]
  redis.call('XDEL', lane_key(pool, s[3]), s[4])
  drop_lane_if_empty(pool, s[3])
  counter(P .. 'queued:' .. pool, s[5], -1)
  redis.call('HSET', jk, 'state', 'cancelled', 'finished', ARGV[3], 'error', 'cancelled before it started')
  recent(pool, id, tonumber(ARGV[4]), ARGV[3])
  return {'cancelled', 'cancelled'}
elseif s[1] == 'running' then
  redis.call('HSET', jk, 'cancel_requested', '1')
  return {'cancelling', 'running'}
end
return {'final', s[1]}
"""
)

# KEYS: lease key; ARGV: consumer, ttl ms -> 1 or the current holder
LEASE = """
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return cur
"""
