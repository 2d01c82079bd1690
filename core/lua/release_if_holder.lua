-- release_if_holder: releases a lock or leadership, only for its current holder. The fence or
-- term counter stays, so the next grant still gets a higher number.
-- KEYS[1] the holder key (string: the owner id, with a TTL)
-- KEYS[2] (a leadership's guard) the term counter: then only in the term ARGV[2], so that a
--         guard of an earlier term (lost, then won again by the same replica) cannot resign
--         the later one
-- ARGV[1] owner id
-- ARGV[2] (with KEYS[2]) the term, as the counter's decimal text
-- Returns 1 when released, 0 when the owner did not hold it (or not in that term).
if redis.call('GET', KEYS[1]) == ARGV[1]
    and (#KEYS < 2 or redis.call('GET', KEYS[2]) == ARGV[2]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
