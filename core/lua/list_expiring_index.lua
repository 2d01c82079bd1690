-- list_expiring_index: drops the members of an expiry-scored index whose values have expired
-- (up to 1,000 a call), by server time, and lists the others.
-- KEYS[1] the index (sorted set: score = expiry in ms of server time, +inf for none)
-- Returns every live member, in score order.
if redis.replicate_commands then
  redis.replicate_commands()
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local now_text = string.format('%.0f', ms)
-- A key expires once the clock is past its expiry, so a member scored exactly now is live.
-- The live members are read before the others are dropped: dropping them all empties the
-- index, which Redis deletes, and while its slot is migrating the source refuses any later
-- command on a missing key of the slot (it counts as moved), halfway through the script.
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now_text, '+inf')
-- At most 1,000 go per call (the lowest ranks): a backlog of expired members goes over the
-- next listings and writes rather than holding the master in one script.
local stale = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. now_text)
if stale > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, math.min(stale, 1000) - 1)
end
return live
