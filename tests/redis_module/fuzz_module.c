/* fuzz_module.c -- the Redis module's reading of stored values, fuzzed.
 *
 * The module (src/redis_module/sluice_module.c, included here whole) is
 * driven through its command functions with the Redis module API replaced
 * by a few functions over one key held in memory: the input is the key's
 * value, so every value a client could SET is tried.  Input layout:
 *
 *     byte 0      the command and spec (g_cases[byte % N])
 *     byte 1      the permits (0..7, or 2^64-1 for 0xff); unless 0xff, bit
 *                 3: SLUICE.RESERVE instead of ACQUIRE, bit 4: then
 *                 SLUICE.SETTLE the value's oldest reservation (at permits
 *                 * 3), bit 5: SLUICE.CANCEL it
 *     bytes 2-9   the time, little-endian, cut to 0 .. 2^63-1
 *     the rest    the key's value (none: the key is missing)
 *
 * Checks: a reply is an error or an array of the command's length, with
 * allowed in {0, 1} and remaining >= 0; no crash, no read past the value
 * (ASan), no undefined behaviour (UBSan).  And the module reads back what it
 * writes: a value it stores is decided on again, under the same spec at the
 * same time, with no error -- the property whose failure was issue 22's
 * "damaged" window after a change to a shorter one.
 *
 * Built as fuzz_module_replay (corpus replay, a ctest of label `fuzz`) and,
 * with -DSLUICE_FUZZ=ON, as the libFuzzer target fuzz_module (docs/redis.md,
 * Tests).
 */
#include "sluice_module.c"

#include "fuzz.h"

struct RedisModuleString {
    const char *p;
    size_t n;
};
struct RedisModuleKey {
    int unused;
};
struct RedisModuleCtx {
    int unused;
};

/* The one key: its value (copied from the input or written by the module). */
static unsigned char g_val[VALUE_MAX + 4096];
static size_t g_len;
static bool g_exists;
static RedisModuleKey g_key;

/* The reply: an error, or an array of integers. */
static bool g_error;
static long g_arr;
static long long g_ints[8];
static int g_nints;

static RedisModuleKey *f_open(RedisModuleCtx *ctx, RedisModuleString *name, int how)
{
    (void)ctx, (void)name, (void)how;
    return &g_key;
}
static void f_close(RedisModuleKey *key) { (void)key; }
static int f_type(RedisModuleKey *key)
{
    (void)key;
    return g_exists ? RM_KEYTYPE_STRING : RM_KEYTYPE_EMPTY;
}
static char *f_dma(RedisModuleKey *key, size_t *len, int how)
{
    (void)key, (void)how;
    *len = g_len;
    return (char *)g_val;
}
static int f_truncate(RedisModuleKey *key, size_t len)
{
    (void)key;
    if (len > sizeof g_val) return RM_ERR;
    if (len > g_len) memset(g_val + g_len, 0, len - g_len);
    g_len = len;
    g_exists = true;
    return RM_OK;
}
static int f_delete(RedisModuleKey *key)
{
    (void)key;
    g_exists = false;
    g_len = 0;
    return RM_OK;
}
static int f_expire(RedisModuleKey *key, long long ms)
{
    (void)key, (void)ms;
    return RM_OK;
}
static const char *f_ptrlen(const RedisModuleString *s, size_t *len)
{
    *len = s->n;
    return s->p;
}
static int f_array(RedisModuleCtx *ctx, long len)
{
    (void)ctx;
    g_arr = len;
    return RM_OK;
}
static int f_ll(RedisModuleCtx *ctx, long long v)
{
    (void)ctx;
    if (g_nints < 8) g_ints[g_nints] = v;
    g_nints++;
    return RM_OK;
}
static int f_error(RedisModuleCtx *ctx, const char *err)
{
    (void)ctx;
    FUZZ_CHECK(err && strchr(err, '\n') == NULL && strchr(err, '\r') == NULL, "an error of one line: %s",
               err ? err : "(null)");
    g_error = true;
    return RM_OK;
}
static int f_arity(RedisModuleCtx *ctx) { return f_error(ctx, "ERR wrong number of arguments"); }
static int f_replicate(RedisModuleCtx *ctx, const char *cmd, const char *fmt, ...)
{
    (void)ctx, (void)cmd, (void)fmt;
    return RM_OK;
}
static void f_log(RedisModuleCtx *ctx, const char *level, const char *fmt, ...) { (void)ctx, (void)level, (void)fmt; }

static void setup(void)
{
    static bool done;
    if (done) return;
    done = true;
    rm.OpenKey = f_open;
    rm.CloseKey = f_close;
    rm.KeyType = f_type;
    rm.StringDMA = f_dma;
    rm.StringTruncate = f_truncate;
    rm.DeleteKey = f_delete;
    rm.SetExpire = f_expire;
    rm.SetAbsExpire = f_expire;
    rm.StringPtrLen = f_ptrlen;
    rm.ReplyWithArray = f_array;
    rm.ReplyWithLongLong = f_ll;
    rm.ReplyWithError = f_error;
    rm.WrongArity = f_arity;
    rm.Replicate = f_replicate;
    rm.Log = f_log;
    g_testclock = true;
}

/* The commands and specs tried: every algorithm, small and large rings,
 * and THROTTLE (which also reads redis-cell's values). */
static const char *const g_cases[] = {
    "fixed-window 5/s",
    "sliding-log 7/s",
    "sliding-log 4096/10s",
    "sliding-log 100/s",
    "sliding-wheel 100/s slots=10",
    "sliding-wheel 20/2s slots=20",
    "sliding-approx 10/s",
    "token-bucket 3/s burst=5",
    "token-bucket 1000000007/s burst=20000000000",
    "leaky-bucket 10/s capacity=5",
    "leaky-bucket 3/s nodelay",
    NULL, /* THROTTLE k 4 1 1 */
    NULL, /* THROTTLE k 15 30 60 */
};
#define N_CASES (sizeof g_cases / sizeof g_cases[0])

/* One command on the key at time t; whether it replied with a decision. */
static bool run_cmd(size_t c, uint64_t permits, uint64_t t, bool reserve)
{
    char p[24], at[24];
    snprintf(p, sizeof p, "%llu", (unsigned long long)permits);
    snprintf(at, sizeof at, "%llu", (unsigned long long)t);
    RedisModuleString a[10];
    int argc = 0;
    const bool thr = g_cases[c] == NULL;
#define ARG(s) (a[argc++] = (RedisModuleString){(s), strlen(s)})
    reserve = reserve && !thr;
    ARG(thr ? "SLUICE.THROTTLE" : reserve ? "SLUICE.RESERVE" : "SLUICE.ACQUIRE");
    ARG("k");
    if (thr) {
        const bool first = c == N_CASES - 2;
        ARG(first ? "4" : "15");
        ARG(first ? "1" : "30");
        ARG(first ? "1" : "60");
    } else {
        ARG(g_cases[c]);
    }
    ARG(p);
    ARG("AT");
    ARG(at);
#undef ARG
    RedisModuleString *argv[10];
    for (int i = 0; i < argc; i++) argv[i] = &a[i];
    g_error = false, g_arr = -1, g_nints = 0;
    RedisModuleCtx ctx;
    if (thr) cmd_throttle(&ctx, argv, argc);
    else if (reserve) cmd_reserve(&ctx, argv, argc);
    else cmd_acquire(&ctx, argv, argc);
    if (g_error) {
        FUZZ_CHECK(g_arr == -1 && g_nints == 0, "an error and a reply (%ld, %d)", g_arr, g_nints);
        return false;
    }
    const long want = thr || reserve ? 5 : 4;
    FUZZ_CHECK(g_arr == want && g_nints == want, "a reply of %ld/%d integers, want %ld", g_arr, g_nints, want);
    FUZZ_CHECK(g_ints[0] == 0 || g_ints[0] == 1, "allowed/limited %lld", g_ints[0]);
    FUZZ_CHECK(g_ints[thr ? 2 : 1] >= 0, "remaining %lld", g_ints[thr ? 2 : 1]);
    if (reserve) FUZZ_CHECK(g_ints[4] >= 0 && (g_ints[4] != 0) == (g_ints[0] == 1), "id %lld", g_ints[4]);
    return true;
}

static bool run(size_t c, uint64_t permits, uint64_t t) { return run_cmd(c, permits, t, false); }

/* SETTLE (or CANCEL) the oldest reservation the key's value holds, if it
 * parses and holds one, at time t; whether it was finished. */
static bool finish_oldest(uint64_t actual, uint64_t t, bool cancel)
{
    static value_hdr h;
    if (!g_exists || !parse_header(g_val, g_len, &h) || h.rsv.n == 0) return false;
    char id[24], a[24], at[24];
    snprintf(id, sizeof id, "%llu", (unsigned long long)((uint64_t)h.rsv.nonce << 32 | h.rsv.r[0].ctr));
    snprintf(a, sizeof a, "%llu", (unsigned long long)actual);
    snprintf(at, sizeof at, "%llu", (unsigned long long)t);
    RedisModuleString s[7] = {{cancel ? "SLUICE.CANCEL" : "SLUICE.SETTLE", 13}, {"k", 1},
                              {id, strlen(id)}, {a, strlen(a)}, {"AT", 2}, {at, strlen(at)}};
    RedisModuleString *argv[6];
    int argc = 0;
    for (int i = 0; i < 6; i++)
        if (!(cancel && i == 3)) argv[argc++] = &s[i];
    g_error = false, g_arr = -1, g_nints = 0;
    RedisModuleCtx ctx;
    if (cancel) cmd_cancel(&ctx, argv, argc);
    else cmd_settle(&ctx, argv, argc);
    if (g_error) {
        FUZZ_CHECK(g_arr == -1 && g_nints == 0, "an error and a reply (%ld, %d)", g_arr, g_nints);
        return false;
    }
    FUZZ_CHECK(g_arr == -1 && g_nints == 1 && (g_ints[0] == 0 || g_ints[0] == 1),
               "a finish's reply (%ld, %d, %lld)", g_arr, g_nints, g_ints[0]);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 10) return 0;
    const size_t c = data[0] % N_CASES;
    const uint64_t permits = data[1] == 0xff ? UINT64_MAX : data[1] & 7;
    uint64_t t = 0;
    for (int i = 0; i < 8; i++) t |= (uint64_t)data[2 + i] << (8 * i);
    t &= (uint64_t)INT64_MAX;
    const size_t n = size - 10;
    if (n > sizeof g_val) return 0;
    memcpy(g_val, data + 10, n);
    g_len = n;
    g_exists = n > 0;
    static unsigned char before[sizeof g_val];
    memcpy(before, g_val, n);
    const bool reserve = data[1] != 0xff && (data[1] & 0x08);
    const bool decided = run_cmd(c, permits, t, reserve);
    const bool wrote = g_len != n || memcmp(before, g_val, n) != 0 || (n > 0 && !g_exists);
    if (!decided) /* an error changes nothing */
        FUZZ_CHECK(!wrote, "an error changed the value (%zu -> %zu bytes)", n, g_len);
    if (decided && wrote && g_exists) {
        /* what the module wrote, it reads back: a decision, not an error */
        const bool again = run(c, 0, t);
        FUZZ_CHECK(again, "the value written (%zu bytes) is refused when read back", g_len);
    }
    if (data[1] != 0xff && (data[1] & 0x30)) {
        /* a settle (or cancel) of what the value holds, then read back */
        memcpy(before, g_val, g_len);
        const size_t len = g_len;
        const bool ex = g_exists;
        const bool done = finish_oldest(permits * 3, t, (data[1] & 0x20) != 0);
        if (!done)
            FUZZ_CHECK(g_len == len && g_exists == ex && memcmp(before, g_val, len) == 0,
                       "a refused settle changed the value");
        else if (g_exists && decided) /* the value was one of c's spec */
            FUZZ_CHECK(run(c, 0, t), "the value a settle wrote (%zu bytes) is refused when read back", g_len);
    }
    return 0;
}
