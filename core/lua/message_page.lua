-- message_page: finds the ids of the next page of a chat's log, in (time, id) order, within a
-- time range and strictly after a cursor.
-- KEYS[1] the chat's message log (sorted set: member = message id, score = time in ms)
-- ARGV[1] the first time of the range in ms, inclusive, or -inf
-- ARGV[2] the last time of the range in ms, inclusive, or +inf
-- ARGV[3] the cursor's time in ms, or the empty string for the first page
-- ARGV[4] the cursor's message id (ignored without a cursor time)
-- ARGV[5] the page size, at least 1
-- Returns {more, id, time, id, time, ...}: more is 1 when the range holds messages after the
-- page, then up to ARGV[5] ids with their times in ms.
-- A message's time is its score's floor: this client writes whole numbers, but a log another
-- program wrote, copied as it is by a migration, may hold 1000.5. Its cursor says 1000 then,
-- and a message is its cursor's when the floors agree: compared to the score itself, the
-- cursor never matched, and the next page started again at the same message, for good.
local log = KEYS[1]
local limit = tonumber(ARGV[5])

-- Byte order, as Redis orders members of equal score (Lua's own < follows the locale).
local function after(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return #a > #b
end

-- The rank of the first member inside the range.
local start = 0
if ARGV[1] ~= '-inf' then
  start = redis.call('ZCOUNT', log, '-inf', '(' .. ARGV[1])
end

-- The rank of the first member after the cursor (time, id).
if ARGV[3] ~= '' then
  local time, id = ARGV[3], ARGV[4]
  local rank
  local score = redis.call('ZSCORE', log, id)
  if score and math.floor(tonumber(score)) == tonumber(time) then
    rank = redis.call('ZRANK', log, id) + 1
  else
    -- The cursor's message is gone or has moved: search the members of its millisecond,
    -- which are ordered by id (when their scores are whole), for the first one after it.
    local lo = redis.call('ZCOUNT', log, '-inf', '(' .. time)
    local next_ms = string.format('(%.0f', tonumber(time) + 1)
    local hi = lo + redis.call('ZCOUNT', log, time, next_ms)
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local member = redis.call('ZRANGE', log, mid, mid)[1]
      if member and after(member, id) then
        hi = mid
      else
        lo = mid + 1
      end
    end
    rank = lo
  end
  if rank > start then
    start = rank
  end
end

local rows = redis.call('ZRANGE', log, start, start + limit, 'WITHSCORES')
local out = {0}
local taken = 0
for i = 1, #rows, 2 do
  local time = math.floor(tonumber(rows[i + 1]))
  if ARGV[2] ~= '+inf' and time > tonumber(ARGV[2]) then
    break
  end
  if taken == limit then
    out[1] = 1
    break
  end
  out[#out + 1] = rows[i]
  out[#out + 1] = time
  taken = taken + 1
end
return out
