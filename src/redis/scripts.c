/* scripts.c -- the global tier's algorithms as Lua scripts, and the
 * arithmetic that keeps them exact.
 *
 * The scripts run atomically in Redis (EVALSHA), read the server's clock
 * with TIME and never a client's, and decide exactly as docs/decisions.md section
 * 3 says at that time.  Lua 5.1 numbers are IEEE doubles, exact for integers
 * below 2^53; the parameters below are chosen (and specs refused) so that
 * every value a script stores or compares stays there:
 *
 * Time.  TIME gives (seconds, microseconds); us = s * 10^6 + u is about
 * 1.8e15 today, below 2^53 (9.007e15) until the year 2255.  The scripts
 * count in ticks of a quantum q (q_us microseconds): now = floor(us / q_us).
 * q is the smallest of 1 us, 10 us, ..., 1 s that makes the numbers below
 * fit; for every common spec it is 1 us.  In ns the decision time is
 * now * q, and the decisions are exactly the contract's at that time.
 *
 * token-bucket (3.5), B = burst.  With g = gcd(q*L, W), the rate is
 * a/b = (q*L/g) / (W/g) permits per tick, in lowest terms, and the level is
 * kept as x = tokens * b, an integer in 0 .. cap = B*b:
 *
 *     x(now) = min(cap, x + (now - t) * a)       allowed iff p*b <= x
 *
 * Needs a < 2^53 and (B+1)*b < 2^53 (p is clamped to B+1 by the client: a
 * larger request is refused all the same).  (now - t) * a may exceed 2^53
 * after a long idle time, but it is only compared with cap - x < 2^53, and
 * rounding is monotonic: a product at or above an exact bound rounds to at
 * or above it, one below 2^53 is exact.  So the comparison is exact, and
 * the sum is formed only when it is below cap.
 *
 * sliding-approx (3.4).  q must divide W; wt = W / q ticks.  With k the
 * window of now and r = now - k*wt, E = prev*(wt - r) + cur*wt is the
 * estimate times wt and a request is allowed iff E + p*wt <= L*wt.  E <= L*wt
 * always, p <= L+1 (clamped), so (2L+1)*wt < 2^53 suffices.
 *
 * fixed-window (3.1).  q must divide W; wt = W / q ticks; the window of
 * now is k = floor(now / wt) and a request is allowed iff the window's
 * count c plus p is at most L.  Needs wt < 2^53 and L + 1 < 2^53 (p is
 * clamped to L+1).  Only an admission writes; the key expires at its
 * window's end (plus 1 ms: PEXPIRE counts from Redis's millisecond clock).
 *
 * Divisions: floor(n / d) in doubles can be off by one near an integer; the
 * scripts' divmod() corrects the quotient with the exact remainder.
 *
 * Storage: one hash per key, fields x,t (token-bucket), k,c,p,t
 * (sliding-approx) or k,c,t (fixed-window), t the latest tick the key has seen (an earlier TIME
 * counts as t: the contract's "time never goes backwards").  Values are
 * written with %.0f (no exponent, no lost digit).  A key at rest (full
 * bucket; empty windows) is deleted; otherwise its TTL is the time until
 * it would be at rest, plus 1 ms, measured from the real TIME (which is the
 * base of PEXPIRE), so a key never vanishes before it carries no
 * information.
 *
 * Keys: each single-key script reads and writes KEYS[1] and nothing else,
 * so on a Redis Cluster every call is a one-slot call (the key name's hash
 * tag picks the slot; cluster.c) and needs no multi-key hash tags.  The
 * all-or-nothing script (docs/decisions.md 3.7) reads every one of its
 * KEYS, then writes all of them or none: on a cluster its keys must share
 * a slot (cluster.c refuses the call otherwise, before sending it).
 *
 * Lease: ARGV `want` >= `need`: when need permits are allowed, the script
 * grants min(want, what is available) >= need, all in the same atomic step;
 * the reply's `granted` says how many.
 */
#include "redis_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- the scripts ------------------------------------------------------ */

/* Each algorithm is three Lua functions, written once and shared by its
 * single-key script and by the all-or-nothing script:
 *   X_judge(key, real, ...params, need, want) reads the key's state at
 *       Redis's tick `real` and returns it with the verdict (s.ok) and the
 *       permits it would grant (s.g); it writes nothing;
 *   X_commit(key, s, ...) takes s.g and writes the state (or deletes a key
 *       at rest), with its TTL;
 *   X_reply(s) appends the state's fields to a reply.
 * A single-key script judges, commits (token-bucket and sliding-approx
 * also after a refusal: the refilled bucket, the rolled windows, as before)
 * and answers {ok, granted, fields...}; the all-or-nothing script judges
 * every key and commits them only when every one allowed. */
#define SR_LUA_DIVMOD                                                          \
    "local function divmod(n, d)\n"                                            \
    "  local q = math.floor(n / d)\n"                                          \
    "  local r = n - q * d\n"                                                  \
    "  if r < 0 then q = q - 1; r = r + d\n"                                   \
    "  elseif r >= d then q = q + 1; r = r - d end\n"                          \
    "  return q, r\n"                                                          \
    "end\n"                                                                    \
    "local function f0(v) return string.format('%.0f', v) end\n"               \
    "local function ticks(q_us)\n"                                             \
    "  local tm = redis.call('TIME')\n"                                        \
    "  return (divmod(tonumber(tm[1]) * 1000000 + tonumber(tm[2]), q_us))\n"    \
    "end\n"

/* token-bucket: params a, b, cap; reply fields x, now. */
#define SR_LUA_TB                                                              \
    "local function tb_judge(key, real, a, b, cap, need, want)\n"              \
    "  local st = redis.call('HMGET', key, 'x', 't')\n"                        \
    "  local x, t = tonumber(st[1]), tonumber(st[2])\n"                        \
    "  local now = real\n"                                                     \
    "  if x == nil or t == nil or x > cap or x < 0 then x = cap; t = now end\n" \
    "  if now < t then now = t end\n"                                          \
    "  if (now - t) * a >= cap - x then x = cap else x = x + (now - t) * a end\n" \
    "  local s = {ok = 0, g = 0, x = x, now = now, real = real}\n"             \
    "  if need * b <= x then\n"                                                \
    "    s.ok = 1; s.g = need\n"                                               \
    "    if want > need then\n"                                                \
    "      local avail = divmod(x, b)\n"                                       \
    "      if avail < want then s.g = avail else s.g = want end\n"             \
    "    end\n"                                                                \
    "  end\n"                                                                  \
    "  return s\n"                                                             \
    "end\n"                                                                    \
    "local function tb_commit(key, s, q_us, a, b, cap)\n"                      \
    "  s.x = s.x - s.g * b\n"                                                  \
    "  if s.x >= cap then\n"                                                   \
    "    redis.call('DEL', key)\n"                                             \
    "  else\n"                                                                 \
    "    redis.call('HSET', key, 'x', f0(s.x), 't', f0(s.now))\n"              \
    "    local full = math.ceil((cap - s.x) / a) + (s.now - s.real)\n"          \
    "    redis.call('PEXPIRE', key, f0(math.ceil(full * q_us / 1000) + 1))\n"   \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "local function tb_reply(out, s) out[#out + 1] = s.x; out[#out + 1] = s.now end\n"

/* sliding-approx: params wt, L; reply fields r, cur, prev, now. */
#define SR_LUA_SA                                                              \
    "local function sa_judge(key, real, wt, L, need, want)\n"                  \
    "  local st = redis.call('HMGET', key, 'k', 'c', 'p', 't')\n"              \
    "  local k0, cur, prev, t = tonumber(st[1]), tonumber(st[2]), tonumber(st[3]), tonumber(st[4])\n" \
    "  local now = real\n"                                                     \
    "  if k0 == nil or cur == nil or prev == nil or t == nil then k0 = -2; cur = 0; prev = 0; t = now end\n" \
    "  if now < t then now = t end\n"                                          \
    "  local k, r = divmod(now, wt)\n"                                         \
    "  if k ~= k0 then\n"                                                      \
    "    if k == k0 + 1 then prev = cur else prev = 0 end\n"                   \
    "    cur = 0\n"                                                            \
    "  end\n"                                                                  \
    "  local lw = L * wt\n"                                                    \
    "  local e = prev * (wt - r) + cur * wt\n"                                 \
    "  local s = {ok = 0, g = 0, k = k, r = r, cur = cur, prev = prev, now = now, real = real}\n" \
    "  if need <= L and e + need * wt <= lw then\n"                            \
    "    s.ok = 1; s.g = need\n"                                               \
    "    if want > need then\n"                                                \
    "      local avail = divmod(lw - e, wt)\n"                                 \
    "      if avail < want then s.g = avail else s.g = want end\n"             \
    "    end\n"                                                                \
    "  end\n"                                                                  \
    "  return s\n"                                                             \
    "end\n"                                                                    \
    "local function sa_commit(key, s, q_us, wt)\n"                             \
    "  s.cur = s.cur + s.g\n"                                                  \
    "  if s.cur == 0 and s.prev == 0 then\n"                                   \
    "    redis.call('DEL', key)\n"                                             \
    "  else\n"                                                                 \
    "    redis.call('HSET', key, 'k', f0(s.k), 'c', f0(s.cur), 'p', f0(s.prev), 't', f0(s.now))\n" \
    "    local rest = wt - s.r\n"                                              \
    "    if s.cur > 0 then rest = rest + wt end\n"                             \
    "    redis.call('PEXPIRE', key, f0(math.ceil((rest + s.now - s.real) * q_us / 1000) + 1))\n" \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "local function sa_reply(out, s)\n"                                        \
    "  out[#out + 1] = s.r; out[#out + 1] = s.cur; out[#out + 1] = s.prev; out[#out + 1] = s.now\n" \
    "end\n"

/* fixed-window: params wt, L; reply fields r, count, now.  Only an
 * admission writes (docs/decisions.md: a refusal changes nothing). */
#define SR_LUA_FW                                                              \
    "local function fw_judge(key, real, wt, L, need, want)\n"                  \
    "  local st = redis.call('HMGET', key, 'k', 'c', 't')\n"                   \
    "  local k0, c, t = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])\n"   \
    "  if k0 == nil or c == nil or t == nil or c < 0 or c > L then k0 = -1; c = 0; t = real end\n" \
    "  local now = real\n"                                                     \
    "  if now < t then now = t end\n"                                          \
    "  local k, r = divmod(now, wt)\n"                                         \
    "  if k ~= k0 then c = 0 end\n"                                            \
    "  local s = {ok = 0, g = 0, k = k, r = r, c = c, now = now, real = real}\n" \
    "  if c + need <= L then\n"                                                \
    "    s.ok = 1; s.g = need\n"                                               \
    "    if want > need then\n"                                                \
    "      if L - c < want then s.g = L - c else s.g = want end\n"             \
    "    end\n"                                                                \
    "  end\n"                                                                  \
    "  return s\n"                                                             \
    "end\n"                                                                    \
    "local function fw_commit(key, s, q_us, wt)\n"                             \
    "  if s.g > 0 then\n"                                                      \
    "    s.c = s.c + s.g\n"                                                    \
    "    redis.call('HSET', key, 'k', f0(s.k), 'c', f0(s.c), 't', f0(s.now))\n" \
    "    redis.call('PEXPIRE', key, f0(math.ceil(((s.k + 1) * wt - s.real) * q_us / 1000) + 1))\n" \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "local function fw_reply(out, s) out[#out + 1] = s.r; out[#out + 1] = s.c; out[#out + 1] = s.now end\n"

/* KEYS[1]; ARGV: q_us, a, b, cap, need, want.
 * Reply: {ok, granted, x, now}. */
static const char tb_lua[] =
    "-- sluice token-bucket (docs/decisions.md 3.5) on Redis's clock\n"
    SR_LUA_DIVMOD SR_LUA_TB
    "local q_us, a, b, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "local s = tb_judge(KEYS[1], ticks(q_us), a, b, cap, tonumber(ARGV[5]), tonumber(ARGV[6]))\n"
    "tb_commit(KEYS[1], s, q_us, a, b, cap)\n"
    "local out = {s.ok, s.g}\n"
    "tb_reply(out, s)\n"
    "return out\n";

/* KEYS[1]; ARGV: q_us, wt, L, need, want.
 * Reply: {ok, granted, r, cur, prev, now}. */
static const char sa_lua[] =
    "-- sluice sliding-approx (docs/decisions.md 3.4) on Redis's clock\n"
    SR_LUA_DIVMOD SR_LUA_SA
    "local q_us, wt, L = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local s = sa_judge(KEYS[1], ticks(q_us), wt, L, tonumber(ARGV[4]), tonumber(ARGV[5]))\n"
    "sa_commit(KEYS[1], s, q_us, wt)\n"
    "local out = {s.ok, s.g}\n"
    "sa_reply(out, s)\n"
    "return out\n";

/* KEYS[1]; ARGV: q_us, wt, L, need, want.
 * Reply: {ok, granted, r, count, now}: count is the window's after the
 * decision. */
static const char fw_lua[] =
    "-- sluice fixed-window (docs/decisions.md 3.1) on Redis's clock\n"
    SR_LUA_DIVMOD SR_LUA_FW
    "local q_us, wt, L = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local s = fw_judge(KEYS[1], ticks(q_us), wt, L, tonumber(ARGV[4]), tonumber(ARGV[5]))\n"
    "fw_commit(KEYS[1], s, q_us, wt)\n"
    "local out = {s.ok, s.g}\n"
    "fw_reply(out, s)\n"
    "return out\n";

/* KEYS[1..n]; ARGV per key, in order: script (0 tb, 1 sa, 2 fw), q_us, the
 * script's parameters (a b cap, or wt L), need, want (>= need: a lease's
 * surplus, as the single-key scripts grant it).  Judges every key, then
 * commits all (each granted between need and want) or none.
 * Reply: {ok, then per key: its verdict, granted, its script's fields}:
 * a key not committed reports its state without the request's permits. */
static const char all_lua[] =
    "-- sluice all-or-nothing across keys (docs/decisions.md 3.7) on Redis's clock\n"
    SR_LUA_DIVMOD SR_LUA_TB SR_LUA_SA SR_LUA_FW
    "local n, i, ss, all = #KEYS, 1, {}, 1\n"
    "for j = 1, n do\n"
    "  local w, q_us = tonumber(ARGV[i]), tonumber(ARGV[i + 1])\n"
    "  local s\n"
    "  if w == 0 then\n"
    "    s = tb_judge(KEYS[j], ticks(q_us), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]),\n"
    "                 tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6]))\n"
    "    s.p = {q_us, tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])}; i = i + 7\n"
    "  else\n"
    "    local jf = sa_judge\n"
    "    if w == 2 then jf = fw_judge end\n"
    "    s = jf(KEYS[j], ticks(q_us), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]),\n"
    "           tonumber(ARGV[i + 5]))\n"
    "    s.p = {q_us, tonumber(ARGV[i + 2])}; i = i + 6\n"
    "  end\n"
    "  s.w = w\n"
    "  if s.ok == 0 then all = 0 end\n"
    "  ss[j] = s\n"
    "end\n"
    "local out = {all}\n"
    "for j = 1, n do\n"
    "  local s = ss[j]\n"
    "  if all == 1 then\n"
    "    if s.w == 0 then tb_commit(KEYS[j], s, s.p[1], s.p[2], s.p[3], s.p[4])\n"
    "    elseif s.w == 1 then sa_commit(KEYS[j], s, s.p[1], s.p[2])\n"
    "    else fw_commit(KEYS[j], s, s.p[1], s.p[2]) end\n"
    "  else\n"
    "    s.g = 0\n"
    "  end\n"
    "  out[#out + 1] = s.ok; out[#out + 1] = s.g\n"
    "  if s.w == 0 then tb_reply(out, s) elseif s.w == 1 then sa_reply(out, s) else fw_reply(out, s) end\n"
    "end\n"
    "return out\n";

#define SR_NSCRIPTS 4
static const char *const sources[SR_NSCRIPTS] = {tb_lua, sa_lua, fw_lua, all_lua};
static char shas[SR_NSCRIPTS][41];
static pthread_once_t sha_once = PTHREAD_ONCE_INIT;

static void compute_shas(void)
{
    for (int i = 0; i < SR_NSCRIPTS; i++) sluice__sha1_hex(sources[i], strlen(sources[i]), shas[i]);
}

const char *sluice_redis_script_source(int which)
{
    return which >= 0 && which < SR_NSCRIPTS ? sources[which] : NULL;
}

const char *sluice_redis_script_sha(int which)
{
    if (which < 0 || which >= SR_NSCRIPTS) return NULL;
    pthread_once(&sha_once, compute_shas);
    return shas[which];
}

/* ---- SHA1 (FIPS 180-4), for EVALSHA ------------------------------------ */

static uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void sha1_block(uint32_t h[5], const unsigned char *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 80; i++) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) f = (b & c) | (~b & d), k = 0x5A827999u;
        else if (i < 40) f = b ^ c ^ d, k = 0x6ED9EBA1u;
        else if (i < 60) f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDCu;
        else f = b ^ c ^ d, k = 0xCA62C1D6u;
        uint32_t tmp = rol(a, 5) + f + e + k + w[i];
        e = d, d = c, c = rol(b, 30), b = a, a = tmp;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

void sluice__sha1_hex(const void *data, size_t len, char out[41])
{
    uint32_t h[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};
    const unsigned char *p = data;
    size_t n = len;
    for (; n >= 64; n -= 64, p += 64) sha1_block(h, p);
    unsigned char tail[128] = {0};
    memcpy(tail, p, n);
    tail[n] = 0x80;
    size_t tl = n + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) tail[tl - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha1_block(h, tail);
    if (tl == 128) sha1_block(h, tail + 64);
    for (int i = 0; i < 5; i++) snprintf(out + 8 * i, 9, "%08x", (unsigned)h[i]);
}

/* ---- spec -> script parameters ------------------------------------------ */

static sr_u128 gcd128(sr_u128 x, sr_u128 y)
{
    while (y) {
        sr_u128 t = x % y;
        x = y;
        y = t;
    }
    return x;
}

int sluice__redis_spec(int script, uint64_t L, uint64_t W, uint64_t B, bool coarse, char *out,
                       size_t n)
{
    char text[SLUICE_SPEC_MAX];
    if (script == SR_SCRIPT_TB)
        snprintf(text, sizeof text, "token-bucket %llu/%lluns burst=%llu%s", (unsigned long long)L,
                 (unsigned long long)W, (unsigned long long)B, coarse ? " clock=coarse" : "");
    else
        snprintf(text, sizeof text, "%s %llu/%lluns%s",
                 script == SR_SCRIPT_FW ? "fixed-window" : "sliding-approx", (unsigned long long)L,
                 (unsigned long long)W, coarse ? " clock=coarse" : "");
    char canon[SLUICE_SPEC_MAX];
    int rc = sluice_spec_check(text, canon, sizeof canon, NULL, 0);
    if (rc != 0) return rc;
    if (strlen(canon) >= n) return SLUICE_ENOSPC;
    memcpy(out, canon, strlen(canon) + 1);
    return 0;
}

int sluice__redis_params(const char *spec, sr_params *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    sluice_spec_info in;
    int rc = sluice_spec_parse(spec, &in, err, errlen);
    if (rc != 0) return rc;
    if (in.algorithm == SLUICE_ALG_TOKEN_BUCKET) {
        out->script = SR_SCRIPT_TB;
    } else if (in.algorithm == SLUICE_ALG_SLIDING_APPROX) {
        out->script = SR_SCRIPT_SA;
    } else if (in.algorithm == SLUICE_ALG_FIXED_WINDOW) {
        out->script = SR_SCRIPT_FW;
    } else {
        if (errlen)
            snprintf(err, errlen,
                     "algorithm \"%s\" has no Redis script (use token-bucket, sliding-approx "
                     "or fixed-window)",
                     sluice_algorithm_name(in.algorithm));
        return SLUICE_EINVAL;
    }
    const uint64_t L = in.limit, W = in.period_ns, B = in.capacity;
    out->limit = L;
    out->period_ns = W;
    out->capacity = B;
    out->coarse = in.clock == SLUICE_CLOCK_COARSE;
    rc = sluice__redis_spec(out->script, L, W, B, false, out->canon, sizeof out->canon);
    if (rc != 0) {
        /* cannot happen: the parsed values are a spec's */
        if (errlen) snprintf(err, errlen, "cannot write the spec's canonical form (%d)", rc);
        return rc;
    }
    for (uint64_t q = 1000; q <= 1000000000ULL; q *= 10) {
        if (out->script == SR_SCRIPT_TB) {
            sr_u128 ql = (sr_u128)q * L;
            sr_u128 g = gcd128(ql, W);
            sr_u128 a = ql / g, b = W / g;
            if (a >= SR_TWO53 || b >= SR_TWO53 || (sr_u128)(B + 1) * b >= SR_TWO53) continue;
            out->quantum_ns = q;
            out->a = (uint64_t)a;
            out->b = (uint64_t)b;
            out->cap = (uint64_t)(B * b); /* < 2^53: checked above */
            return 0;
        }
        if (W % q != 0) break; /* a larger q cannot divide W either */
        uint64_t wt = W / q;
        if (out->script == SR_SCRIPT_FW ? wt >= SR_TWO53 || L + 1 >= SR_TWO53
                                        : (sr_u128)(2 * L + 1) * wt >= SR_TWO53)
            continue;
        out->quantum_ns = q;
        out->wt = wt;
        return 0;
    }
    if (errlen) {
        if (out->script == SR_SCRIPT_FW)
            snprintf(err, errlen,
                     "spec \"%s\" is out of the Redis tier's exact range: PERIOD must be a "
                     "whole number of microseconds (docs/redis.md)",
                     out->canon);
        else if (out->script == SR_SCRIPT_TB)
            snprintf(err, errlen,
                     "spec \"%s\" is out of the Redis tier's exact range: (burst+1) * PERIOD / "
                     "gcd(LIMIT * q, PERIOD) must stay below 2^53 for some clock quantum q "
                     "of 1 us .. 1 s (docs/redis.md)",
                     out->canon);
        else
            snprintf(err, errlen,
                     "spec \"%s\" is out of the Redis tier's exact range: PERIOD must be a "
                     "whole number of microseconds and (2*LIMIT+1) * PERIOD/q below 2^53 "
                     "for some clock quantum q of 1 us .. 1 s dividing PERIOD (docs/redis.md)",
                     out->canon);
    }
    return SLUICE_ERANGE;
}
