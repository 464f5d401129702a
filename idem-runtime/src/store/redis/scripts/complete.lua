if not ours then return 0 end
if not owned then
  redis.call('HSET', KEYS[1], 'state', r[1])
  return 1
end
local now = clock(ARGV[10])
-- One write: the snapshot, the times, the next row version and the business number. A
-- processing record holds none (a claim creates the record without one, or deletes the one it
-- replaces), so a completion without one leaves none.
local fields = {'state', ARGV[3], 'resp_status', ARGV[4], 'resp_headers', ARGV[5],
  'resp_body', ARGV[6], 'updated_at', int(now), 'completed_at', int(now),
  'rev', int((tonumber(r[8]) or 0) + 1)}
if ARGV[7] == '1' then
  fields[#fields + 1] = 'biz_no'
  fields[#fields + 1] = ARGV[8]
end
redis.call('HSET', KEYS[1], unpack(fields))
if ARGV[9] ~= '' then
  -- A new end of the replayed response: of a remembered record, `replay_until`, which the
  -- record outlives.
  local at, ea, ru = tonumber(ARGV[9]), tonumber(ARGV[9]), nil
  if remembered then
    -- Never before the record's creation: an end in the past is remembered at once.
    ru = math.max(at, tonumber(r[7]) + 1)
    ea = math.max(tonumber(r[4]), ru)
    redis.call('HSET', KEYS[1], 'replay_until', int(ru))
  end
  redis.call('HSET', KEYS[1], 'expire_at', int(ea))
  if KEYS[2] then redis.call('ZADD', KEYS[2], int(ea), ARGV[12]) end
  due(ARGV[12], ru)
  keep(KEYS[1], ea, now, tonumber(ARGV[11]))
elseif remembered then
  due(ARGV[12], tonumber(r[6]))
end
return 2
