-- delete_indexed: deletes a value and its index member, together.
-- KEYS[1] the value
-- KEYS[2] the index (sorted set)
-- ARGV[1] the index member
-- Returns 1 when the value existed, else 0.
local deleted = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return deleted
