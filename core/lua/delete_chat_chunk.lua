-- delete_chat_chunk: deletes one chunk of a chat's drain atomically: each id still in the drain
-- leaves it together with its item. An item whose id is back in the log (saved again after the
-- delete began) is kept.
-- KEYS[1] the chat's drain (sorted set)
-- KEYS[2] the chat's message log (sorted set)
-- KEYS[3..] the message items, one per id of ARGV[2..], in the same order
-- ARGV[1] the chunk size: how many ids to return for the next chunk
-- ARGV[2..] the message ids of this chunk
-- Returns {removed, next}: how many ids left the drain, and the next ARGV[1] ids of the drain.
local drain, log = KEYS[1], KEYS[2]
local removed = 0
for i = 2, #ARGV do
  if redis.call('ZREM', drain, ARGV[i]) == 1 then
    removed = removed + 1
    if not redis.call('ZSCORE', log, ARGV[i]) then
      redis.call('DEL', KEYS[i + 1])
    end
  end
end
return {removed, redis.call('ZRANGE', drain, 0, tonumber(ARGV[1]) - 1)}
