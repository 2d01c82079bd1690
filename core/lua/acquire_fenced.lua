-- acquire_fenced: takes a lock or a leadership for an owner and hands out the next fence (or
-- term), which strictly increases per key, forever.
-- KEYS[1] the holder key (string: the owner id, with a TTL)
-- KEYS[2] the fence or term counter (integer string, never deleted)
-- ARGV[1] owner id
-- ARGV[2] TTL in ms
-- ARGV[3] 1 when the current holder may take it again (keeps its fence, renews the TTL), else 0
-- Returns the fence as its stored decimal text when granted (0 for a holder taking it again
-- whose counter is missing), or nil when another owner holds it (or, without re-entry, when
-- the owner itself holds it). A counter that cannot be incremented (at the i64 maximum, or not
-- an integer) is INCR's error, and nothing is taken.
-- Fences are never Lua numbers here: an integer reply reaches Lua as a double, which rounds
-- integers past 2^53, so the exact value is the counter's own text.
local holder = redis.call('GET', KEYS[1])
if holder then
  if holder == ARGV[1] and ARGV[3] == '1' then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return redis.call('GET', KEYS[2]) or 0
  end
  return false
end
-- The counter first: an INCR that fails stops the script before the holder key is written, so
-- an error never leaves a lock nobody was told about.
redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return redis.call('GET', KEYS[2])
