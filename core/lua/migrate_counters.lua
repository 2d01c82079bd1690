-- migrate_counters: raises counters that must never go backwards (lock fences, leadership
-- terms, cursors): each is set to the source's value only when it is missing or holds a lower
-- integer, whatever overwrite says. Compares exact 64-bit integers, on their decimal text.
-- KEYS[1..] the counters (integer strings)
-- ARGV[1] '1' for a dry run: nothing is written
-- ARGV[2..] the source's value of each counter, in order: canonical decimal integers
-- Returns a code per counter: 0 kept (equal or higher), 1 copied (it was missing), 2 raised,
-- -1 when the counter holds something that is not a canonical integer, or is not a string (left
-- as it is; the other
-- counters of the call are written all the same).
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
  local kind = redis.call('TYPE', key)['ok']
  local current = kind == 'string' and redis.call('GET', key)
  local code = 1
  if kind ~= 'string' and kind ~= 'none' then
    code = -1
  elseif current then
    if not canonical(current) then
      code = -1
    else
      code = below(current, value) and 2 or 0
    end
  end
  codes[i] = code
  if code > 0 and not dry then
    redis.call('SET', key, value)
  end
end
return codes
