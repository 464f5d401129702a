local r = redis.call('HMGET', KEYS[1], 'state', 'fence', 'operation_id', 'expire_at', 'lease_until',
  'replay_until', 'created_at', 'rev')
-- A remembered record's end of replays; a stale value (from before the record was created, left
-- by a build without `remember`) is none.
local remembered = r[6] and r[7] and tonumber(r[6]) > tonumber(r[7])
local ours = r[1] ~= false and r[2] == ARGV[1] and r[3] == ARGV[2]
local owned = ours and r[1] == '0'
