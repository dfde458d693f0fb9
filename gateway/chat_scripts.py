"""The chat's Lua scripts: the atomic post (channel entry, thread index, inbox fan-out, event, one id
for all of them) and the sender's token bucket. Kept apart from ``chat.py`` so that the service reads
as Python; the layout they write is described there and in docs/gateway.md."""

# Atomic post: the channel entry, the thread index, the inbox fan-out and the event, or nothing.
# The message's id is computed first and written with every entry (channel, inboxes, event), so it
# is the same everywhere and unique across channels: one sequence for all of them, the next id after
# the newest one any of these streams has generated (or now, if later) -- what XADD's "*" does for a
# single stream. Explicit ids above every stream's last-generated id cannot fail, so nothing is
# half-written. (Lua numbers are doubles: exact for today's ms and any sequence below 2^53.)
# With a dedupe key (ARGV[4] > 0: its TTL), a post whose key is set already writes nothing and returns
# the id it was accepted under, so a sender that retries after a crash posts once.
# KEYS: channel stream, events stream, thread index, dedupe key, inbox streams...
# ARGV: channel maxlen, events maxlen, inbox maxlen, dedupe ttl (0: none), n message fields, fields...,
#       reasons...
POST_SCRIPT = """
local dedupe_ttl = tonumber(ARGV[4])
if dedupe_ttl > 0 then
  local prior = redis.call('GET', KEYS[4])
  if prior then return prior end
end
local function last_generated(key)
  if redis.call('EXISTS', key) == 0 then return nil end
  local info = redis.call('XINFO', 'STREAM', key)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then return info[i + 1] end
  end
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local seq = 0
for k = 1, #KEYS do
  if k ~= 3 and k ~= 4 then  -- KEYS[3] is the thread index (a list), KEYS[4] the dedupe key
    local last = last_generated(KEYS[k])
    if last then
      local dash = string.find(last, '-', 1, true)
      local last_ms = tonumber(string.sub(last, 1, dash - 1))
      local last_seq = tonumber(string.sub(last, dash + 1))
      if last_ms > ms or (last_ms == ms and last_seq >= seq) then ms, seq = last_ms, last_seq + 1 end
    end
  end
end
local id = string.format('%d-%d', ms, seq)

local nfields = tonumber(ARGV[5])
local fields = {}
for i = 1, nfields do fields[i] = ARGV[5 + i] end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], id, unpack(fields))
local msg = {}
for i = 1, nfields, 2 do msg[fields[i]] = fields[i + 1] end
if msg['thread'] ~= '' then redis.call('RPUSH', KEYS[3], id) end
for k = 5, #KEYS do
  redis.call('XADD', KEYS[k], 'MAXLEN', '~', ARGV[3], id,
    'reason', ARGV[5 + nfields + k - 4], 'channel', msg['channel'], 'message_id', id,
    'sender', msg['sender'], 'text', msg['text'], 'ts', msg['ts'], 'thread', msg['thread'])
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], id, 'type', 'message', 'id', id, unpack(fields))
if dedupe_ttl > 0 then redis.call('SET', KEYS[4], id, 'EX', dedupe_ttl) end
return id
"""

# Token bucket per sender; returns seconds to wait as a string ("0" = allowed).
RATE_SCRIPT = """
local rate = tonumber(ARGV[1]); local burst = tonumber(ARGV[2]); local now = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local ts = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
if tokens < 1 then return tostring((1 - tokens) / rate) end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - 1), 'ts', tostring(now))
redis.call('EXPIRE', KEYS[1], 3600)
return '0'
"""
