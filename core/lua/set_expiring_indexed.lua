-- set_expiring_indexed: stores a value with an optional time to live, and its member in an index
-- scored by the value's expiry in server time, together.
-- KEYS[1] the value (string)
-- KEYS[2] the index (sorted set: score = expiry in ms of server time, +inf for none)
-- ARGV[1] the index member
-- ARGV[2] the value
-- ARGV[3] the time to live in ms, or the empty string for none
-- Returns the expiry in ms of server time, or -1 for none.
-- Each call also drops up to 10 members of the index whose values expired: a bot that writes
-- expiring entries under new ids and never lists them would otherwise grow the index for good
-- (expired keys free their memory, their members did not). After its own member is written,
-- so the index is never emptied (Redis would delete it, and while its slot migrates the source
-- refuses a command on a missing key of the slot halfway through the script).
if redis.replicate_commands then
  redis.replicate_commands()
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local at = -1
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[2], '+inf', ARGV[1])
else
  at = ms + tonumber(ARGV[3])
  local text = string.format('%.0f', at)
  redis.call('SET', KEYS[1], ARGV[2], 'PXAT', text)
  redis.call('ZADD', KEYS[2], text, ARGV[1])
end
-- A key expires once the clock is past its expiry: members scored before now are gone, and
-- they are the index's lowest.
local stale = redis.call('ZCOUNT', KEYS[2], '-inf', string.format('(%.0f', ms))
if stale > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, math.min(stale, 10) - 1)
end
return at
