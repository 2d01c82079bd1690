-- delete_message: deletes one message: its log entry, its entry in the chat's drain (when a
-- delete_chat is under way) and its item, together.
-- KEYS[1] the chat's message log (sorted set)
-- KEYS[2] the chat's drain, the log being deleted by delete_chat (sorted set)
-- KEYS[3] the message item (string)
-- ARGV[1] the message id
-- Returns 1 when the message was in the log, else 0.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
return removed
