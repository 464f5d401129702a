local f = redis.call('HMGET', KEYS[1], 'state', 'expire_at', 'rev', 'idem_key', 'resp_headers',
  'resp_body', 'biz_no', 'operation_id', 'request_hash', 'resp_status')
if f[1] ~= '1' and f[1] ~= '2' then return {} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(f[2]) <= now then return {} end
return {f[3], f[4], f[5] or '', f[6] or '', f[7] or '', f[8] or '', f[9] or '', f[10] or '',
  f[1]}
