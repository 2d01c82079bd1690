-- turn: a chat's turn queue. Replicas take tickets and are served in ticket order; the holder
-- owns the owner key with a TTL. Mutual exclusion rests on the owner key alone, read and
-- written only here, in the chat's slot: a heartbeat probe can make a waiter try a skip, but the
-- skip itself re-checks the served ticket and the owner key atomically. Every call refreshes
-- the idle lifetime of seq, tix, serving and last, so a queue expires only once nobody has
-- called for that long; a counter that expired (or never existed) restarts at the server's
-- time in ms x 1000, above every ticket of its earlier life (docs/coordination.md).
-- KEYS[1] seq: the ticket counter (integer string, with the idle lifetime): tickets are the
--         turn's fences
-- KEYS[2] tix: tickets not yet done (sorted set: member = enc(replica)|enc(request id)[#n],
--         score = ticket; with the idle lifetime)
-- KEYS[3] serving: the ticket being served (hash: ticket, since = server ms it became due;
--         with the idle lifetime)
-- KEYS[4] owner: the holder, "<ticket>|<member>", with the owner TTL (PX)
-- KEYS[5] last: the last grant, "<ticket>|<member>" (with the idle lifetime)
-- KEYS[6..] optional, 'skip' in the legacy layout only: the heartbeat key of the skipped
--         member's replica, read here in the same atomic step
-- ARGV[1] operation: take, poll, skip, release or extend
-- ARGV[2] ticket: the caller's (poll, release, extend) or the served one to skip (skip); take
--         ignores it
-- ARGV[3] member: the caller's (take, poll, release, extend) or the one to skip (skip)
-- ARGV[4] owner TTL in ms (poll, extend)
-- ARGV[5] claim timeout in ms (poll): a served ticket that has not claimed its turn this long
--         after it became due is skipped
-- ARGV[6] idle lifetime in ms: seq, tix, serving and last expire this long after the last
--         call on the queue
-- Returns, by operation:
--   take: the ticket (the same one again for a retried take of a member still queued); an
--         error, before anything is written, when the counter would pass 2^53 - 1 (tickets
--         must stay exact as Lua numbers);
--   poll: {status, server ms, member, ticket[, reason]}:
--         'granted' member ticket: the caller holds the turn (owner key set with the TTL);
--         'skipped' '' ticket: the caller's ticket left the queue: take a new one;
--         'wait' owner-member-or-'' served-ticket: not yet;
--         'probe' member ticket: the caller is next in line, and the served ticket (held or
--           not yet claimed) belongs to member: skip it if its replica's heartbeat expired;
--         'retry' member ticket reason: this call skipped the served ticket ('unclaimed': it
--           did not claim in time; 'expired': its holder's owner key ran out; 'gone': it had
--           left the queue, member ''): poll again;
--   skip: 1 when the served ticket was skipped (its owner key, if any, deleted), 0 when the
--         queue moved on, the ticket is held by another member or (legacy) the replica lives;
--   release: 1 when the held turn was released, 2 when a ticket that did not hold the turn
--         (waiting, or held and expired) was withdrawn, 0 when the ticket was not queued;
--   extend: 1 when renewed, 0 when the ticket no longer holds the turn.
-- Tickets are integer replies: every ticket is below 2^53, where a Lua number is exact.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op = ARGV[1]
local ticket = tonumber(ARGV[2])
local member = ARGV[3]
-- The owner value of (ticket, member), from the caller's decimal text of the ticket.
local mine = ARGV[2] .. '|' .. member

-- Tickets are about 2^50 (server ms x 1000), and Lua turns numbers into text with %.14g
-- ("1.767225600000123e+15" loses digits, "1.8e+15" never equals a stored "1800000000000000"),
-- so every number that becomes text, or a command argument, goes through here.
local function fmt(x)
  return string.format('%.0f', x)
end

-- The largest ticket handed out: past it, neighbouring integers share one double.
local MAX_TICKET = 2 ^ 53 - 1

local function serving_ticket()
  return tonumber(redis.call('HGET', KEYS[3], 'ticket') or '-1')
end

-- The ticket of a member, or nil.
local function ticket_of(m)
  local score = redis.call('ZSCORE', KEYS[2], m)
  return score and tonumber(score)
end

-- Splits an owner value "<ticket>|<member>".
local function split(owner)
  local bar = string.find(owner, '|', 1, true)
  if not bar then
    return -1, owner
  end
  return tonumber(string.sub(owner, 1, bar - 1)), string.sub(owner, bar + 1)
end

-- Whether this call emptied tix: Redis deletes an empty sorted set, and while the chat's slot
-- is migrating the source refuses any later command on a key of the slot that does not exist
-- (it counts as moved), halfway through the script. So once tix may be gone, nothing touches
-- it again: every later touch would be a no-op on a missing key anyway.
local tix_gone = false

-- Withdraws a member's ticket. Whether that empties tix is read before the removal.
local function withdraw(m)
  local queued = redis.call('ZCARD', KEYS[2])
  if queued - redis.call('ZREM', KEYS[2], m) == 0 then
    tix_gone = true
  end
end

-- Ends every ticket up to `done` and serves the first ticket after it: the oldest queued one,
-- or, with an empty queue, the counter's next ticket (a take into an empty queue serves its
-- own ticket anyway). The claim clock of the new served ticket starts now. The next ticket is
-- read before the older ones are removed: with none left, the removal empties tix.
local function advance(done)
  local next_ticket
  if not tix_gone then
    local head = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. fmt(done), '+inf', 'WITHSCORES',
      'LIMIT', 0, 1)
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', fmt(done))
    if #head > 0 then
      next_ticket = tonumber(head[2])
    else
      tix_gone = true
    end
  end
  if not next_ticket then
    next_ticket = tonumber(redis.call('GET', KEYS[1]) or '0') + 1
  end
  redis.call('HSET', KEYS[3], 'ticket', fmt(next_ticket), 'since', fmt(now))
end

local function take()
  -- Idempotent by member: a take whose reply was lost is retried with the same member and gets
  -- the same ticket instead of leaving an orphan in the queue.
  local existing = ticket_of(member)
  if existing then
    return existing
  end
  -- No queued ticket means nobody holds the turn either (a holder's ticket stays queued until
  -- it is released or skipped, and the owner key lives shorter than the queue).
  local alone = redis.call('ZCARD', KEYS[2]) == 0
  local taken
  local seq = redis.call('GET', KEYS[1])
  if seq then
    local last = tonumber(seq)
    if last and last >= MAX_TICKET then
      return redis.error_reply('ERR turn: the ticket counter passed 2^53 - 1')
    end
    taken = redis.call('INCR', KEYS[1])
  else
    -- A fresh chat, or a queue idle for its whole lifetime: restart above every ticket the
    -- expired counter handed out. It took at most one ticket per microsecond of server time,
    -- and expired at least the idle lifetime (>= 1 ms) after its last one.
    taken = now * 1000
    redis.call('SET', KEYS[1], fmt(taken))
  end
  redis.call('ZADD', KEYS[2], fmt(taken), member)
  if alone then
    -- Nobody is ahead: serve this ticket at once, its claim clock starting now, so the take's
    -- own first poll is granted.
    redis.call('HSET', KEYS[3], 'ticket', fmt(taken), 'since', fmt(now))
  elseif serving_ticket() < 0 then
    -- The served record is missing (lost): serve the oldest queued ticket.
    advance(-1)
  end
  return taken
end

local function extend()
  if redis.call('GET', KEYS[4]) == mine then
    redis.call('PEXPIRE', KEYS[4], ARGV[4])
    return 1
  end
  return 0
end

local function release()
  local result
  if redis.call('GET', KEYS[4]) == mine then
    redis.call('DEL', KEYS[4])
    result = 1
  elseif ticket_of(member) == ticket then
    result = 2
  else
    return 0
  end
  withdraw(member)
  if serving_ticket() == ticket then
    advance(ticket)
  end
  return result
end

local function skip()
  -- Legacy layout: the heartbeat is checked here, atomically with the skip.
  if KEYS[6] and redis.call('EXISTS', KEYS[6]) == 1 then
    return 0
  end
  -- The probe (cluster layout) ran in another slot, before this call: re-check everything it
  -- was based on. Only the served ticket, still queued for the probed member, is skipped.
  if serving_ticket() ~= ticket or ticket_of(member) ~= ticket then
    return 0
  end
  local owner = redis.call('GET', KEYS[4])
  if owner then
    if owner ~= mine then
      return 0
    end
    redis.call('DEL', KEYS[4])
  end
  advance(ticket)
  return 1
end

local function poll()
  if ticket_of(member) ~= ticket then
    return {'skipped', now, '', ticket}
  end
  local serving = serving_ticket()
  if serving < 0 then
    -- The served record is missing (never written, or lost): serve the oldest queued ticket.
    advance(-1)
    serving = serving_ticket()
  end
  local owner = redis.call('GET', KEYS[4])
  if ticket == serving then
    if not owner or owner == mine then
      -- Granting again to the same owner is what makes a poll whose reply was lost safe to
      -- repeat.
      redis.call('SET', KEYS[4], mine, 'PX', ARGV[4])
      redis.call('SET', KEYS[5], mine)
      return {'granted', now, member, ticket}
    end
    local _, holder = split(owner)
    return {'wait', now, holder, serving}
  end
  if ticket < serving then
    withdraw(member)
    return {'skipped', now, '', ticket}
  end
  -- Waiting. Only the next ticket in line probes the served one, so a queue of N waiters costs
  -- one probe per poll interval, not N.
  local after = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. fmt(serving), '+inf', 'LIMIT', 0, 1)
  local next_in_line = after[1] == member
  if owner then
    local held, holder = split(owner)
    if next_in_line then
      return {'probe', now, holder, held}
    end
    return {'wait', now, holder, serving}
  end
  local head = redis.call('ZRANGEBYSCORE', KEYS[2], fmt(serving), fmt(serving))
  if #head == 0 then
    advance(serving)
    return {'retry', now, '', serving, 'gone'}
  end
  if redis.call('GET', KEYS[5]) == fmt(serving) .. '|' .. head[1] then
    -- The served ticket was granted and its owner key ran out: that holder lost its turn.
    advance(serving)
    return {'retry', now, head[1], serving, 'expired'}
  end
  local since = tonumber(redis.call('HGET', KEYS[3], 'since') or now)
  if now - since > tonumber(ARGV[5]) then
    advance(serving)
    return {'retry', now, head[1], serving, 'unclaimed'}
  end
  if next_in_line then
    return {'probe', now, head[1], serving}
  end
  return {'wait', now, '', serving}
end

local operations = {take = take, extend = extend, release = release, skip = skip, poll = poll}
local run = operations[op]
if not run then
  return redis.error_reply('ERR turn: unknown operation ' .. tostring(op))
end
local result = run()
-- Every call, a waiter's poll as much as a holder's extend, keeps the queue alive: the keys
-- expire together, the idle lifetime after the last call. (PEXPIRE skips a key that does not
-- exist, but tix, once this call emptied it, is not touched at all: see tix_gone. The owner
-- key keeps its own, shorter TTL.)
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if not tix_gone then
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
redis.call('PEXPIRE', KEYS[3], ARGV[6])
redis.call('PEXPIRE', KEYS[5], ARGV[6])
return result
