if not owned then return 0 end
local now = clock(ARGV[3])
redis.call('HSET', KEYS[1], 'lease_until', int(math.min(tonumber(r[5]), now)), 'updated_at', int(now))
redis.call('HINCRBY', KEYS[1], 'rev', 1)
return 1
