-- set_expiring_indexed: stores a value with an optional time to live, and its member in an index
-- scored by the value's expiry in server time, together.
-- KEYS[1] the value (string)
-- KEYS[2] the index (sorted set: score = expiry in ms of server time, +inf for none)
-- ARGV[1] the index member
-- ARGV[2] the value
-- ARGV[3] the time to live in ms, or the empty string for none
-- Returns the expiry in ms of server time, or -1 for none.
if redis.replicate_commands then
  redis.replicate_commands()
end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[2], '+inf', ARGV[1])
  return -1
end
local now = redis.call('TIME')
local at = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[3])
local text = string.format('%.0f', at)
redis.call('SET', KEYS[1], ARGV[2], 'PXAT', text)
redis.call('ZADD', KEYS[2], text, ARGV[1])
return at
