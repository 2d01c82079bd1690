-- lease: a named lease with one holder at a time. The lease is a hash that never expires as a
-- key, so its token never goes backwards, even after the lease itself has expired. Expiry is
-- the server's clock (TIME), never a client's.
-- KEYS[1] the lease (hash: holder, until = expiry in server ms, token = last token handed out)
-- ARGV[1] operation: acquire, renew or release
-- ARGV[2] holder id
-- ARGV[3] TTL in ms (acquire, renew)
-- ARGV[4] the token the holder was granted (renew, release)
-- Returns, by operation:
--   acquire: the token as its stored decimal text when granted (the same token when the holder
--            takes its live lease again), or nil while another holder's lease is live; a
--            token counter that cannot be incremented (at the i64 maximum) is HINCRBY's error,
--            and the lease is left as it was;
--   renew: 1 when extended, 0 when the holder no longer holds that lease (it expired, or
--          another holder took it);
--   release: 1 when the holder's live lease was released, 0 when it did not hold that lease
--            (an expired lease of the same holder and token is cleared all the same).
-- Tokens are never Lua numbers here: an integer reply reaches Lua as a double, which rounds
-- integers past 2^53; they are read, compared and returned as the hash's decimal text.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op = ARGV[1]
local fields = redis.call('HMGET', KEYS[1], 'holder', 'until', 'token')
local live = fields[1] and tonumber(fields[2] or '0') > now

-- The expiry as integer text: how Redis turns a Lua number argument into text differs
-- between versions (%.17g, or a shortest form that may use an exponent).
local function until_text()
  return string.format('%.0f', now + tonumber(ARGV[3]))
end

if op == 'acquire' then
  if live and fields[1] ~= ARGV[2] then
    return false
  end
  if not (live and fields[3]) then
    -- HINCRBY on the never-expiring hash: the next token is above every one handed out before.
    -- It runs first, so that an overflow error stops the script before the holder is written.
    redis.call('HINCRBY', KEYS[1], 'token', 1)
  end
  redis.call('HSET', KEYS[1], 'holder', ARGV[2], 'until', until_text())
  return redis.call('HGET', KEYS[1], 'token')
end

-- The holder is named by id and token together: a holder id that lost its lease and took it
-- again has a new token, so an old renew or release of the same id does nothing.
local held = fields[1] == ARGV[2] and fields[3] == ARGV[4]
if op == 'renew' then
  if held and live then
    redis.call('HSET', KEYS[1], 'until', until_text())
    return 1
  end
  return 0
end

if op == 'release' then
  if held then
    redis.call('HDEL', KEYS[1], 'holder', 'until')
    if live then
      return 1
    end
  end
  return 0
end

return redis.error_reply('ERR lease: unknown operation ' .. tostring(op))
