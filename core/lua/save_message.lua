-- save_message: stores one message and its log entry together, so an item never exists without
-- its log entry.
-- KEYS[1] the chat's message log (sorted set: member = message id, score = time in ms)
-- KEYS[2] the message item (string)
-- ARGV[1] message id
-- ARGV[2] message time in ms
-- ARGV[3] message payload
-- Returns 1 when the message is new, 0 when it replaced a stored one.
local added = redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('SET', KEYS[2], ARGV[3])
return added
