"""The chat's Lua script: the atomic post (the sender's token bucket, channel entry, thread index, inbox
fan-out, event and wake-up, one id for all of them). Kept apart from ``chat.py`` so
that the service reads as Python; the layout they write is described there and in docs/gateway.md."""

# Atomic post: the rate check, then the channel entry, the thread index, the inbox fan-out, the event
# and the wake-up, or nothing. One script is one round trip: a post the gateway must read for first (a
# reply: its parent; @all: the members; a channel it has not read yet) costs it two, which is most of
# its latency; any other post (plain or with @names, into a channel the gateway has read) costs it one:
# the channel's existence and the mentioned names are checked here instead.
# The message's id is computed first and written with every entry (channel, inboxes, event), so it
# is the same everywhere and unique across channels: one sequence for all of them, the next id after
# the newest one any of these streams has generated (or now, if later) -- what XADD's "*" does for a
# single stream. Explicit ids above every stream's last-generated id cannot fail, so nothing is
# half-written. (Lua numbers are doubles: exact for today's ms and any sequence below 2^53.)
# With a dedupe key (ARGV[4] > 0: its TTL), a post whose key is set already writes nothing and returns
# the id it was accepted under, so a sender that retries after a crash posts once (and pays no token).
# A post whose channel the gateway took from its cache of known channels (ARGV[12]: the channel's name;
# empty when it was read just before) is refused with {'nochannel'} if the channel is not there, then
# with {'nomention', name...} if a name of ARGV[13] (comma-joined; empty: none) is no principal.
# The sender's token bucket (ARGV[5] > 0: its rate) refuses with {'rate', seconds to wait}.
# The wake-up (KEYS[7], when ARGV[11] names topics) is what the gateway's event hub reads to wake the
# recipients' blocked inbox waits; it has its own ids (it is not a message).
# KEYS: 1 channel stream, 2 events stream, 3 thread index, 4 dedupe key, 5 rate bucket, 6 channel
#       members, 7 wake stream, 8 the channels hash, 9 the principals set, 10... inbox streams
# ARGV: 1 channel maxlen, 2 events maxlen, 3 inbox maxlen, 4 dedupe ttl (0: none), 5 rate per second
#       (0: unlimited), 6 rate burst, 7 now, 8 join (1: add the sender to the members), 9 sender,
#       10 wake maxlen, 11 wake topics (comma-joined; empty: none), 12 channel to check (empty: none),
#       13 mentioned names to check (comma-joined; empty: none), 14 n message fields, fields...,
#       reasons...
POST_SCRIPT = """
local dedupe_ttl = tonumber(ARGV[4])
if dedupe_ttl > 0 then
  local prior = redis.call('GET', KEYS[4])
  if prior then return prior end
end
if ARGV[12] ~= '' and redis.call('HEXISTS', KEYS[8], ARGV[12]) == 0 then return {'nochannel'} end
if ARGV[13] ~= '' then
  local unknown = {'nomention'}
  for name in string.gmatch(ARGV[13], '[^,]+') do
    if redis.call('SISMEMBER', KEYS[9], name) == 0 then unknown[#unknown + 1] = name end
  end
  if #unknown > 1 then return unknown end
end
local rate = tonumber(ARGV[5])
if rate > 0 then
  local burst = tonumber(ARGV[6]); local now = tonumber(ARGV[7])
  local state = redis.call('HMGET', KEYS[5], 'tokens', 'ts')
  local tokens = tonumber(state[1]) or burst
  local ts = tonumber(state[2]) or now
  tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
  if tokens < 1 then return {'rate', tostring((1 - tokens) / rate)} end
  redis.call('HSET', KEYS[5], 'tokens', tostring(tokens - 1), 'ts', tostring(now))
  redis.call('EXPIRE', KEYS[5], 3600)
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
local function after_last(key)
  local last = last_generated(key)
  if last then
    local dash = string.find(last, '-', 1, true)
    local last_ms = tonumber(string.sub(last, 1, dash - 1))
    local last_seq = tonumber(string.sub(last, dash + 1))
    if last_ms > ms or (last_ms == ms and last_seq >= seq) then ms, seq = last_ms, last_seq + 1 end
  end
end
after_last(KEYS[1]); after_last(KEYS[2])
for k = 10, #KEYS do after_last(KEYS[k]) end
local id = string.format('%d-%d', ms, seq)

local nfields = tonumber(ARGV[14])
local fields = {}
for i = 1, nfields do fields[i] = ARGV[14 + i] end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], id, unpack(fields))
local msg = {}
for i = 1, nfields, 2 do msg[fields[i]] = fields[i + 1] end
if msg['thread'] ~= '' then redis.call('RPUSH', KEYS[3], id) end
if ARGV[8] == '1' then redis.call('SADD', KEYS[6], ARGV[9]) end
for k = 10, #KEYS do
  redis.call('XADD', KEYS[k], 'MAXLEN', '~', ARGV[3], id,
    'reason', ARGV[14 + nfields + k - 9], 'channel', msg['channel'], 'message_id', id,
    'sender', msg['sender'], 'text', msg['text'], 'ts', msg['ts'], 'thread', msg['thread'])
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], id, 'type', 'message', 'id', id, unpack(fields))
if ARGV[11] ~= '' then redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[10], '*', 'to', ARGV[11]) end
if dedupe_ttl > 0 then redis.call('SET', KEYS[4], id, 'EX', dedupe_ttl) end
return id
"""
