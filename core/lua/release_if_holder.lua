-- release_if_holder: releases a lock or leadership, only for its current holder. The fence or
-- term counter stays, so the next grant still gets a higher number.
-- KEYS[1] the holder key (string: the owner id, with a TTL)
-- ARGV[1] owner id
-- Returns 1 when released, 0 when the owner did not hold it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
