-- schedule: writes or deletes a schedule record guarded by its fencing token. A write with a
-- lower token than the stored one is refused, so a stale writer can neither overwrite a newer
-- schedule nor resurrect a deleted one; a delete leaves a marker that keeps the token. An equal
-- token is the same writer (tokens are unique per grant) and is accepted.
-- KEYS[1] the schedule record (hash: token, data, deleted = 0 or 1)
-- KEYS[2..] optional: the record's bucket index (cluster layout; sorted set of ids, score 0)
-- ARGV[1] operation: put or delete
-- ARGV[2] schedule id (the index member)
-- ARGV[3] fencing token (decimal integer, |token| <= 2^53)
-- ARGV[4] data (put)
-- Returns {'ok', token} when written, or {'stale', stored token} when refused (tokens as
-- decimal strings, stored exactly as written).
local op = ARGV[1]
if op ~= 'put' and op ~= 'delete' then
  return redis.error_reply('ERR schedule: unknown operation ' .. tostring(op))
end
local token = tonumber(ARGV[3])
local stored = redis.call('HGET', KEYS[1], 'token')
if stored and tonumber(stored) > token then
  return {'stale', stored}
end
-- The token is stored as the caller's text, not as a Lua number, so it reads back exactly.
if op == 'put' then
  redis.call('HSET', KEYS[1], 'token', ARGV[3], 'data', ARGV[4], 'deleted', '0')
  if KEYS[2] then
    redis.call('ZADD', KEYS[2], 0, ARGV[2])
  end
else
  redis.call('HSET', KEYS[1], 'token', ARGV[3], 'deleted', '1')
  redis.call('HDEL', KEYS[1], 'data')
  if KEYS[2] then
    redis.call('ZREM', KEYS[2], ARGV[2])
  end
end
return {'ok', ARGV[3]}
