-- migrate_members: asks many sorted sets whether they hold a member, in one call: which logs
-- and drains name a message item.
-- KEYS[1..] the sorted sets
-- ARGV[1..] the member to look for in the key of the same index
-- Returns 1 or 0 per key: whether it holds the member.
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = redis.call('ZSCORE', key, ARGV[i]) and 1 or 0
end
return out
