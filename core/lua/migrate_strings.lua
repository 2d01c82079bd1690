-- migrate_strings: writes string records of one group (one slot in the cluster layout), each
-- with its remaining time to live and, in the cluster layout, its index member. An existing
-- record wins unless overwrite is set; an overwrite that finds the same value keeps it (its
-- time to live and index member are set all the same).
-- KEYS[1] the index when ARGV[1] is 'indexed' or 'expiring', else the first record
-- KEYS[2..] the records, in the order of the entries; they start at the first key with 'plain'
-- ARGV[1] 'plain' (no index), 'indexed' (score 0) or 'expiring' (score = expiry in server ms,
--         +inf for none)
-- ARGV[2] '1' to overwrite existing records, else '0'
-- ARGV[3] '1' for a dry run: nothing is written, the codes say what would happen
-- ARGV[4..] per record: index member, value, remaining ttl in ms ('' for none)
-- Returns a code per record: 0 kept (the record existed, or held the same value), 1 copied,
-- 2 overwritten (it held another value or type); -1 for every
-- record when the index is not a sorted set (left as it is).
if redis.replicate_commands then
  redis.replicate_commands()
end
local mode, overwrite, dry = ARGV[1], ARGV[2] == '1', ARGV[3] == '1'
local first = 1
if mode ~= 'plain' then
  first = 2
end
local now
if mode == 'expiring' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local codes = {}
local n = (#ARGV - 3) / 3
if mode ~= 'plain' then
  local index_kind = redis.call('TYPE', KEYS[1])['ok']
  if index_kind ~= 'zset' and index_kind ~= 'none' then
    for i = 1, n do
      codes[i] = -1
    end
    return codes
  end
end
for i = 1, n do
  local key = KEYS[first + i - 1]
  local member, value, ttl = ARGV[1 + i * 3], ARGV[2 + i * 3], ARGV[3 + i * 3]
  local kind = redis.call('TYPE', key)['ok']
  local exists = kind ~= 'none'
  if exists and not overwrite then
    codes[i] = 0
  else
    local same = kind == 'string' and redis.call('GET', key) == value
    codes[i] = (same and 0) or (exists and 2) or 1
    if not dry then
      if same and ttl == '' then
        redis.call('PERSIST', key)
      elseif same then
        redis.call('PEXPIRE', key, ttl)
      elseif ttl == '' then
        redis.call('SET', key, value)
      else
        redis.call('SET', key, value, 'PX', ttl)
      end
      if mode == 'indexed' then
        redis.call('ZADD', KEYS[1], 0, member)
      elseif mode == 'expiring' then
        local score = '+inf'
        if ttl ~= '' then
          score = string.format('%.0f', now + tonumber(ttl))
        end
        redis.call('ZADD', KEYS[1], score, member)
      end
    end
  end
end
return codes
