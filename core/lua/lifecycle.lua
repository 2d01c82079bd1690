-- lifecycle: one side's lifecycle record (docs/migration.md, "The lifecycle"), and the layout
-- marker beside it in the {meta} slot. A migration step replaces the record ('put') only while
-- it still holds what the step read, so a bot that started in between is never overlooked;
-- a store's start() stamps it ('start').
-- KEYS[1] the record (hash: copy, prev, role, phase, exact, peer, at, started, started_at,
--         live)
-- KEYS[2] the layout marker (string)
-- ARGV[1] operation: put or start
-- ARGV[2] put: the copy field the step read ('' for no record); start: '1' to create an origin
--         record when there is none (a cluster-layout store starting on a keyspace no copy
--         made), else '0'
-- ARGV[3] put: the started field the step read ('' for none)
-- ARGV[4] put: what to do with the marker: keep, set or del
-- ARGV[5] put: the marker's value (set)
-- ARGV[6..] put: the new record, field and value pairs
-- Returns:
--   put: 1 when written, 0 when the record changed since the step read it (nothing written);
--   start: {outcome, field, value, ...}: outcome 'none' (no record, none created), 'created',
--          'stamped' (bots start here for the first time since the record's copy), 'again'
--          (already stamped), or 'refused' (an incomplete copy into this side, or a cleanup
--          took it apart: nothing written); then the record as it is now.
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local op = ARGV[1]

if op == 'put' then
  local fields = redis.call('HMGET', KEYS[1], 'copy', 'started')
  if (fields[1] or '') ~= ARGV[2] or (fields[2] or '') ~= ARGV[3] then
    return 0
  end
  -- The record is replaced in place: written over, then stripped of the fields the new one
  -- lacks. Deleting it first and writing it again would touch a key this script deleted, and
  -- while the {meta} slot is migrating the source refuses a command on a missing key of the
  -- slot (it counts as moved), halfway through the script.
  local record = {}
  local wanted = {}
  for i = 6, #ARGV do
    record[#record + 1] = ARGV[i]
    if (i - 6) % 2 == 0 then
      wanted[ARGV[i]] = true
    end
  end
  if #record > 0 then
    local stale = {}
    for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
      if not wanted[field] then
        stale[#stale + 1] = field
      end
    end
    redis.call('HSET', KEYS[1], unpack(record))
    if #stale > 0 then
      redis.call('HDEL', KEYS[1], unpack(stale))
    end
  else
    redis.call('DEL', KEYS[1])
  end
  if ARGV[4] == 'set' then
    redis.call('SET', KEYS[2], ARGV[5])
  elseif ARGV[4] == 'del' then
    redis.call('DEL', KEYS[2])
  end
  return 1
end

if op == 'start' then
  local fields = redis.call('HMGET', KEYS[1], 'copy', 'role', 'phase', 'started', 'live')
  local outcome
  if not fields[1] then
    if ARGV[2] ~= '1' then
      return {'none'}
    end
    redis.call('HSET', KEYS[1], 'copy', '0', 'role', 'origin', 'phase', 'complete', 'exact', '1',
      'peer', '', 'at', now, 'started', '0', 'started_at', now, 'live', '0')
    outcome = 'created'
  elseif (fields[2] == 'target' and fields[3] == 'copying') or fields[3] == 'deleting'
      or fields[3] == 'deleted' then
    outcome = 'refused'
  elseif fields[4] == fields[1] then
    outcome = 'again'
  else
    -- The copies this side went live after: this one is added, the oldest dropped past 16.
    local live = {}
    for copy in string.gmatch(fields[5] or '', '[^,]+') do
      if copy ~= fields[1] then
        live[#live + 1] = copy
      end
    end
    live[#live + 1] = fields[1]
    while #live > 16 do
      table.remove(live, 1)
    end
    redis.call('HSET', KEYS[1], 'started', fields[1], 'started_at', now, 'live',
      table.concat(live, ','))
    outcome = 'stamped'
  end
  local out = {outcome}
  for _, v in ipairs(redis.call('HGETALL', KEYS[1])) do
    out[#out + 1] = v
  end
  return out
end

return redis.error_reply('ERR lifecycle: unknown operation ' .. tostring(op))
