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
# the last one this script wrote (KEYS[10], the sequence's mark), or now if later -- what XADD's "*"
# does for a single stream. An explicit id at or below a stream's last-generated id is refused; only
# this script writes channel and inbox streams, so the mark is above theirs, and the event stream's
# other writers ("*": jobs, the forge) rarely land in the same millisecond. Where a stream is ahead all
# the same (another writer, data restored from elsewhere, a clock set back, a lost mark), its XADD is
# refused, what the script had written under that id is deleted again, and the id is taken after every
# stream's own last-generated id (XINFO STREAM, ~13 µs each, which the mark saves) -- so nothing is
# ever half-written. (Lua numbers are doubles: exact for today's ms and any sequence below 2^53.)
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
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local seq = 0
local function after(last)
  local dash = string.find(last, '-', 1, true)
  local last_ms = tonumber(string.sub(last, 1, dash - 1))
  local last_seq = tonumber(string.sub(last, dash + 1))
  if last_ms > ms or (last_ms == ms and last_seq >= seq) then ms, seq = last_ms, last_seq + 1 end
end
local mark = redis.call('GET', KEYS[10])
if mark then after(mark) end

local nfields = tonumber(ARGV[14])
local fields = {}
for i = 1, nfields do fields[i] = ARGV[14 + i] end
local msg = {}
for i = 1, nfields, 2 do msg[fields[i]] = fields[i + 1] end
-- Each stream's XADD at `id`; false where a stream is ahead of it, an error for any other refusal
-- (a key of another type), either after deleting what it had written.
local function add_everywhere(id)
  local written = {}
  local function add(key, maxlen, ...)
    local reply = redis.pcall('XADD', key, 'MAXLEN', '~', maxlen, id, ...)
    if type(reply) == 'table' and reply.err then
      for _, done in ipairs(written) do redis.call('XDEL', done, id) end
      if not string.find(reply.err, 'equal or smaller', 1, true) then error(reply) end
      return false
    end
    written[#written + 1] = key
    return true
  end
  if not add(KEYS[1], ARGV[1], unpack(fields)) then return false end
  for k = 11, #KEYS do
    if not add(KEYS[k], ARGV[3], 'reason', ARGV[14 + nfields + k - 10], 'channel', msg['channel'],
        'message_id', id, 'sender', msg['sender'], 'text', msg['text'], 'ts', msg['ts'],
        'thread', msg['thread']) then return false end
  end
  return add(KEYS[2], ARGV[2], 'type', 'message', 'id', id, unpack(fields))
end
local id = string.format('%d-%d', ms, seq)
if not add_everywhere(id) then
  local function after_last(key)
    if redis.call('EXISTS', key) == 0 then return end
    local info = redis.call('XINFO', 'STREAM', key)
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then return after(info[i + 1]) end
    end
  end
  after_last(KEYS[1]); after_last(KEYS[2])
  for k = 11, #KEYS do after_last(KEYS[k]) end
  id = string.format('%d-%d', ms, seq)
  assert(add_everywhere(id), 'a stream is ahead of its own last-generated id')
end
redis.call('SET', KEYS[10], id)
if msg['thread'] ~= '' then redis.call('RPUSH', KEYS[3], id) end
if ARGV[8] == '1' then redis.call('SADD', KEYS[6], ARGV[9]) end
if ARGV[11] ~= '' then redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[10], '*', 'to', ARGV[11]) end
if dedupe_ttl > 0 then redis.call('SET', KEYS[4], id, 'EX', dedupe_ttl) end
return id
"""
