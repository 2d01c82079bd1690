-- delete_indexed_chunk: deletes several values of one index and their members, together.
-- KEYS[1] the index (sorted set)
-- KEYS[2..] the values, one per member of ARGV, in the same order
-- ARGV[1..] the index members
-- Returns how many values existed.
local index = KEYS[1]
-- While the index's slot is migrating, the source refuses any command on a key of the slot
-- that does not exist (it counts as moved), halfway through the script. A key is therefore
-- never touched once it may be gone: the index's size is counted down (the last removal
-- empties it, and Redis deletes it), and a value named twice is deleted once.
local left = redis.call('ZCARD', index)
local gone = {}
local deleted = 0
for i = 1, #ARGV do
  if left > 0 then
    left = left - redis.call('ZREM', index, ARGV[i])
  end
  local value = KEYS[i + 1]
  if not gone[value] then
    gone[value] = true
    deleted = deleted + redis.call('DEL', value)
  end
end
return deleted
