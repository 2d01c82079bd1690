-- schedule: writes or deletes a schedule record guarded by its fencing token and its holder. A
-- write with a lower token than the stored one is refused, so a stale writer can neither
-- overwrite a newer schedule nor resurrect a deleted one; a delete leaves a marker that keeps
-- the token and its holder. An equal token is accepted only from the holder that wrote it
-- (that holder writing again); an equal token from another holder is refused, as a protected
-- write must (two holders cannot both own one grant). Tokens are compared exactly as 64-bit
-- integers, on their decimal text: Lua numbers are doubles and lose integers past 2^53.
-- KEYS[1] the schedule record (hash: token, holder, data, deleted = 0 or 1)
-- KEYS[2..] optional: the record's bucket index (cluster layout; sorted set of ids, score 0)
-- ARGV[1] operation: put or delete
-- ARGV[2] schedule id (the index member)
-- ARGV[3] fencing token (canonical decimal integer, no leading zero: a u64 fence, term or lease
--         token; a '-' is accepted for records written before tokens were unsigned)
-- ARGV[4] holder id (who owns the token)
-- ARGV[5] data (put)
-- Returns {'ok', token} when written, {'stale', stored token} when a higher token is stored,
-- or {'taken', stored token} when the same token is stored by another holder (tokens as
-- decimal strings, stored exactly as written). A record written before holders were stored
-- has none; an equal token is then accepted and the writer becomes its holder.
local op = ARGV[1]
if op ~= 'put' and op ~= 'delete' then
  return redis.error_reply('ERR schedule: unknown operation ' .. tostring(op))
end
if not string.match(ARGV[3], '^%-?[1-9]%d*$') and ARGV[3] ~= '0' then
  return redis.error_reply('ERR schedule: the token is not a canonical integer')
end

-- Compares two canonical decimal integers exactly: -1, 0 or 1. Same sign: the longer magnitude
-- is the larger one, and equal lengths compare as text (digits sort like their values).
local function compare(a, b)
  local a_neg, b_neg = a:sub(1, 1) == '-', b:sub(1, 1) == '-'
  if a_neg ~= b_neg then
    return a_neg and -1 or 1
  end
  local c = 0
  if #a ~= #b then
    c = #a < #b and -1 or 1
  elseif a ~= b then
    c = a < b and -1 or 1
  end
  if a_neg then
    return -c
  end
  return c
end

local stored = redis.call('HMGET', KEYS[1], 'token', 'holder')
if stored[1] then
  local order = compare(stored[1], ARGV[3])
  if order > 0 then
    return {'stale', stored[1]}
  end
  if order == 0 and stored[2] and stored[2] ~= ARGV[4] then
    return {'taken', stored[1]}
  end
end
-- The token is stored as the caller's text, not as a Lua number, so it reads back exactly.
if op == 'put' then
  redis.call('HSET', KEYS[1], 'token', ARGV[3], 'holder', ARGV[4], 'data', ARGV[5], 'deleted', '0')
  if KEYS[2] then
    redis.call('ZADD', KEYS[2], 0, ARGV[2])
  end
else
  redis.call('HSET', KEYS[1], 'token', ARGV[3], 'holder', ARGV[4], 'deleted', '1')
  redis.call('HDEL', KEYS[1], 'data')
  if KEYS[2] then
    redis.call('ZREM', KEYS[2], ARGV[2])
  end
end
return {'ok', ARGV[3]}
