-- migrate_lease: copies a lease. Its token is only ever raised (exact 64-bit compare on the
-- decimal text); a holder whose lease was still live at the source is copied with the time it
-- had left, on this server's clock (a deadline in the source server's clock would mean nothing
-- here), unless a live holder is already here and overwrite is not set.
-- KEYS[1] the lease (hash: holder, until = server ms, token)
-- ARGV[1] '1' to overwrite, else '0'
-- ARGV[2] '1' for a dry run
-- ARGV[3] the source's token (canonical decimal integer, or '' for none)
-- ARGV[4] the source's holder ('' for none)
-- ARGV[5] ms the source's lease had left ('' when it was not live)
-- Returns {code}: 0 kept, 1 copied, 2 changed (token raised or holder replaced); -1 when the
-- target is not a hash or its token is not a canonical integer (nothing written).
local overwrite, dry = ARGV[1] == '1', ARGV[2] == '1'
local token, holder, left = ARGV[3], ARGV[4], ARGV[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then
  return {-1}
end
local fields = redis.call('HMGET', KEYS[1], 'holder', 'until', 'token')
local existed = kind == 'hash'

-- Whether the canonical decimal integer a is below b, exactly (not as Lua numbers); the same
-- comparison as migrate_counters.lua's (a script cannot load another's functions).
local function below(a, b)
  local a_neg, b_neg = a:sub(1, 1) == '-', b:sub(1, 1) == '-'
  if a_neg ~= b_neg then
    return a_neg
  end
  local less
  if #a ~= #b then
    less = #a < #b
  elseif a == b then
    return false
  else
    less = a < b
  end
  if a_neg then
    return not less
  end
  return less
end

local function canonical(x)
  return x == '0' or string.match(x, '^%-?[1-9]%d*$') ~= nil
end
if fields[3] and not canonical(fields[3]) then
  return {-1}
end
local changed = false
if token ~= '' and (not fields[3] or below(fields[3], token)) then
  changed = true
  if not dry then
    redis.call('HSET', KEYS[1], 'token', token)
  end
end
local live_here = fields[1] and (tonumber(fields[2] or '0') or 0) > now
if holder ~= '' and left ~= '' and (overwrite or not live_here) then
  changed = true
  if not dry then
    redis.call('HSET', KEYS[1], 'holder', holder, 'until', string.format('%.0f', now + tonumber(left)))
  end
end
if not changed then
  return {0}
end
if existed then
  return {2}
end
return {1}
