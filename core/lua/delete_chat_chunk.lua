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
-- The last removal may empty the drain, which Redis then deletes; while the chat's slot is
-- migrating, the source refuses any later command on it (a missing key counts as moved),
-- halfway through the script. So the drain's size is counted down, and an empty drain is not
-- touched again: it has nothing to remove or list.
local left = redis.call('ZCARD', drain)
local removed = 0
for i = 2, #ARGV do
  if left > 0 and redis.call('ZREM', drain, ARGV[i]) == 1 then
    left = left - 1
    removed = removed + 1
    if not redis.call('ZSCORE', log, ARGV[i]) then
      redis.call('DEL', KEYS[i + 1])
    end
  end
end
local next_ids = {}
if left > 0 then
  next_ids = redis.call('ZRANGE', drain, 0, tonumber(ARGV[1]) - 1)
end
return {removed, next_ids}
