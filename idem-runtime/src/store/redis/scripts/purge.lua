local now, batch = clock(ARGV[1]), tonumber(ARGV[2])
local deleted, seen = 0, 0
while deleted < batch and seen < 10 * batch do
  local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now), 'LIMIT', 0, batch - deleted)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    local key = ARGV[3] .. id
    local ea = tonumber(redis.call('HGET', key, 'expire_at'))
    if ea and ea > now then
      redis.call('ZADD', KEYS[1], int(ea), id)
    else
      if ea then
        redis.call('UNLINK', key)
        deleted = deleted + 1
      end
      redis.call('ZREM', KEYS[1], id)
      if KEYS[2] then redis.call('ZREM', KEYS[2], id) end
    end
  end
  seen = seen + #ids
end
return deleted
