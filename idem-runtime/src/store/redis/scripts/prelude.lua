local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function int(n) return string.format('%d', n) end
local function keep(key, expire_at, now, margin)
  redis.call('PEXPIRE', key, int(math.max(expire_at - now, 0) + margin))
end
local function record(key)
  return redis.call('HMGET', key, 'idem_key', 'request_hash', 'state', 'operation_id', 'fence',
    'resp_status', 'resp_headers', 'resp_body', 'biz_no', 'locked_at', 'lease_until', 'expire_at',
    'created_at', 'updated_at', 'completed_at', 'replay_until')
end
-- The index's score of a record: when the purge has something to do with it, the end of its
-- replays while a remembered record still holds its response, its expiry otherwise.
local function due(expire_at, replay_until)
  if replay_until and replay_until > 0 then return math.min(replay_until, expire_at) end
  return expire_at
end
