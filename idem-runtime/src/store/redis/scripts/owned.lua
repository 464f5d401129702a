local r = redis.call('HMGET', KEYS[1], 'state', 'fence', 'operation_id', 'expire_at', 'lease_until',
  'replay_until')
local ours = r[1] ~= false and r[2] == ARGV[1] and r[3] == ARGV[2]
local owned = ours and r[1] == '0'
