if not owned then return {0} end
local now = clock(ARGV[4])
local lu = now + tonumber(ARGV[3])
local ea = math.max(tonumber(r[4]), lu)
redis.call('HSET', KEYS[1], 'lease_until', int(lu), 'expire_at', int(ea), 'updated_at', int(now))
local ru = nil
if remembered then
  ru = math.max(tonumber(r[6]), lu)
  redis.call('HSET', KEYS[1], 'replay_until', int(ru))
end
redis.call('HINCRBY', KEYS[1], 'rev', 1)
if KEYS[2] then redis.call('ZADD', KEYS[2], int(ea), ARGV[6]) end
due(ARGV[6], ru)
keep(KEYS[1], ea, now, tonumber(ARGV[5]))
return {1, lu, ea}
