-- migrate_read: reads the keys of one batch of a migration, with their remaining time to live,
-- in one call.
-- KEYS[1..] the keys to read
-- ARGV[1..] how to read the key of the same index: 's' a string, 'h' a hash, 'd' any type as a
-- DUMP payload
-- Returns {server time in ms, entry per key...}; an entry is {type, pttl, payload} when the key
-- has the wanted type ('s': the value, 'h': the flat field/value array, 'd': the DUMP payload),
-- {type, pttl} when it exists with another type, and {'none', -2} when it does not exist.
local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
for i, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key)['ok']
  local mode = ARGV[i]
  if kind == 'none' then
    out[#out + 1] = {'none', -2}
  else
    local pttl = redis.call('PTTL', key)
    if mode == 'd' then
      out[#out + 1] = {kind, pttl, redis.call('DUMP', key)}
    elseif mode == 's' and kind == 'string' then
      out[#out + 1] = {kind, pttl, redis.call('GET', key)}
    elseif mode == 'h' and kind == 'hash' then
      out[#out + 1] = {kind, pttl, redis.call('HGETALL', key)}
    else
      out[#out + 1] = {kind, pttl}
    end
  end
end
return out
