local now = clock(ARGV[4])
local lease, ttl, margin = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local remember = tonumber(ARGV[9]) or 0
local lease_until = now + lease
local r = redis.call('HMGET', KEYS[1], 'state', 'fence', 'operation_id', 'request_hash',
  'lease_until', 'expire_at', 'created_at', 'replay_until')
local window = math.max(lease, ttl)
local fence, op, created, expire_at, took = 1, ARGV[3], now, now + math.max(window, remember), 0
local replay_until = nil
if remember > 0 then replay_until = now + window end
if r[1] or r[2] or r[3] or r[6] then
  local f, lu, ea, ca = tonumber(r[2]), tonumber(r[5]), tonumber(r[6]), tonumber(r[7])
  if not (r[1] and f and lu and ea and ca and r[3] and r[4]) then
    return {0, 'missing or malformed field'}
  end
  if ea > now then
    if r[1] ~= '0' then
      local rec = record(KEYS[1])
      return {3, now, unpack(rec)}
    end
    if lu > now or r[4] ~= ARGV[2] then
      return {2, r[4], math.max(lu - now, 0)}
    end
    -- An ended lease of the same request: take over, same operation (S23).
    op, created, expire_at, took = r[3], ca, math.max(ea, lease_until), 1
    replay_until = nil
    -- A value from before the record was created is stale (left by a build without
    -- `remember`): not this record's.
    if r[8] and tonumber(r[8]) > ca then replay_until = math.max(tonumber(r[8]), lease_until) end
  end
  -- Expired: logically absent, a new operation replaces it (S21); the fence still grows.
  fence = f + 1
  redis.call('HDEL', KEYS[1], 'resp_status', 'resp_headers', 'resp_body', 'biz_no', 'completed_at')
end
redis.call('HSET', KEYS[1], 'idem_key', ARGV[1], 'request_hash', ARGV[2], 'state', '0',
  'operation_id', op, 'fence', int(fence), 'locked_at', int(now), 'lease_until', int(lease_until),
  'expire_at', int(expire_at), 'created_at', int(created), 'updated_at', int(now))
if replay_until then
  redis.call('HSET', KEYS[1], 'replay_until', int(replay_until))
else
  redis.call('HDEL', KEYS[1], 'replay_until')
end
redis.call('HINCRBY', KEYS[1], 'rev', 1)
keep(KEYS[1], expire_at, now, margin)
if KEYS[2] then redis.call('ZADD', KEYS[2], int(expire_at), ARGV[8]) end
-- Only a remembered record, or one that was, has an entry among the responses to free.
if replay_until or r[8] then due(ARGV[8], replay_until) end
return {1, fence, op, lease_until, expire_at, took, now}
