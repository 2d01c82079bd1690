-- list_bucket: one bucket's share of a listing of chats or contacts: the ids of the bucket's
-- index after a cursor, in byte order, with the records of the first of them, in one call.
-- KEYS[1] the bucket's index (sorted set of ids, every score 0, so in byte order)
-- ARGV[1] the ZRANGE BYLEX minimum: `(` then the cursor's id, or `-` from the start
-- ARGV[2] the most ids to return
-- ARGV[3] the most records to read: those of the first ids returned
-- ARGV[4] the head of the bucket's record keys, `<prefix>:{<kind>:<bucket>}:r:`
-- DERIVES record_key an id's record: ARGV[4] then enc(id), the layout's segment encoding
-- (RFC 3986 unreserved bytes kept, every other byte %XX). The head carries KEYS[1]'s hash
-- tag, so the record is in KEYS[1]'s slot; it is only read, and a record this call cannot
-- see (deleted meanwhile, or not local during a live slot migration) reads as missing, which
-- the plan reads again with declared keys.
-- Returns the ids and values in turn (id, value, id, value, ...); a value is false when its
-- record was not read or is missing.
local function enc(id)
  return (string.gsub(id, '[^A-Za-z0-9%-%._~]', function(c)
    return string.format('%%%02X', string.byte(c))
  end))
end

local ids = redis.call('ZRANGE', KEYS[1], ARGV[1], '+', 'BYLEX', 'LIMIT', 0, tonumber(ARGV[2]))
local reads = tonumber(ARGV[3])
local out = {}
for i, id in ipairs(ids) do
  out[#out + 1] = id
  if i <= reads then
    local record_key = ARGV[4] .. enc(id)
    -- During a live slot migration a record already moved is not local: the server refuses
    -- the read (an error, not a redirect), and the record reads as missing.
    local value = redis.pcall('GET', record_key)
    if type(value) == 'table' and value.err then
      value = false
    end
    out[#out + 1] = value
  else
    out[#out + 1] = false
  end
end
return out
