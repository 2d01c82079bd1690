-- extend_if_holder: renews the TTL of a lock or leadership, only for its current holder.
-- KEYS[1] the holder key (string: the owner id, with a TTL)
-- ARGV[1] owner id
-- ARGV[2] new TTL in ms
-- Returns 1 when renewed, 0 when the owner no longer holds it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
