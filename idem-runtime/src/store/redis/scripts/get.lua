local now = clock(ARGV[1])
local rec = record(KEYS[1])
return {now, unpack(rec)}
