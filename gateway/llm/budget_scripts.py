"""The Redis Lua scripts behind LLM budget reservations (used by ``gateway.llm.usage.UsageStore``).

``RESERVE_SCRIPT`` admits a request only if no hold stops its agent and usage + live reservations +
budget leases + its worst case fit in every budget, and then holds that worst case (or, probing, only
checks); asked to, it also grants the replica a *budget lease* for the agent's next requests when that
fits in a quarter of what every budget has left (``gateway.llm.leases``). ``DRAW_SCRIPT`` turns a part
of a lease into a request's own reservation (the request was admitted from the lease in the replica);
``RELEASE_SCRIPT`` gives back what is left of a lease. ``SETTLE_SCRIPT`` replaces a reservation by the
real usage, and sets the agent's hold when that usage is more than the reservation.
All first drop the reservations and leases whose expiry has passed (their gateway stopped renewing
them), so a crashed gateway's stop counting after the TTL. Each is one atomic round trip.
"""

from __future__ import annotations

from gateway.auth_changes import ANNOUNCE_LUA

# Shared by both scripts. A reservation's sums live in the RESERVED hash under the fields named by
# ``sum_fields`` (agent and swarm, all time and per day, tokens and nano-USD); amounts stay strings,
# so no Lua number is ever turned back into a Redis integer.
LUA_COMMON = """
local function sum_fields(name, day)
  local a, s, d = 'agent:' .. name .. ':', 'swarm:', 'day:' .. day .. ':'
  return {a .. 'tokens', a .. 'nusd', a .. d .. 'tokens', a .. d .. 'nusd',
          s .. 'tokens', s .. 'nusd', s .. d .. 'tokens', s .. d .. 'nusd'}
end
-- A lease's id starts with 'L:'; its amounts are summed in the leased hash, a request's in sums.
local function take(sums, name, day, tokens, nusd)
  local f = sum_fields(name, day)
  for i = 1, 8 do
    local amount = (i % 2 == 1) and tokens or nusd
    if amount ~= '0' and redis.call('HINCRBY', sums, f[i], '-' .. amount) <= 0 then
      redis.call('HDEL', sums, f[i])
    end
  end
end
local function add(sums, name, day, tokens, nusd)
  local f = sum_fields(name, day)
  for i = 1, 8 do
    local amount = (i % 2 == 1) and tokens or nusd
    if amount ~= '0' then redis.call('HINCRBY', sums, f[i], amount) end
  end
end
local function release(zset, data, sums, leased, id)
  local rec = redis.call('HGET', data, id)
  redis.call('ZREM', zset, id)
  if not rec then return false end
  redis.call('HDEL', data, id)
  local name, day, tokens, nusd = string.match(rec, '^(%S+) (%S+) (%S+) (%S+)')
  take(string.sub(id, 1, 2) == 'L:' and leased or sums, name, day, tokens, nusd)
  return true
end
-- Takes up to (tokens, nusd) from a lease's record (what it still holds), and drops the record once it
-- holds nothing: a draw, a give-back of what the replica has left of it, a failed draw's settlement.
-- A record may end in ' r': its rest was given back (give_back then does nothing: a retried give-back,
-- whose first reply was lost, never takes the share of a draw still in flight).
local function shrink(zset, data, leased, id, tokens, nusd)
  local rec = redis.call('HGET', data, id)
  if not rec then return end
  local name, day, t, n, mark = string.match(rec, '^(%S+) (%S+) (%S+) (%S+)(.*)$')
  local take_t = math.min(tonumber(t), tonumber(tokens))
  local take_n = math.min(tonumber(n), tonumber(nusd))
  take(leased, name, day, string.format('%d', take_t), string.format('%d', take_n))
  local left_t, left_n = tonumber(t) - take_t, tonumber(n) - take_n
  if left_t <= 0 and left_n <= 0 then
    redis.call('HDEL', data, id)
    redis.call('ZREM', zset, id)
  else
    redis.call('HSET', data, id,
      name .. ' ' .. day .. ' ' .. string.format('%d', left_t) .. ' ' .. string.format('%d', left_n) .. mark)
  end
end
local function give_back(zset, data, leased, id, tokens, nusd)
  local rec = redis.call('HGET', data, id)
  if not rec or string.sub(rec, -2) == ' r' then return end
  shrink(zset, data, leased, id, tokens, nusd)
  rec = redis.call('HGET', data, id)
  if rec then redis.call('HSET', data, id, rec .. ' r') end
end
local function reap(zset, data, sums, leased, now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'LIMIT', 0, 256)) do
    release(zset, data, sums, leased, id)
  end
end
local function total_tokens(key)
  local v = redis.call('HMGET', key, 'input_tokens', 'output_tokens',
                       'cache_creation_input_tokens', 'cache_read_input_tokens')
  local t = 0
  for i = 1, 4 do t = t + (tonumber(v[i]) or 0) end
  return t
end
"""

# KEYS: 1 agent usage, 2 swarm usage, 3 the day's usage, 4 the agent's override, 5 reservations,
# 6 reservation data, 7 reserved sums, 8-11 notice flags (agent, agent today, swarm, swarm today),
# 12 the agent's hold, 13 leased sums. ARGV: 1 name, 2 id, 3 now, 4 expiry, 5 day, 6 tokens, 7 nano-USD,
# 8-15 limits in BUDGETS order ('' = none), 16 day flag ttl, 17 probe ('1': only check, reserve nothing;
# a budget refuses once it is used up), 18 a lease's id ('' = none wanted), 19 its tokens, 20 its
# nano-USD, 21 a lease of this replica's to give back first ('' = none), 22-23 what this replica has
# left of it (tokens, nano-USD: only that; its draws still in flight move their own share), so that
# it does not count against this request. Returns {1, 1 if the lease was granted else 0} (admitted;
# reserved unless probing), {2, the hold record} or {0, budget index, used, reserved by requests,
# limit, 1 if this call claimed the budget's notice, leased}. A lease is granted when the agent holds
# none (on any replica) and, in every budget that has a limit, usage + reservations + leases + this
# request + 4 x the lease fit: one lease per agent, never more than a quarter of what a budget has
# left. A refusal that only leases cause (they end within seconds) claims no notice.
RESERVE_SCRIPT = (
    LUA_COMMON
    + """
reap(KEYS[5], KEYS[6], KEYS[7], KEYS[13], ARGV[3])
if ARGV[21] ~= '' then give_back(KEYS[5], KEYS[6], KEYS[13], ARGV[21], ARGV[22], ARGV[23]) end
local hold = redis.call('GET', KEYS[12])
if hold then return {2, hold} end
local name, id, day, probe = ARGV[1], ARGV[2], ARGV[5], ARGV[17] == '1'
local need = {ARGV[6], ARGV[7]}
local lease = {ARGV[19], ARGV[20]}
local want_lease = ARGV[18] ~= '' and not probe
local a = 'agent:' .. name .. ':'
if want_lease and ((tonumber(redis.call('HGET', KEYS[13], a .. 'tokens')) or 0) > 0
    or (tonumber(redis.call('HGET', KEYS[13], a .. 'nusd')) or 0) > 0) then
  want_lease = false
end
local used = {
  total_tokens(KEYS[1]), tonumber(redis.call('HGET', KEYS[1], 'cost_nusd')) or 0,
  tonumber(redis.call('HGET', KEYS[3], a .. 'tokens')) or 0,
  tonumber(redis.call('HGET', KEYS[3], a .. 'nusd')) or 0,
  total_tokens(KEYS[2]), tonumber(redis.call('HGET', KEYS[2], 'cost_nusd')) or 0,
  tonumber(redis.call('HGET', KEYS[3], 'swarm:tokens')) or 0,
  tonumber(redis.call('HGET', KEYS[3], 'swarm:nusd')) or 0,
}
local override = redis.call('HMGET', KEYS[4], 'tokens', 'usd', 'tokens_per_day', 'usd_per_day')
local f = sum_fields(name, day)
for i = 1, 8 do
  local limit = tonumber(ARGV[7 + i])
  if i <= 4 and override[i] then
    limit = tonumber(override[i])
    if i % 2 == 0 then limit = math.floor(limit * 1e9 + 0.5) end
  end
  if limit then
    local reserved = tonumber(redis.call('HGET', KEYS[7], f[i])) or 0
    local leased = tonumber(redis.call('HGET', KEYS[13], f[i])) or 0
    local amount = tonumber(need[2 - i % 2])
    local over
    if probe then
      over = used[i] >= limit
    else
      over = used[i] + reserved + leased + amount > limit
    end
    if over then
      local flag = KEYS[8 + math.floor((i - 1) / 2)]
      local claimed
      if not probe and used[i] + reserved + amount <= limit then
        claimed = false
      elseif i % 4 == 3 or i % 4 == 0 then
        claimed = redis.call('SET', flag, ARGV[3], 'NX', 'EX', ARGV[16])
      else
        claimed = redis.call('SET', flag, ARGV[3], 'NX')
      end
      return {0, i, used[i], reserved, limit, claimed and 1 or 0, leased}
    end
    if want_lease and used[i] + reserved + leased + amount + 4 * tonumber(lease[2 - i % 2]) > limit then
      want_lease = false
    end
  end
end
if probe then return {1, 0} end
redis.call('ZADD', KEYS[5], ARGV[4], id)
redis.call('HSET', KEYS[6], id, name .. ' ' .. day .. ' ' .. need[1] .. ' ' .. need[2])
add(KEYS[7], name, day, need[1], need[2])
if not want_lease then return {1, 0} end
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[18])
redis.call('HSET', KEYS[6], ARGV[18], name .. ' ' .. day .. ' ' .. lease[1] .. ' ' .. lease[2])
add(KEYS[13], name, day, lease[1], lease[2])
return {1, 1}
"""
)

# KEYS: 1 reservations, 2 reservation data, 3 reserved sums, 4 leased sums. ARGV: 1 the lease's id,
# 2 the request's id, 3 now, 4 the request's expiry, 5 name, 6 day, 7 tokens, 8 nano-USD. Moves the
# request's worst case from the lease to a reservation of its own. A lease whose record is gone gives
# nothing and the request is reserved all the same: that takes a draw delayed past the lease's expiry,
# which its gateway renews while it holds it (docs/llm-proxy.md, "Budget leases"). Returns 1.
DRAW_SCRIPT = (
    LUA_COMMON
    + """
reap(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3])
local name, day, tokens, nusd = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
shrink(KEYS[1], KEYS[2], KEYS[4], ARGV[1], tokens, nusd)
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], name .. ' ' .. day .. ' ' .. tokens .. ' ' .. nusd)
add(KEYS[3], name, day, tokens, nusd)
return 1
"""
)

# KEYS: 1 reservations, 2 reservation data, 3 reserved sums, 4 leased sums. ARGV: 1 the lease's id,
# 2 now, 3-4 what its replica has left of it (tokens, nano-USD): given back, and only that, once (a
# draw whose script failed leaves its share until that request is settled). Returns 1.
RELEASE_SCRIPT = (
    LUA_COMMON
    + """
reap(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2])
give_back(KEYS[1], KEYS[2], KEYS[4], ARGV[1], ARGV[3], ARGV[4])
return 1
"""
)

# KEYS: 1 agent usage, 2 swarm usage, 3 the reservation day's usage, 4 agents set, 5 reservations,
# 6 reservation data, 7 reserved sums, 8 the agent's hold, 9 the agent's tokens per model, 10 leased
# sums, 11 the auth version, 12 the auth replicas (gateway.auth_changes). ARGV: 1 name,
# 2 id, 3 now, 4 book (1) or only release (0), 5 cost in nano-USD, 6-9 the four token counts in
# TOKEN_FIELDS order, 10 their sum, 11 day ttl, 12 a hold record to set ('' = none: the usage fits its
# reservation), 13 the model the upstream answered with (model_names.booked_model), 14 the auth
# channel, 15 a lease whose draw script for this request failed ('' = none: its share is taken from
# that lease's record instead, unless the request has a reservation of its own after all: the draw
# ran and only its reply was lost), 16-17 the request's tokens and nano-USD. Returns 0 (released), 1
# (booked) or {2, announce's reply}: booked, and this call set the hold, announced in the same script
# like a token change (gateway.auth_changes), so that every replica drops its budget leases.
SETTLE_SCRIPT = (
    LUA_COMMON
    + ANNOUNCE_LUA
    + """
reap(KEYS[5], KEYS[6], KEYS[7], KEYS[10], ARGV[3])
local had = release(KEYS[5], KEYS[6], KEYS[7], KEYS[10], ARGV[2])
if ARGV[15] ~= '' and not had then shrink(KEYS[5], KEYS[6], KEYS[10], ARGV[15], ARGV[16], ARGV[17]) end
if ARGV[4] ~= '1' then return 0 end
local fields = {'input_tokens', 'output_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens'}
for k = 1, 2 do
  for i = 1, 4 do redis.call('HINCRBY', KEYS[k], fields[i], ARGV[5 + i]) end
  redis.call('HINCRBY', KEYS[k], 'cost_nusd', ARGV[5])
  redis.call('HINCRBY', KEYS[k], 'requests', 1)
  redis.call('HSET', KEYS[k], 'last_request', ARGV[3])
end
local a = 'agent:' .. ARGV[1] .. ':'
redis.call('HINCRBY', KEYS[3], a .. 'tokens', ARGV[10])
redis.call('HINCRBY', KEYS[3], a .. 'nusd', ARGV[5])
redis.call('HINCRBY', KEYS[3], 'swarm:tokens', ARGV[10])
redis.call('HINCRBY', KEYS[3], 'swarm:nusd', ARGV[5])
redis.call('EXPIRE', KEYS[3], ARGV[11])
redis.call('SADD', KEYS[4], ARGV[1])
if ARGV[10] ~= '0' then redis.call('HINCRBY', KEYS[9], ARGV[13], ARGV[10]) end
if ARGV[12] ~= '' and redis.call('SET', KEYS[8], ARGV[12], 'NX') then
  return {2, announce(KEYS[11], KEYS[12], ARGV[14])}
end
return 1
"""
)
