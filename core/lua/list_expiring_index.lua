-- list_expiring_index: drops the members of an expiry-scored index whose values have expired,
-- by server time, then lists the others.
-- KEYS[1] the index (sorted set: score = expiry in ms of server time, +inf for none)
-- Returns every live member, in score order.
if redis.replicate_commands then
  redis.replicate_commands()
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
-- A key expires once the clock is past its expiry, so a member scored exactly now is live.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', ms))
return redis.call('ZRANGE', KEYS[1], 0, -1)
