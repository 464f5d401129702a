if not owned then return 0 end
redis.call('UNLINK', KEYS[1])
if KEYS[2] then redis.call('ZREM', KEYS[2], ARGV[3]) end
if KEYS[3] then redis.call('ZREM', KEYS[3], ARGV[3]) end
return 1
