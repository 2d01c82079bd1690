-- migrate_counters: raises counters that must never go backwards (lock fences, leadership
-- terms, cursors): each is set to the source's value only when it is missing or holds a lower
-- integer, whatever overwrite says. Compares exact 64-bit integers, on their decimal text.
-- KEYS[1..] the counters (integer strings)
-- ARGV[1] '1' for a dry run: nothing is written
-- ARGV[2..] the source's value of each counter, in order: canonical decimal integers
-- Returns a code per counter: 0 kept (equal or higher), 1 copied (it was missing), 2 raised;
-- an error when a counter holds something that is not an integer.
local dry = ARGV[1] == '1'

local function canonical(x)
  return x == '0' or string.match(x, '^%-?[1-9]%d*$') ~= nil
end

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

local codes = {}
for i, key in ipairs(KEYS) do
  local value = ARGV[i + 1]
  local current = redis.call('GET', key)
  local code = 1
  if current then
    if not canonical(current) then
      return redis.error_reply('ERR migrate_counters: ' .. key .. ' does not hold a canonical integer')
    end
    code = below(current, value) and 2 or 0
  end
  codes[i] = code
  if code ~= 0 and not dry then
    redis.call('SET', key, value)
  end
end
return codes
