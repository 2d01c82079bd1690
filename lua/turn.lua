-- turn: a chat's turn queue. Replicas take tickets and are served in ticket order; the holder
-- owns the owner key with a TTL. Mutual exclusion rests on the owner key alone, read and
-- written only here, in the chat's slot: a heartbeat probe can make a waiter try a skip, but the
-- skip itself re-checks the served ticket and the owner key atomically.
-- KEYS[1] seq: the ticket counter (integer string, never deleted): tickets are the turn's fences
-- KEYS[2] tix: tickets not yet done (sorted set: member = enc(replica)|enc(request id)[#n],
--         score = ticket)
-- KEYS[3] serving: the ticket being served (hash: ticket, since = server ms it became due)
-- KEYS[4] owner: the holder, "<ticket>|<member>", with a TTL (PX)
-- KEYS[5] last: the last grant, "<ticket>|<member>" (no TTL)
-- KEYS[6..] optional, 'skip' in the legacy layout only: the heartbeat key of the skipped
--         member's replica, read here in the same atomic step
-- ARGV[1] operation: take, poll, skip, release or extend
-- ARGV[2] ticket: the caller's (poll, release, extend) or the served one to skip (skip); take
--         ignores it
-- ARGV[3] member: the caller's (take, poll, release, extend) or the one to skip (skip)
-- ARGV[4] owner TTL in ms (poll, extend)
-- ARGV[5] claim timeout in ms (poll): a served ticket that has not claimed its turn this long
--         after it became due is skipped
-- Returns, by operation:
--   take: the ticket (the same one again for a retried take of a member still queued);
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
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op = ARGV[1]
local ticket = tonumber(ARGV[2])
local member = ARGV[3]
-- The owner value of (ticket, member). Tickets go out as decimal integers, so the text of a
-- ticket is the same whether it comes from ARGV or from tostring of a number below 2^53.
local mine = ARGV[2] .. '|' .. member

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

-- Ends every ticket up to `done` and serves the first ticket after it: the oldest queued one,
-- or the next one to be taken. The claim clock of the new served ticket starts now.
local function advance(done)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', done)
  local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  local next_ticket
  if #head > 0 then
    next_ticket = tonumber(head[2])
  else
    next_ticket = tonumber(redis.call('GET', KEYS[1]) or '0') + 1
  end
  redis.call('HSET', KEYS[3], 'ticket', next_ticket, 'since', now)
end

if op == 'take' then
  -- Idempotent by member: a take whose reply was lost is retried with the same member and gets
  -- the same ticket instead of leaving an orphan in the queue.
  local existing = ticket_of(member)
  if existing then
    return existing
  end
  local taken = redis.call('INCR', KEYS[1])
  redis.call('ZADD', KEYS[2], taken, member)
  local serving = serving_ticket()
  if serving < 0 then
    -- No served ticket yet (a fresh chat): serve the oldest queued ticket.
    advance(-1)
  elseif serving == taken then
    -- The queue was empty and waited for this ticket: its claim clock starts now, not when the
    -- queue emptied.
    redis.call('HSET', KEYS[3], 'since', now)
  end
  return taken
end

if op == 'extend' then
  if redis.call('GET', KEYS[4]) == mine then
    redis.call('PEXPIRE', KEYS[4], ARGV[4])
    return 1
  end
  return 0
end

if op == 'release' then
  local result
  if redis.call('GET', KEYS[4]) == mine then
    redis.call('DEL', KEYS[4])
    result = 1
  elseif ticket_of(member) == ticket then
    result = 2
  else
    return 0
  end
  redis.call('ZREM', KEYS[2], member)
  if serving_ticket() == ticket then
    advance(ticket)
  end
  return result
end

if op == 'skip' then
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

if op == 'poll' then
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
    redis.call('ZREM', KEYS[2], member)
    return {'skipped', now, '', ticket}
  end
  -- Waiting. Only the next ticket in line probes the served one, so a queue of N waiters costs
  -- one probe per poll interval, not N.
  local after = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. serving, '+inf', 'LIMIT', 0, 1)
  local next_in_line = after[1] == member
  if owner then
    local held, holder = split(owner)
    if next_in_line then
      return {'probe', now, holder, held}
    end
    return {'wait', now, holder, serving}
  end
  local head = redis.call('ZRANGEBYSCORE', KEYS[2], serving, serving)
  if #head == 0 then
    advance(serving)
    return {'retry', now, '', serving, 'gone'}
  end
  if redis.call('GET', KEYS[5]) == serving .. '|' .. head[1] then
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

return redis.error_reply('ERR turn: unknown operation ' .. tostring(op))
