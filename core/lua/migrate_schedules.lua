-- migrate_schedules: writes schedule records of one group (one bucket in the cluster layout),
-- deleted markers included, keeping fencing tokens: a record with a higher token replaces the
-- stored one even without overwrite, and an overwritten record keeps the higher token (and its
-- holder). Tokens compare exactly as 64-bit integers, on their decimal text.
-- KEYS[1] the bucket index when ARGV[1] is '1' (cluster layout), else the first record
-- KEYS[2..] the records (hash: token, holder, data, deleted), in the order of the entries; they
--         start at the first key when there is no index
-- ARGV[1] '1' when KEYS[1] is an index
-- ARGV[2] '1' to overwrite, else '0'
-- ARGV[3] '1' for a dry run: nothing is written
-- ARGV[4..] per record: id, token, holder ('' for none), deleted ('0' or '1'), data
-- Returns a code per record: 0 kept (with overwrite: the same record was stored), 1 copied,
-- 2 replaced, -1 when the source's or the stored
-- token is not a canonical integer, or the stored record is not a hash (that record is left as it is; the others are written).
local indexed, overwrite, dry = ARGV[1] == '1', ARGV[2] == '1', ARGV[3] == '1'

local function canonical(x)
  return x == '0' or string.match(x, '^%-?[1-9]%d*$') ~= nil
end

-- Compares two canonical decimal integers exactly: -1, 0 or 1 (as schedule.lua does: a script
-- cannot load another's functions).
local function compare(a, b)
  local a_neg, b_neg = a:sub(1, 1) == '-', b:sub(1, 1) == '-'
  if a_neg ~= b_neg then
    return a_neg and -1 or 1
  end
  local c = 0
  if #a ~= #b then
    c = #a < #b and -1 or 1
  elseif a ~= b then
    c = a < b and -1 or 1
  end
  if a_neg then
    return -c
  end
  return c
end

local first = indexed and 2 or 1
local codes = {}
-- The index member each written record ends with: true (in the index) or false (a deleted
-- marker is not). Applied after the records, additions first: a removal may empty the index,
-- which Redis deletes, and while the slot is migrating the source refuses any later command
-- on a missing key of the slot (it counts as moved), halfway through the script.
local members = {}
local ids = {}
local n = (#ARGV - 3) / 5
for i = 1, n do
  local key = KEYS[first + i - 1]
  local at = 3 + (i - 1) * 5
  local id, token, holder, deleted, data =
    ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4], ARGV[at + 5]
  local kind = redis.call('TYPE', key)['ok']
  local stored = {}
  if kind == 'hash' then
    stored = redis.call('HMGET', key, 'token', 'holder', 'deleted', 'data')
  end
  local write = true
  local code = 1
  if (kind ~= 'hash' and kind ~= 'none') or not canonical(token)
      or (stored[1] and not canonical(stored[1])) then
    write = false
    code = -1
  elseif stored[1] then
    code = 2
    local order = compare(token, stored[1])
    if order < 0 or (order == 0 and not overwrite) then
      if overwrite then
        -- The source's record, with the stored (higher) token and its holder.
        token, holder = stored[1], stored[2] or ''
      else
        write = false
        code = 0
      end
    elseif order == 0 then
      holder = holder ~= '' and holder or (stored[2] or '')
      if holder == (stored[2] or '') and deleted == (stored[3] or '0')
          and (deleted == '1' or data == stored[4]) then
        -- The same record: kept (written again all the same, which puts its index member
        -- right).
        code = 0
      end
    end
  end
  codes[i] = code
  if write and not dry then
    -- The record is replaced in place, never deleted and written again (the same reason as
    -- for the index): written over, then stripped of the fields the new record lacks.
    local fields = {'token', token, 'deleted', deleted}
    local wanted = {token = true, deleted = true}
    if holder ~= '' then
      fields[#fields + 1], fields[#fields + 2] = 'holder', holder
      wanted.holder = true
    end
    if deleted ~= '1' then
      fields[#fields + 1], fields[#fields + 2] = 'data', data
      wanted.data = true
    end
    local stale = {}
    if kind == 'hash' then
      for _, field in ipairs(redis.call('HKEYS', key)) do
        if not wanted[field] then
          stale[#stale + 1] = field
        end
      end
    end
    redis.call('HSET', key, unpack(fields))
    if #stale > 0 then
      redis.call('HDEL', key, unpack(stale))
    end
    if indexed then
      if members[id] == nil then
        ids[#ids + 1] = id
      end
      members[id] = deleted ~= '1'
    end
  end
end
for _, id in ipairs(ids) do
  if members[id] then
    redis.call('ZADD', KEYS[1], 0, id)
  end
end
local left
for _, id in ipairs(ids) do
  if not members[id] then
    left = left or redis.call('ZCARD', KEYS[1])
    if left > 0 then
      left = left - redis.call('ZREM', KEYS[1], id)
    end
  end
end
return codes
