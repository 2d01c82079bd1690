-- migrate_drop: deletes migrated messages from the source, each item with its log member, so a
-- run killed between two calls leaves no member without its item and no item without its member.
-- KEYS[1] the log (or drain)
-- KEYS[2..] the items, in the order of the ids
-- ARGV[1..] the ids (log members)
-- Returns the number of members removed.
local removed = 0
for i, id in ipairs(ARGV) do
  local item = KEYS[i + 1]
  redis.call('DEL', item)
  removed = removed + redis.call('ZREM', KEYS[1], id)
end
return removed
