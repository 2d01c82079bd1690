-- cursor_set_if_greater: raises a cursor: stores the value only when the cursor is unset or
-- holds a smaller integer. Compares exact 64-bit integers (as decimal text, not as Lua numbers).
-- KEYS[1] the cursor (string holding a decimal integer)
-- ARGV[1] the new value, a canonical decimal integer (no leading zeros, no plus sign)
-- Returns 1 when the cursor was set, 0 when it already held a value at least as large; an error
-- when it holds something that is not an integer.
local current = redis.call('GET', KEYS[1])

-- Splits a decimal integer into its sign and its digits without leading zeros.
local function parts(text)
  local sign, digits = string.match(text, '^(%-?)(%d+)$')
  if not digits then
    return nil
  end
  digits = string.gsub(digits, '^0+', '')
  if digits == '' then
    return '', '0'
  end
  return sign, digits
end

-- Whether the decimal integer a is below b.
local function below(a, b)
  local sa, da = parts(a)
  local sb, db = parts(b)
  if sa ~= sb then
    return sa == '-'
  end
  local less
  if #da ~= #db then
    less = #da < #db
  elseif da == db then
    return false
  else
    less = false
    for i = 1, #da do
      local x, y = string.byte(da, i), string.byte(db, i)
      if x ~= y then
        less = x < y
        break
      end
    end
  end
  if sa == '-' then
    return not less
  end
  return less
end

if current then
  if not parts(current) then
    return redis.error_reply('ERR the cursor does not hold an integer')
  end
  if not below(current, ARGV[1]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
