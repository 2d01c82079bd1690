-- durable: one durability table, all in one slot ({durable:<table>}): an inbound journal that
-- deduplicates processing, and an outbox with idempotent enqueue, claim by instance with a
-- visibility timeout, ack, and recovery of work claimed by an instance that stopped. begin and
-- ack remember which instance made them, so a caller whose reply was lost can call again and
-- learn that its first call went through, instead of being told someone else has it.
-- KEYS[1] journal: processed inbound ids (sorted set, score = server ms first seen)
-- KEYS[2] items: outbox payloads (hash: key -> payload)
-- KEYS[3] ready: outbox keys ready to claim (sorted set, score = enqueue order)
-- KEYS[4] seq: enqueue counter (integer string)
-- KEYS[5] claims: claimed outbox keys (sorted set, score = visibility deadline in server ms)
-- KEYS[6] owners: claimer of each claimed key (hash: key -> instance id)
-- KEYS[7] done: acked outbox keys (sorted set, score = server ms acked), for enqueue dedup
-- KEYS[8] begun: the instance that began each journal id (hash: id -> instance id), pruned
--         with the journal
-- KEYS[9] acked: the instance that acked each done key (hash: key -> instance id), pruned
--         with done
-- ARGV[1] operation: begin, forget, enqueue, claim, ack or recover
-- ARGV[2] the inbound id (begin, forget), outbox key (enqueue, ack) or instance id (claim,
--         recover)
-- ARGV[3] dedup window in ms (begin, enqueue), visibility timeout in ms (claim), or instance
--         id (ack)
-- ARGV[4] instance id (begin), payload (enqueue) or how many to claim at most (claim)
-- Returns, by operation:
--   begin: 1 when the id is new in the window (process it), 2 when this instance began it
--          within the window (a retried begin: still this instance's), 0 when another
--          instance began it (a duplicate delivery);
--   forget: 1 when the id was removed (processing failed; it may be processed again);
--   enqueue: 1 when queued, 0 when the key is queued, claimed or acked within the window;
--   claim: a flat array key1, payload1, key2, payload2, ... of the claimed sends;
--   ack: 1 when acked, 2 when this instance already acked it (a retried ack; kept for the
--        dedup window of the enqueue calls), 0 when the instance does not hold the claim;
--   recover: how many claims of the instance went back to the queue.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op = ARGV[1]

-- Puts claims whose visibility deadline passed back at the head of the queue.
local function requeue_expired()
  local expired = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
  for _, key in ipairs(expired) do
    redis.call('ZREM', KEYS[5], key)
    redis.call('HDEL', KEYS[6], key)
    redis.call('ZADD', KEYS[3], 0, key)
  end
end

if op == 'begin' then
  local cutoff = now - tonumber(ARGV[3])
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)) do
    redis.call('HDEL', KEYS[8], id)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)
  if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
    if redis.call('HGET', KEYS[8], ARGV[2]) == ARGV[4] then
      return 2
    end
    return 0
  end
  redis.call('ZADD', KEYS[1], now, ARGV[2])
  redis.call('HSET', KEYS[8], ARGV[2], ARGV[4])
  return 1
end

if op == 'forget' then
  redis.call('HDEL', KEYS[8], ARGV[2])
  return redis.call('ZREM', KEYS[1], ARGV[2])
end

if op == 'enqueue' then
  local cutoff = now - tonumber(ARGV[3])
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', cutoff)) do
    redis.call('HDEL', KEYS[9], key)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', cutoff)
  if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 or redis.call('ZSCORE', KEYS[7], ARGV[2]) then
    return 0
  end
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[4])
  redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[4]), ARGV[2])
  return 1
end

if op == 'claim' then
  requeue_expired()
  local out = {}
  local popped = redis.call('ZPOPMIN', KEYS[3], tonumber(ARGV[4]))
  for i = 1, #popped, 2 do
    local key = popped[i]
    local payload = redis.call('HGET', KEYS[2], key)
    if payload then
      redis.call('ZADD', KEYS[5], now + tonumber(ARGV[3]), key)
      redis.call('HSET', KEYS[6], key, ARGV[2])
      out[#out + 1] = key
      out[#out + 1] = payload
    end
  end
  return out
end

if op == 'ack' then
  -- The claimer is whoever the owners hash names. A claim past its deadline that no claim has
  -- requeued yet still belongs to its instance (nobody else can have it), so its ack counts;
  -- once requeued, the old claimer's ack is refused and the send belongs to the next claimer.
  if redis.call('HGET', KEYS[6], ARGV[2]) ~= ARGV[3] then
    -- A done key is in no claim (enqueue refuses it while it is done): an ack by the same
    -- instance is a retry of the ack that made it done.
    if redis.call('ZSCORE', KEYS[7], ARGV[2]) and redis.call('HGET', KEYS[9], ARGV[2]) == ARGV[3] then
      return 2
    end
    return 0
  end
  redis.call('HDEL', KEYS[2], ARGV[2])
  redis.call('HDEL', KEYS[6], ARGV[2])
  redis.call('ZREM', KEYS[5], ARGV[2])
  redis.call('ZADD', KEYS[7], now, ARGV[2])
  redis.call('HSET', KEYS[9], ARGV[2], ARGV[3])
  return 1
end

if op == 'recover' then
  local owners = redis.call('HGETALL', KEYS[6])
  local moved = 0
  for i = 1, #owners, 2 do
    if owners[i + 1] == ARGV[2] then
      redis.call('ZREM', KEYS[5], owners[i])
      redis.call('HDEL', KEYS[6], owners[i])
      redis.call('ZADD', KEYS[3], 0, owners[i])
      moved = moved + 1
    end
  end
  return moved
end

return redis.error_reply('ERR durable: unknown operation ' .. tostring(op))
