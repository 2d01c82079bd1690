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
-- KEYS[10] window: the longest dedup window in ms that begin and enqueue calls asked for
--          lately (string; it expires one to two of its windows after the last call that
--          asked for it), the age past which journal and done entries are pruned
-- ARGV[1] operation: begin, forget, enqueue, claim, ack or recover
-- ARGV[2] the inbound id (begin, forget), outbox key (enqueue, ack) or instance id (claim,
--         recover)
-- ARGV[3] dedup window in ms (begin, enqueue), visibility timeout in ms (claim), or instance
--         id (forget, ack)
-- ARGV[4] instance id (begin), payload (enqueue) or how many to claim at most (claim)
-- Returns, by operation:
--   begin: 1 when the id is new in the window (process it), 2 when this instance began it
--          within the window (a retried begin: still this instance's), 0 when another
--          instance began it (a duplicate delivery);
--   forget: 1 when the id was removed (processing failed; it may be processed again), 0
--           when it is not there or another instance began it;
--   enqueue: 1 when queued, 0 when the key is queued, claimed or acked within the window;
--   claim: a flat array key1, payload1, key2, payload2, ... of the claimed sends;
--   ack: 1 when acked, 2 when this instance already acked it (a retried ack; kept for the
--        dedup window of the enqueue calls), 0 when the instance does not hold the claim;
--   recover: how many claims of the instance went back to the queue.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op = ARGV[1]

-- While the table's slot is migrating, the source refuses any command on a key of the slot
-- that does not exist (it counts as moved), halfway through the script; and Redis deletes a
-- hash or sorted set that a removal empties. So no key is touched after a removal may have
-- emptied it: every call reads first, writes next, and removes last, and the removals count
-- down what each key holds (read once, just before the first removal) and stop once it is gone:
-- a removal from a missing key would have been a no-op anyway.
local left = {}

-- Removes from KEYS[i] with `remove` (ZREM or HDEL) through `count` (ZCARD or HLEN), unless a
-- removal of this call already emptied it.
local function removal(i, count, remove)
  return function(member)
    if left[i] == nil then
      left[i] = count()
    end
    if left[i] > 0 then
      left[i] = left[i] - remove(member)
    end
  end
end
local unjournal = removal(1, function() return redis.call('ZCARD', KEYS[1]) end,
  function(id) return redis.call('ZREM', KEYS[1], id) end)
local unbegin = removal(8, function() return redis.call('HLEN', KEYS[8]) end,
  function(id) return redis.call('HDEL', KEYS[8], id) end)
local undone = removal(7, function() return redis.call('ZCARD', KEYS[7]) end,
  function(key) return redis.call('ZREM', KEYS[7], key) end)
local unack = removal(9, function() return redis.call('HLEN', KEYS[9]) end,
  function(key) return redis.call('HDEL', KEYS[9], key) end)
local unclaim = removal(5, function() return redis.call('ZCARD', KEYS[5]) end,
  function(key) return redis.call('ZREM', KEYS[5], key) end)
local unown = removal(6, function() return redis.call('HLEN', KEYS[6]) end,
  function(key) return redis.call('HDEL', KEYS[6], key) end)

-- Whether a sorted set holds a member scored after the cutoff: what it holds once pruned.
local function in_window(score, cutoff)
  return score and tonumber(score) > cutoff
end

-- The longest window of the calls lately, and how long it is kept still (read with the other
-- reads, first).
local function longest_window()
  return tonumber(redis.call('GET', KEYS[10]) or '0'), redis.call('PTTL', KEYS[10])
end

-- The bound below which entries are pruned (a `ZRANGEBYSCORE` max, exclusive): the longest
-- window of the calls lately, not this call's own, so that a replica configured with a
-- shorter window (or a deploy that shortens it) does not remove the entries the others still
-- deduplicate against. Writes this call's window when it is longer, or as long and kept for
-- less than one more window (a write: after the reads, before any removal; not at every call,
-- which would replicate a write each time).
local function prune_below(window, longest, kept)
  if window > longest or (window == longest and kept < window) then
    local text, ttl = string.format('%.0f', window), string.format('%.0f', 2 * window)
    redis.call('SET', KEYS[10], text, 'PX', ttl)
    longest = window
  end
  return string.format('(%.0f', now - longest)
end

-- At most this many stale entries go per call: after a quiet spell as long as the window, a
-- whole window's worth of ids would otherwise go in one call, holding the master that long
-- (about a second per million ids). Every call adds at most one, so the backlog shrinks.
local PRUNE_PER_CALL = 100

if op == 'begin' then
  -- Pruning the journal may empty it and begun: the id is looked up, and written, first.
  local window = tonumber(ARGV[3])
  local cutoff = now - window
  local longest, kept = longest_window()
  local result = 1
  if in_window(redis.call('ZSCORE', KEYS[1], ARGV[2]), cutoff) then
    result = redis.call('HGET', KEYS[8], ARGV[2]) == ARGV[4] and 2 or 0
  else
    redis.call('ZADD', KEYS[1], now, ARGV[2])
    redis.call('HSET', KEYS[8], ARGV[2], ARGV[4])
  end
  local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', prune_below(window, longest, kept),
    'LIMIT', 0, PRUNE_PER_CALL)
  for _, id in ipairs(stale) do
    unbegin(id)
    unjournal(id)
  end
  return result
end

if op == 'forget' then
  -- Only for the instance that began it: a forget retried after its reply was lost, or sent
  -- by an instance slower than the window, would otherwise remove the begin of the instance
  -- the id was redelivered to since, and a third delivery be processed again.
  if redis.call('HGET', KEYS[8], ARGV[2]) ~= ARGV[3] then
    return 0
  end
  redis.call('HDEL', KEYS[8], ARGV[2])
  return redis.call('ZREM', KEYS[1], ARGV[2])
end

if op == 'enqueue' then
  -- Pruning done may empty it and acked: done is read, and the send queued, first.
  local window = tonumber(ARGV[3])
  local cutoff = now - window
  local longest, kept = longest_window()
  local acked = redis.call('ZSCORE', KEYS[7], ARGV[2])
  local result = 0
  if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 0 and not in_window(acked, cutoff) then
    redis.call('HSET', KEYS[2], ARGV[2], ARGV[4])
    redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[4]), ARGV[2])
    result = 1
  end
  local stale = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', prune_below(window, longest, kept),
    'LIMIT', 0, PRUNE_PER_CALL)
  -- A key acked past this call's window but within a longer one is queued again: a new send,
  -- whose ack is no longer the earlier one's (a done key is in no queue and no claim).
  if result == 1 and acked then
    stale[#stale + 1] = ARGV[2]
  end
  for _, key in ipairs(stale) do
    unack(key)
    undone(key)
  end
  return result
end

if op == 'claim' then
  -- Claims whose visibility deadline passed go back to the head of the queue. They leave
  -- claims and owners only after the new claims are written (which may empty both); a lapsed
  -- claim claimed again now is simply overwritten.
  local expired = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
  for _, key in ipairs(expired) do
    redis.call('ZADD', KEYS[3], 0, key)
  end
  local out = {}
  local claimed = {}
  local popped = redis.call('ZPOPMIN', KEYS[3], tonumber(ARGV[4]))
  for i = 1, #popped, 2 do
    local key = popped[i]
    local payload = redis.call('HGET', KEYS[2], key)
    if payload then
      redis.call('ZADD', KEYS[5], now + tonumber(ARGV[3]), key)
      redis.call('HSET', KEYS[6], key, ARGV[2])
      claimed[key] = true
      out[#out + 1] = key
      out[#out + 1] = payload
    end
  end
  for _, key in ipairs(expired) do
    if not claimed[key] then
      unclaim(key)
      unown(key)
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
      redis.call('ZADD', KEYS[3], 0, owners[i])
      unclaim(owners[i])
      unown(owners[i])
      moved = moved + 1
    end
  end
  return moved
end

return redis.error_reply('ERR durable: unknown operation ' .. tostring(op))
