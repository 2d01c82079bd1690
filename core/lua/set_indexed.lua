-- set_indexed: stores a record and its member in the index of its bucket, together.
-- KEYS[1] the record (string)
-- KEYS[2] the index (sorted set: score 0, member = raw id, listed in byte order)
-- ARGV[1] the index member (the raw id)
-- ARGV[2] the value
-- Returns 1 when the member is new in the index, else 0.
redis.call('SET', KEYS[1], ARGV[2])
return redis.call('ZADD', KEYS[2], 0, ARGV[1])
