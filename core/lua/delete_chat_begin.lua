-- delete_chat_begin: starts (or resumes) deleting a chat's messages: moves the log into the
-- drain, so every message saved from now on goes to a fresh log and survives the delete.
-- When the drain already exists, an earlier delete was interrupted: the log (messages saved
-- since) is merged into it, since this delete began after they were saved.
-- KEYS[1] the chat's message log (sorted set: member = message id, score = time in ms)
-- KEYS[2] the chat's drain (sorted set, same members and scores)
-- ARGV[1] the chunk size: how many ids to return
-- Returns the first ARGV[1] ids of the drain (an empty array when there is nothing to delete).
local log, drain = KEYS[1], KEYS[2]
if redis.call('EXISTS', log) == 1 then
  if redis.call('EXISTS', drain) == 1 then
    redis.call('ZUNIONSTORE', drain, 2, drain, log, 'AGGREGATE', 'MAX')
    redis.call('DEL', log)
  else
    redis.call('RENAME', log, drain)
  end
end
return redis.call('ZRANGE', drain, 0, tonumber(ARGV[1]) - 1)
