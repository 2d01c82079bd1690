-- migrate_messages: writes messages of one chat (one slot in the cluster layout): each item and
-- its member in the chat's log (or drain) together. An existing item and an existing member
-- keep their value and score unless overwrite is set (an overwrite that finds the same value
-- and score keeps them). A message whose item another message of
-- the run writes (an id in both a chat's log and its drain; the legacy layout's shared item)
-- adds only its member, so each item is written once whatever the order.
-- KEYS[1] the log (or the drain of an interrupted delete)
-- KEYS[2..] the items, in the order of the entries
-- ARGV[1] '1' to overwrite, else '0'
-- ARGV[2] '1' for a dry run: nothing is written
-- ARGV[3..] per message: id (the log member), score (time in ms), value, and '1' to write the
--         item or '0' for the member only
-- Returns a code per message: 0 kept (the item, or for a member only the member, existed; with
-- overwrite: held the same value and score),
-- 1 copied, 2 overwritten; -1 for every message when the log is not a sorted set (left as it
-- is).
local overwrite, dry = ARGV[1] == '1', ARGV[2] == '1'
local codes = {}
local n = (#ARGV - 2) / 4
local log_kind = redis.call('TYPE', KEYS[1])['ok']
if log_kind ~= 'zset' and log_kind ~= 'none' then
  for i = 1, n do
    codes[i] = -1
  end
  return codes
end
for i = 1, n do
  local at = 2 + (i - 1) * 4
  local id, score, value, with_item = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4] == '1'
  local item = KEYS[i + 1]
  local exists, same
  local stored_score = redis.call('ZSCORE', KEYS[1], id)
  if with_item then
    local kind = redis.call('TYPE', item)['ok']
    exists = kind ~= 'none'
    same = kind == 'string' and stored_score ~= false
      and tonumber(stored_score) == tonumber(score) and redis.call('GET', item) == value
  else
    exists = stored_score ~= false
    same = exists and tonumber(stored_score) == tonumber(score)
  end
  if exists and (same or not overwrite) then
    codes[i] = 0
    if not dry then
      redis.call('ZADD', KEYS[1], 'NX', score, id)
    end
  else
    codes[i] = exists and 2 or 1
    if not dry then
      if with_item then
        redis.call('SET', item, value)
      end
      redis.call('ZADD', KEYS[1], score, id)
    end
  end
end
return codes
