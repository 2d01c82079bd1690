-- migrate_restore: restores keys that keep their names and types (conversations, durability
-- tables) from DUMP payloads, with their remaining time to live. An existing key wins unless
-- overwrite is set.
-- KEYS[1..] the keys
-- ARGV[1] '1' to overwrite, else '0'
-- ARGV[2] '1' for a dry run: nothing is written
-- ARGV[3..] per key: the DUMP payload and the remaining ttl in ms (0 for none)
-- Returns a code per key: 0 kept, 1 copied, 2 overwritten.
local overwrite, dry = ARGV[1] == '1', ARGV[2] == '1'
local codes = {}
for i, key in ipairs(KEYS) do
  local exists = redis.call('EXISTS', key) == 1
  if exists and not overwrite then
    codes[i] = 0
  else
    codes[i] = exists and 2 or 1
    if not dry then
      redis.call('RESTORE', key, ARGV[i * 2 + 2], ARGV[i * 2 + 1], 'REPLACE')
    end
  end
end
return codes
