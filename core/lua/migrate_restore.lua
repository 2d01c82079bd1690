-- migrate_restore: restores keys that keep their names and types (conversations, durability
-- tables) from DUMP payloads, with their remaining time to live. An existing key wins unless
-- overwrite is set; an overwrite that finds the same value keeps the key (its time to live is
-- set all the same). Payloads are compared without their last 10 bytes (the RDB version and
-- the CRC64), which name the server that wrote them, not the value: a payload from another
-- server version whose body matches is the same value. A payload this server refuses (a DUMP
-- of a newer server version) is that key's code, not the call's error: the other keys of the
-- call are written.
-- KEYS[1..] the keys
-- ARGV[1] '1' to overwrite, else '0'
-- ARGV[2] '1' for a dry run: nothing is written
-- ARGV[3..] per key: the DUMP payload and the remaining ttl in ms (0 for none)
-- Returns a code per key: 0 kept, 1 copied, 2 overwritten, -2 when the server refused the
-- payload (nothing written for that key). Any other error of RESTORE ends the call with it.
local overwrite, dry = ARGV[1] == '1', ARGV[2] == '1'
local function body(payload)
  return string.sub(payload, 1, -11)
end
local codes = {}
for i, key in ipairs(KEYS) do
  local payload, ttl = ARGV[i * 2 + 1], ARGV[i * 2 + 2]
  local exists = redis.call('EXISTS', key) == 1
  if exists and not overwrite then
    codes[i] = 0
  elseif exists and body(redis.call('DUMP', key)) == body(payload) then
    codes[i] = 0
    if not dry then
      if ttl == '0' then
        redis.call('PERSIST', key)
      else
        redis.call('PEXPIRE', key, ttl)
      end
    end
  else
    codes[i] = exists and 2 or 1
    -- (A dry run restores nothing, so it cannot see a payload this server would refuse: it
    -- counts it as copied, and docs/migration.md says so.)
    if not dry then
      local reply = redis.pcall('RESTORE', key, ttl, payload, 'REPLACE')
      if type(reply) == 'table' and reply.err then
        -- A newer server's version or checksum ('DUMP payload ...'), or a body it cannot read
        -- ('Bad data format'): that key is unreadable here. Anything else (OOM, ...) is no
        -- property of the payload and ends the call.
        if string.find(reply.err, 'payload', 1, true) or string.find(reply.err, 'Bad data', 1, true) then
          codes[i] = -2
        else
          return redis.error_reply(reply.err)
        end
      end
    end
  end
end
return codes
