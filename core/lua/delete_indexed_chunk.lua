-- delete_indexed_chunk: deletes several values of one index and their members, together.
-- KEYS[1] the index (sorted set)
-- KEYS[2..] the values, one per member of ARGV, in the same order
-- ARGV[1..] the index members
-- Returns how many values existed.
local index = KEYS[1]
local deleted = 0
for i = 1, #ARGV do
  redis.call('ZREM', index, ARGV[i])
  deleted = deleted + redis.call('DEL', KEYS[i + 1])
end
return deleted
