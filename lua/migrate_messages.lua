-- migrate_messages: writes messages of one chat (one slot in the cluster layout): each item and
-- its member in the chat's log (or drain) together. An existing item and an existing member
-- keep their value and score unless overwrite is set.
-- KEYS[1] the log (or the drain of an interrupted delete)
-- KEYS[2..] the items, in the order of the entries
-- ARGV[1] '1' to overwrite, else '0'
-- ARGV[2] '1' for a dry run: nothing is written
-- ARGV[3..] per message: id (the log member), score (time in ms), value
-- Returns a code per message: 0 kept (the item existed), 1 copied, 2 overwritten.
local overwrite, dry = ARGV[1] == '1', ARGV[2] == '1'
local codes = {}
local n = (#ARGV - 2) / 3
for i = 1, n do
  local id, score, value = ARGV[i * 3], ARGV[i * 3 + 1], ARGV[i * 3 + 2]
  local item = KEYS[i + 1]
  local exists = redis.call('EXISTS', item) == 1
  if exists and not overwrite then
    codes[i] = 0
    if not dry then
      redis.call('ZADD', KEYS[1], 'NX', score, id)
    end
  else
    codes[i] = exists and 2 or 1
    if not dry then
      redis.call('SET', item, value)
      redis.call('ZADD', KEYS[1], score, id)
    end
  end
end
return codes
