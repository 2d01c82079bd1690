-- acquire_fenced: takes a lock or a leadership for an owner and hands out the next fence (or
-- term), which strictly increases per key, forever.
-- KEYS[1] the holder key (string: the owner id, with a TTL)
-- KEYS[2] the fence or term counter (integer string, never deleted)
-- ARGV[1] owner id
-- ARGV[2] TTL in ms
-- ARGV[3] 1 when the current holder may take it again (keeps its fence, renews the TTL), else 0
-- Returns the fence when granted, or nil when another owner holds it (or, without re-entry,
-- when the owner itself holds it).
local holder = redis.call('GET', KEYS[1])
if holder then
  if holder == ARGV[1] and ARGV[3] == '1' then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(redis.call('GET', KEYS[2]) or '0')
  end
  return false
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return redis.call('INCR', KEYS[2])
