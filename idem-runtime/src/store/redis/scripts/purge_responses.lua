local now, batch = clock(ARGV[1]), tonumber(ARGV[2])
local freed, seen = 0, 0
while freed < batch and seen < 10 * batch do
  local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now), 'LIMIT', 0, batch - freed)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    local key = ARGV[3] .. id
    local f = redis.call('HMGET', key, 'expire_at', 'replay_until', 'state', 'created_at')
    local ea, ru, ca = tonumber(f[1]), tonumber(f[2]), tonumber(f[4])
    if ea and ea > now and ru and ca and ru > ca and ru <= now and f[3] ~= '0' then
      -- A remembered record past its TTL: its response goes, what identifies the operation
      -- stays until `expire_at`; `replay_until` turns negative (its absolute value still says
      -- when the response expired).
      redis.call('HDEL', key, 'resp_headers', 'resp_body')
      redis.call('HSET', key, 'replay_until', int(-ru))
      redis.call('HINCRBY', key, 'rev', 1)
      freed = freed + 1
      redis.call('ZREM', KEYS[1], id)
    elseif ea and ea > now and ru and ru > now then
      redis.call('ZADD', KEYS[1], int(ru), id)
    else
      -- Gone, expired (the other phase deletes it), freed already, or still processing (its
      -- completion puts it back).
      redis.call('ZREM', KEYS[1], id)
    end
  end
  seen = seen + #ids
end
return freed
