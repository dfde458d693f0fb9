"""The Redis Lua scripts behind LLM budget reservations (used by ``gateway.llm.usage.UsageStore``).

``RESERVE_SCRIPT`` admits a request only if no hold stops its agent and usage + live reservations + its
worst case fit in every budget, and then holds that worst case (or, probing, only checks);
``SETTLE_SCRIPT`` replaces a reservation by the real usage, and sets the agent's hold when that usage is
more than the reservation.
Both first drop the reservations whose expiry has passed (their gateway stopped renewing them), so
a crashed gateway's reservations stop counting after the TTL. Each is one atomic round trip.
"""

from __future__ import annotations

# Shared by both scripts. A reservation's sums live in the RESERVED hash under the fields named by
# ``sum_fields`` (agent and swarm, all time and per day, tokens and nano-USD); amounts stay strings,
# so no Lua number is ever turned back into a Redis integer.
LUA_COMMON = """
local function sum_fields(name, day)
  local a, s, d = 'agent:' .. name .. ':', 'swarm:', 'day:' .. day .. ':'
  return {a .. 'tokens', a .. 'nusd', a .. d .. 'tokens', a .. d .. 'nusd',
          s .. 'tokens', s .. 'nusd', s .. d .. 'tokens', s .. d .. 'nusd'}
end
local function release(zset, data, sums, id)
  local rec = redis.call('HGET', data, id)
  redis.call('ZREM', zset, id)
  if not rec then return end
  redis.call('HDEL', data, id)
  local name, day, tokens, nusd = string.match(rec, '^(%S+) (%S+) (%S+) (%S+)$')
  local f = sum_fields(name, day)
  for i = 1, 8 do
    local amount = (i % 2 == 1) and tokens or nusd
    if amount ~= '0' and redis.call('HINCRBY', sums, f[i], '-' .. amount) <= 0 then
      redis.call('HDEL', sums, f[i])
    end
  end
end
local function reap(zset, data, sums, now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'LIMIT', 0, 256)) do
    release(zset, data, sums, id)
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
# 12 the agent's hold. ARGV: 1 name, 2 id, 3 now, 4 expiry, 5 day, 6 tokens, 7 nano-USD, 8-15 limits
# in BUDGETS order ('' = none), 16 day flag ttl, 17 probe ('1': only check, reserve nothing; a budget
# refuses once it is used up). Returns {1} (admitted; reserved unless probing), {2, the hold record}
# or {0, budget index, used, reserved by others, limit, 1 if this call claimed the budget's notice}.
RESERVE_SCRIPT = (
    LUA_COMMON
    + """
reap(KEYS[5], KEYS[6], KEYS[7], ARGV[3])
local hold = redis.call('GET', KEYS[12])
if hold then return {2, hold} end
local name, id, day, probe = ARGV[1], ARGV[2], ARGV[5], ARGV[17] == '1'
local need = {ARGV[6], ARGV[7]}
local a = 'agent:' .. name .. ':'
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
    local over
    if probe then
      over = used[i] >= limit
    else
      over = used[i] + reserved + tonumber(need[2 - i % 2]) > limit
    end
    if over then
      local flag = KEYS[8 + math.floor((i - 1) / 2)]
      local claimed
      if i % 4 == 3 or i % 4 == 0 then
        claimed = redis.call('SET', flag, ARGV[3], 'NX', 'EX', ARGV[16])
      else
        claimed = redis.call('SET', flag, ARGV[3], 'NX')
      end
      return {0, i, used[i], reserved, limit, claimed and 1 or 0}
    end
  end
end
if probe then return {1} end
redis.call('ZADD', KEYS[5], ARGV[4], id)
redis.call('HSET', KEYS[6], id, name .. ' ' .. day .. ' ' .. need[1] .. ' ' .. need[2])
for i = 1, 8 do
  local amount = need[2 - i % 2]
  if amount ~= '0' then redis.call('HINCRBY', KEYS[7], f[i], amount) end
end
return {1}
"""
)

# KEYS: 1 agent usage, 2 swarm usage, 3 the reservation day's usage, 4 agents set, 5 reservations,
# 6 reservation data, 7 reserved sums, 8 the agent's hold, 9 the agent's tokens per model. ARGV: 1 name,
# 2 id, 3 now, 4 book (1) or only release (0), 5 cost in nano-USD, 6-9 the four token counts in
# TOKEN_FIELDS order, 10 their sum, 11 day ttl, 12 a hold record to set ('' = none: the usage fits its
# reservation), 13 the model the upstream answered with (model_names.booked_model). Returns 0
# (released), 1 (booked) or 2 (booked, and this call set the hold).
SETTLE_SCRIPT = (
    LUA_COMMON
    + """
reap(KEYS[5], KEYS[6], KEYS[7], ARGV[3])
release(KEYS[5], KEYS[6], KEYS[7], ARGV[2])
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
if ARGV[12] ~= '' and redis.call('SET', KEYS[8], ARGV[12], 'NX') then return 2 end
return 1
"""
)
