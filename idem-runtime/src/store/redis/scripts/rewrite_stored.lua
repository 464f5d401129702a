local f = redis.call('HMGET', KEYS[1], 'rev', 'state', 'operation_id')
if f[1] ~= ARGV[1] or (f[2] ~= '1' and f[2] ~= '2') or f[3] ~= ARGV[5] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'idem_key', ARGV[2], 'updated_at', string.format('%d', now))
-- A remembered record whose response the purge freed stays freed: only its receipt changes.
if redis.call('HEXISTS', KEYS[1], 'resp_headers') == 1 then
  redis.call('HSET', KEYS[1], 'resp_headers', ARGV[3], 'resp_body', ARGV[4])
end
if ARGV[6] == '' then
  redis.call('HDEL', KEYS[1], 'biz_no')
else
  redis.call('HSET', KEYS[1], 'biz_no', ARGV[6])
end
redis.call('HINCRBY', KEYS[1], 'rev', 1)
return 1
