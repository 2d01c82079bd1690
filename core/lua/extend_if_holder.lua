-- extend_if_holder: renews the TTL of a lock or leadership, only for its current holder.
-- KEYS[1] the holder key (string: the owner id, with a TTL)
-- KEYS[2] (a leadership's guard) the term counter: then only in the term ARGV[3], so that a
--         guard of an earlier term does not pass for the holder of the later one
-- ARGV[1] owner id
-- ARGV[2] new TTL in ms
-- ARGV[3] (with KEYS[2]) the term, as the counter's decimal text
-- Returns 1 when renewed, 0 when the owner no longer holds it (or not in that term).
if redis.call('GET', KEYS[1]) == ARGV[1]
    and (#KEYS < 2 or redis.call('GET', KEYS[2]) == ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
