-- message_items: reads messages of a chat by id, each with its log entry, so a message shows
-- only while both its item and its log entry exist.
-- KEYS[1] the chat's message log (sorted set: member = message id, score = time in ms)
-- KEYS[2..] the message items, one per id of ARGV, in the same order
-- ARGV[1..] the message ids
-- Returns an array of {id, time in ms, payload}, in ARGV order, for the ids that are in the log
-- and have an item; the others are left out. The time is the score's floor, as `message_page`
-- gives it (a log another program wrote may score 1000.5).
local log = KEYS[1]
local out = {}
for i = 1, #ARGV do
  local score = redis.call('ZSCORE', log, ARGV[i])
  if score then
    local payload = redis.call('GET', KEYS[i + 1])
    if payload then
      out[#out + 1] = {ARGV[i], math.floor(tonumber(score)), payload}
    end
  end
end
return out
