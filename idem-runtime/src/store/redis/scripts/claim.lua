local now = clock(ARGV[4])
local lease, ttl, margin = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local remember = tonumber(ARGV[9]) or 0
local lease_until = now + lease
-- The whole record in one read: a replay answers with it as it is. (An expired record being
-- replaced is read whole too, its response with it: once in the record's life.)
local rec = record(KEYS[1])
local state, request_hash, op_was, f = rec[3], rec[2], rec[4], rec[5]
local window = math.max(lease, ttl)
local fence, op, created, expire_at, took = 1, ARGV[3], now, now + math.max(window, remember), 0
local replay_until = nil
if remember > 0 then replay_until = now + window end
local existing = state or f or op_was or rec[12]
if existing then
  local fn, lu, ea, ca = tonumber(f), tonumber(rec[11]), tonumber(rec[12]), tonumber(rec[13])
  if not (state and fn and lu and ea and ca and op_was and request_hash) then
    return {0, 'missing or malformed field'}
  end
  if ea > now then
    if state ~= '0' then
      return {3, now, unpack(rec)}
    end
    if lu > now or request_hash ~= ARGV[2] then
      return {2, request_hash, math.max(lu - now, 0)}
    end
    -- An ended lease of the same request: take over, same operation (S23).
    op, created, expire_at, took = op_was, ca, math.max(ea, lease_until), 1
    replay_until = nil
    -- A value from before the record was created is stale (left by a build without
    -- `remember`): not this record's.
    if rec[16] and tonumber(rec[16]) > ca then replay_until = math.max(tonumber(rec[16]), lease_until) end
  end
  -- Expired: logically absent, a new operation replaces it (S21); the fence still grows.
  fence = fn + 1
end
-- What the record replaced held, or fields a hash held without a record (edited or restored by
-- hand): a completion must not store them with its own answer. (The `HSET` below writes
-- `replay_until` again when the record has one.)
if existing or rec[6] or rec[7] or rec[8] or rec[9] or rec[15] or rec[16] then
  redis.call('HDEL', KEYS[1], 'resp_status', 'resp_headers', 'resp_body', 'biz_no', 'completed_at',
    'replay_until')
end
local fields = {'idem_key', ARGV[1], 'request_hash', ARGV[2], 'state', '0', 'operation_id', op,
  'fence', int(fence), 'locked_at', int(now), 'lease_until', int(lease_until),
  'expire_at', int(expire_at), 'created_at', int(created), 'updated_at', int(now)}
if replay_until then
  fields[#fields + 1] = 'replay_until'
  fields[#fields + 1] = int(replay_until)
end
if not existing then
  -- A new record: its row version starts at 1, written with the rest.
  fields[#fields + 1] = 'rev'
  fields[#fields + 1] = '1'
end
redis.call('HSET', KEYS[1], unpack(fields))
if existing then redis.call('HINCRBY', KEYS[1], 'rev', 1) end
keep(KEYS[1], expire_at, now, margin)
if KEYS[2] then redis.call('ZADD', KEYS[2], int(expire_at), ARGV[8]) end
-- Only a remembered record, or one that was, has an entry among the responses to free.
if replay_until or rec[16] then due(ARGV[8], replay_until) end
return {1, fence, op, lease_until, expire_at, took, now}
