-- bucket.lua -- a GCRA token bucket as a Redis script, the Redis+Lua peer of
-- bench/peers/run.sh (loaded with SCRIPT LOAD, called with EVALSHA).
--
--   EVALSHA <sha> 1 <key> <T> <B>
--
-- KEYS[1]  holds the theoretical arrival time (TAT) in microseconds of the
--          server's clock (redis TIME); absent = a full bucket
-- ARGV[1]  T, the emission interval: microseconds per permit (rate = 1/T)
-- ARGV[2]  B, the burst: the bucket's capacity in permits
--
-- A request for one permit at time now is allowed when
-- max(TAT, now) + T - T*B <= now; then TAT becomes max(TAT, now) + T and the
-- key expires when the bucket would be full again.  Returns 1 (allowed) or
-- 0 (denied; nothing is written).  Times stay below 2^53 us, exact in Lua's
-- doubles; the TAT is written with %.0f so that no digit is lost.
local T = tonumber(ARGV[1])
local B = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
  tat = now
end
local new_tat = tat + T
if new_tat - T * B > now then
  return 0
end
local ttl_ms = math.ceil((new_tat - now) / 1000)
if ttl_ms < 1 then
  ttl_ms = 1
end
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', ttl_ms)
return 1
