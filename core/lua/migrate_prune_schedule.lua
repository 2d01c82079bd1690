-- migrate_prune_schedule: turns a schedule the source no longer holds into a deleted marker
-- that keeps its token and holder, so a stale writer with a lower token stays refused. In the
-- cluster layout a marker leaves its bucket index, as the store's delete does.
-- KEYS[1] the schedule record (hash: token, holder, data, deleted)
-- KEYS[2..] the bucket index (cluster layout only; no key in the legacy layout)
-- ARGV[1] '1' for a dry run: nothing is written
-- ARGV[2] the schedule's id: its index member (cluster layout only)
-- Returns 1 when it became a marker (or would, in a dry run), 0 when it already was one or is
-- gone, -1 when it is not a hash (left as it is).
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return -1
end
if redis.call('HGET', KEYS[1], 'deleted') == '1' then
  return 0
end
if ARGV[1] ~= '1' then
  redis.call('HSET', KEYS[1], 'deleted', '1')
  redis.call('HDEL', KEYS[1], 'data')
  if KEYS[2] then
    redis.call('ZREM', KEYS[2], ARGV[2])
  end
end
return 1
