-- migrate_drop: deletes messages from a log (or drain), each member with its item in one call,
-- so a run killed between two calls leaves no member without its item. An item another log
-- still names (the legacy layout's shared item, or an id in both a chat's log and its drain)
-- stays: only the member goes.
-- KEYS[1] the log (or drain)
-- KEYS[2..] the items, in the order of the ids
-- ARGV[1..] per message: the id (the log member), then '1' to delete its item or '0' to keep it
-- Returns the number of members removed.
-- While the slot is migrating, the source refuses any command on a key of the slot that does
-- not exist (it counts as moved), halfway through the script. A key is therefore never touched
-- once it may be gone: the log's size is counted down (the last removal empties it, and Redis
-- deletes it), and an item named twice is deleted once.
local left = redis.call('ZCARD', KEYS[1])
local gone = {}
local removed = 0
for i = 1, #ARGV / 2 do
  local item = KEYS[i + 1]
  if ARGV[i * 2] == '1' and not gone[item] then
    gone[item] = true
    redis.call('DEL', item)
  end
  if left > 0 then
    local n = redis.call('ZREM', KEYS[1], ARGV[i * 2 - 1])
    left = left - n
    removed = removed + n
  end
end
return removed
