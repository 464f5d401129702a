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
-- Keeps the entry of a remembered record in the index of responses to free (`KEYS[3]`) at
-- `replay_until`, or drops it once there is none to free.
local function due(member, replay_until)
  if not KEYS[3] then return end
  if replay_until and replay_until > 0 then
    redis.call('ZADD', KEYS[3], int(replay_until), member)
  else
    redis.call('ZREM', KEYS[3], member)
  end
end
