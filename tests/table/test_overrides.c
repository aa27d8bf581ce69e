/* test_overrides.c -- per-key overrides of a table's spec
 * (sluice_table_override_set_at, _remove_at, _count, _get,
 * sluice_table_set_max_overrides; docs/tables.md, "Per-key overrides").
 *
 *   test_premium        docs/tables.md's example: "premium-42" at
 *                       token-bucket 1000/s in a table of 10/s; peek, get,
 *                       count, a composite decision, numbers by hand.
 *   test_against_model  keys whose overrides are set, changed and removed
 *                       at random times, and the table's spec changed
 *                       meanwhile: every field of every decision equals the
 *                       reference model (tests/ref_model.c) changed at the
 *                       same times (ref_model_reconfigure: the rule's
 *                       carry-over), for keys with and without overrides.
 *   test_reclaimed      a key reclaimed at rest, and one removed, find
 *                       their override again when they come back.
 *   test_equal_tags     two keys whose hashes share the 32 bits the
 *                       overrides are sorted by: each found and removed on
 *                       its own.
 *   test_bad_calls      bounds (SLUICE_EFULL, the setter), a bad spec,
 *                       another algorithm or slot width, NULLs, long keys,
 *                       a state too big for the table, a short buffer, no
 *                       memory: a clear error, and nothing changes (count,
 *                       spec, and decisions equal a twin table's).
 *   test_threads        4 threads deciding on keys while the main thread
 *                       sets, changes and removes overrides and changes the
 *                       table's spec (TSan): each key admits at most the
 *                       largest limit, and a last change sees exactly what
 *                       each took.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice.h>

#include "ref_model.h"
#include "table/table.h"
#include "testutil.h"

#define SEC 1000000000ULL
#define MS 1000000ULL
#define ULL(x) ((unsigned long long)(x))

static uint64_t g_seed;
static double g_scale = 1.0;

static sluice_table *mk(const char *spec, size_t max_keys, unsigned flags)
{
    char err[256];
    sluice_table *t = sluice_table_new_flags(spec, max_keys, flags, err, sizeof err);
    if (!t) fprintf(stderr, "%s: %s\n", spec, err);
    assert_non_null(t);
    return t;
}

static void set(sluice_table *t, const char *key, const char *spec, uint64_t at)
{
    char err[256];
    int rc = sluice_table_override_set_at(t, key, strlen(key), spec, at, err, sizeof err);
    if (rc) fprintf(stderr, "%s: %s: %s\n", key, spec, err);
    assert_int_equal(rc, 0);
}

/* decide and check (allowed, remaining, retry_after) */
static void ask(sluice_table *t, const char *key, uint64_t p, uint64_t at, bool ok,
                uint64_t remaining, int64_t retry)
{
    sluice_result r;
    bool got = sluice_table_try_acquire_at(t, key, strlen(key), p, at, &r);
    if (got != ok || r.remaining != remaining || r.retry_after_ns != retry)
        fprintf(stderr, "%s at %llu p=%llu: want %d rem %llu retry %lld, got %d rem %llu retry %lld\n",
                key, ULL(at), ULL(p), ok, ULL(remaining), (long long)retry, got, ULL(r.remaining),
                (long long)r.retry_after_ns);
    assert_true(got == ok);
    assert_int_equal(r.remaining, remaining);
    assert_int_equal(r.retry_after_ns, retry);
}

/* A spec whose state does not fit a packed table's 16 bytes (token-bucket
 * 7/d with a burst of 250000: burst x period / gcd(limit, period) >= 2^64)
 * is refused, as a change of the whole table and as one key's override,
 * with the spec named; nothing changes. */
static void test_unpacked_refused(void **state)
{
    (void)state;
    char err[256];
    sluice_table *t = sluice_table_new("token-bucket 1/d", 100, err, sizeof err);
    assert_non_null(t);
    const char *big = "token-bucket 7/d burst=250000";
    assert_true(sluice_table_try_acquire_at(t, "k", 1, 1, 0, NULL));
    err[0] = 0;
    assert_int_equal(sluice_table_reconfigure_at(t, big, 1, err, sizeof err), SLUICE_EINVAL);
    assert_non_null(strstr(err, big));
    assert_non_null(strstr(err, "16 bytes"));
    err[0] = 0;
    assert_int_equal(sluice_table_override_set_at(t, "k", 1, big, 1, err, sizeof err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err, big));
    assert_non_null(strstr(err, "16 bytes"));
    assert_int_equal(sluice_table_override_count(t), 0);
    /* the key kept its limit: its one permit a day is taken */
    assert_false(sluice_table_try_acquire_at(t, "k", 1, 1, 2, NULL));
    sluice_table_free(t);
}

/* ---- docs/tables.md's example -------------------------------------------- */

static void test_premium(void **state)
{
    (void)state;
    sluice_table *t = mk("token-bucket 10/s", 1000, 0);
    char spec[SLUICE_SPEC_MAX];
    assert_int_equal(sluice_table_override_count(t), 0);
    assert_int_equal(sluice_table_override_get(t, "premium-42", 10, spec, sizeof spec), SLUICE_ENOENT);
    set(t, "premium-42", "token-bucket 1000/s", 0);
    assert_int_equal(sluice_table_override_count(t), 1);
    assert_int_equal(sluice_table_override_get(t, "premium-42", 10, spec, sizeof spec), 0);
    assert_string_equal(spec, "token-bucket 1000/s");
    /* not held yet: peek answers as a fresh key under the override */
    sluice_result r;
    sluice_key_state ks;
    assert_int_equal(sluice_table_peek_at(t, "premium-42", 10, 0, 0, &r, &ks), SLUICE_ENOENT);
    assert_int_equal(r.remaining, 1000);
    assert_int_equal(sluice_table_peek_at(t, "premium-42", 10, 500, 0, &r, NULL), SLUICE_ENOENT);
    assert_true(r.allowed);
    /* 1000 at once for premium-42, 10 for the others */
    ask(t, "premium-42", 600, 0, true, 400, 0);
    ask(t, "premium-42", 401, 0, false, 400, MS); /* 1 more at 1000/s: 1 ms */
    ask(t, "client-7", 10, 0, true, 0, 0);
    ask(t, "client-7", 1, 0, false, 0, 100 * MS);
    ask(t, "client-7", 11, 0, false, 0, -1);
    /* held: peek answers under the override, with its rest time */
    assert_int_equal(sluice_table_peek_at(t, "premium-42", 10, 0, 100 * MS, &r, &ks), 0);
    assert_int_equal(r.remaining, 500); /* 400 + 100 ms at 1000/s */
    assert_int_equal(ks.last_ns, 0);
    assert_int_equal(ks.rest_ns, 600 * MS);
    /* a composite decision sees the override too: 500 from premium-42 and
     * 5 of client-8 at once */
    sluice_limit_ref refs[2] = {sluice_ref_key(t, "premium-42", 10), sluice_ref_key(t, "client-8", 8)};
    assert_false(sluice_composite_try_acquire_at(refs, 2, 11, 100 * MS, &r, NULL)); /* client-8: 10 */
    assert_true(sluice_composite_try_acquire_at(refs, 1, 500, 100 * MS, &r, NULL));
    assert_int_equal(r.remaining, 0);
    /* changed: to 100/s burst=1000 at 200 ms; 100 tokens (0 + 100 ms at
     * 1000/s), refilled at 100/s */
    set(t, "premium-42", "token-bucket 100/s burst=1000", 200 * MS);
    assert_int_equal(sluice_table_override_count(t), 1);
    ask(t, "premium-42", 0, 300 * MS, true, 110, 0);
    /* removed at 300 ms: back to the table's 10/s, tokens capped at 10 */
    assert_int_equal(sluice_table_override_remove_at(t, "premium-42", 10, 300 * MS), 0);
    assert_int_equal(sluice_table_override_count(t), 0);
    assert_int_equal(sluice_table_override_remove_at(t, "premium-42", 10, 300 * MS), SLUICE_ENOENT);
    ask(t, "premium-42", 11, 300 * MS, false, 10, -1);
    ask(t, "premium-42", 10, 300 * MS, true, 0, 0);
    sluice_table_free(t);
}

/* ---- against the reference model ---------------------------------------- */

typedef struct tspec {
    ref_params p;
    char s[128];
} tspec;

/* A random spec of algorithm a over PERIOD 1000 ns (sliding-wheel: 10
 * slots), for which the carry-over is exact: the buckets' rates are in
 * lowest terms over 1000 ns, so every level carried is a whole number of
 * the new unit (docs/c-api.md, "Changing a limit while it runs"). */
static void rand_spec(uint64_t *rs, ref_alg a, bool nodelay, tspec *sp)
{
    static const char *const names[] = {"fixed-window", "sliding-log", "sliding-wheel",
                                        "sliding-approx", "token-bucket", "leaky-bucket"};
    static const uint64_t coprime[] = {1, 3, 7, 9, 11, 13, 17};
    const bool bucket = a == REF_TOKEN_BUCKET || a == REF_LEAKY_BUCKET;
    uint64_t L = bucket ? coprime[tu_splitmix64_below(rs, 7)] : 1 + tu_splitmix64_below(rs, 12);
    uint64_t C = bucket ? 1 + tu_splitmix64_below(rs, 12) : 0;
    sp->p = (ref_params){.alg = a, .limit = L, .period_ns = 1000, .capacity = C,
                         .slots = a == REF_SLIDING_WHEEL ? 10 : 0, .nodelay = nodelay};
    int n = snprintf(sp->s, sizeof sp->s, "%s %llu/1000ns", names[a], ULL(L));
    if (a == REF_TOKEN_BUCKET) snprintf(sp->s + n, sizeof sp->s - (size_t)n, " burst=%llu", ULL(C));
    if (a == REF_LEAKY_BUCKET)
        snprintf(sp->s + n, sizeof sp->s - (size_t)n, " capacity=%llu%s", ULL(C),
                 nodelay ? " nodelay" : "");
    if (a == REF_SLIDING_WHEEL) snprintf(sp->s + n, sizeof sp->s - (size_t)n, " slots=10");
}

#define MKEYS 40

static void against_model(uint64_t *rs, int variant)
{
    const ref_alg a = variant == 6 ? REF_LEAKY_BUCKET : (ref_alg)variant;
    const bool nodelay = variant == 6;
    tspec base, ov[MKEYS];
    rand_spec(rs, a, nodelay, &base);
    sluice_table *t = mk(base.s, 4 * MKEYS, SLUICE_TABLE_RECLAIM_WHEN_FULL);
    ref_model *m[MKEYS];
    bool held[MKEYS] = {false}, has[MKEYS] = {false};
    for (int k = 0; k < MKEYS; k++) assert_non_null(m[k] = ref_model_new(&base.p));
    uint64_t now = 1000;
    char err[256];
    for (int step = 0; step < 4000; step++) {
        int k = (int)tu_splitmix64_below(rs, MKEYS);
        char key[16];
        snprintf(key, sizeof key, "key-%d", k);
        now += tu_splitmix64_below(rs, 60);
        uint64_t at = tu_splitmix64_below(rs, 6) == 0 ? now - tu_splitmix64_below(rs, 1000) : now;
        const uint64_t what = tu_splitmix64_below(rs, 100);
        if (what < 4) { /* set or change an override */
            rand_spec(rs, a, nodelay, &ov[k]);
            set(t, key, ov[k].s, at);
            if (held[k]) {
                assert_true(ref_model_reconfigure(m[k], &ov[k].p, at));
            } else {
                ref_model_free(m[k]);
                assert_non_null(m[k] = ref_model_new(&ov[k].p));
            }
            has[k] = true;
        } else if (what < 6) { /* remove one */
            int rc = sluice_table_override_remove_at(t, key, strlen(key), at);
            assert_int_equal(rc, has[k] ? 0 : SLUICE_ENOENT);
            if (has[k] && held[k]) {
                assert_true(ref_model_reconfigure(m[k], &base.p, at));
            } else if (has[k]) {
                ref_model_free(m[k]);
                assert_non_null(m[k] = ref_model_new(&base.p));
            }
            has[k] = false;
        } else if (what < 7) { /* change the table's spec: keys without one */
            rand_spec(rs, a, nodelay, &base);
            int rc = sluice_table_reconfigure_at(t, base.s, at, err, sizeof err);
            if (rc) fprintf(stderr, "%s: %s\n", base.s, err);
            assert_int_equal(rc, 0);
            for (int j = 0; j < MKEYS; j++) {
                if (has[j]) continue;
                if (held[j]) {
                    assert_true(ref_model_reconfigure(m[j], &base.p, at));
                } else {
                    ref_model_free(m[j]);
                    assert_non_null(m[j] = ref_model_new(&base.p));
                }
            }
        } else { /* decide */
            uint64_t p = tu_splitmix64_below(rs, 5);
            sluice_result g;
            ref_result w;
            bool ok = sluice_table_try_acquire_at(t, key, strlen(key), p, at, &g);
            bool want = ref_model_decide(m[k], p, at, &w);
            if (ok != want || g.remaining != w.remaining || g.retry_after_ns != w.retry_after_ns ||
                g.wait_ns != w.wait_ns)
                fprintf(stderr,
                        "seed %llu: %s (override %s) p=%llu at %llu: got %d rem %llu retry %lld wait %llu, "
                        "want %d rem %llu retry %lld wait %llu\n",
                        ULL(g_seed), key, has[k] ? ov[k].s : "none", ULL(p), ULL(at), ok,
                        ULL(g.remaining), (long long)g.retry_after_ns, ULL(g.wait_ns), want,
                        ULL(w.remaining), (long long)w.retry_after_ns, ULL(w.wait_ns));
            assert_true(ok == want);
            assert_int_equal(g.remaining, w.remaining);
            assert_int_equal(g.retry_after_ns, w.retry_after_ns);
            assert_int_equal(g.wait_ns, w.wait_ns);
            if (ok && p) held[k] = true;
        }
    }
    size_t n = 0;
    for (int k = 0; k < MKEYS; k++) n += has[k];
    assert_int_equal(sluice_table_override_count(t), n);
    for (int k = 0; k < MKEYS; k++) ref_model_free(m[k]);
    sluice_table_free(t);
}

static void test_against_model(void **state)
{
    (void)state;
    uint64_t rs = g_seed ^ 0x0e44;
    for (size_t rep = 0; rep < tu_scaled(6, g_scale); rep++)
        for (int v = 0; v < 7; v++) against_model(&rs, v);
}

/* ---- the override outlives the key's entry -------------------------------- */

static void test_reclaimed(void **state)
{
    (void)state;
    sluice_table *t = mk("fixed-window 2/s", 20, 0);
    set(t, "vip", "fixed-window 50/s", 0);
    ask(t, "vip", 40, 0, true, 10, 0);
    /* a second later the key is at rest; it stays in place until its room
     * is wanted: the other keys fill the table of 20, and the 20th takes
     * its place */
    for (int i = 0; i < 50; i++) {
        char key[16];
        snprintf(key, sizeof key, "other-%d", i);
        sluice_table_try_acquire_at(t, key, strlen(key), 1, 3 * SEC + (uint64_t)i * 5 * MS, NULL);
    }
    assert_int_equal(sluice_table_peek_at(t, "vip", 3, 0, 4 * SEC, NULL, NULL), SLUICE_ENOENT);
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    assert_true(st.reclaimed >= 1);
    ask(t, "vip", 45, 4 * SEC, true, 5, 0); /* made again, under the override */
    /* removed by hand: the override stays with the key */
    assert_int_equal(sluice_table_remove(t, "vip", 3), 0);
    assert_int_equal(sluice_table_override_count(t), 1);
    ask(t, "vip", 50, 4 * SEC, true, 0, 0);
    assert_int_equal(sluice_table_reset(t, "vip", 3), 0);
    ask(t, "vip", 50, 4 * SEC, true, 0, 0);
    sluice_table_free(t);
}

/* ---- keys whose hashes share their low 32 bits ---------------------------- */

typedef struct tagged {
    uint32_t tag, n;
} tagged;

static int by_tag(const void *a, const void *b)
{
    const tagged *x = a, *y = b;
    return x->tag < y->tag ? -1 : x->tag > y->tag ? 1 : x->n < y->n ? -1 : x->n > y->n;
}

/* The shard's array of overrides is sorted by the hash's low 32 bits (the
 * tag); keys with equal tags are told apart by their bytes.  Two such keys
 * (found by the birthday bound among 2^18 keys under the table's seed) and
 * a third: each set, found and removed on its own. */
static void test_equal_tags(void **state)
{
    (void)state;
    sluice_table *t = mk("fixed-window 2/s", 16, 0); /* one shard */
    uint64_t seed[2];
    sluice__table_seed(t, seed);
    const uint32_t n = 1u << 18;
    tagged *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (uint32_t i = 0; i < n; i++) {
        char key[16];
        int len = snprintf(key, sizeof key, "u%u", i);
        v[i] = (tagged){(uint32_t)sluice__siphash13(seed, key, (size_t)len), i};
    }
    qsort(v, n, sizeof *v, by_tag);
    uint32_t a = UINT32_MAX, b = 0;
    for (uint32_t i = 1; i < n && a == UINT32_MAX; i++)
        if (v[i].tag == v[i - 1].tag) {
            a = v[i - 1].n;
            b = v[i].n;
        }
    free(v);
    assert_true(a != UINT32_MAX); /* about 8 pairs expected */
    char ka[16], kb[16], spec[SLUICE_SPEC_MAX];
    snprintf(ka, sizeof ka, "u%u", a);
    snprintf(kb, sizeof kb, "u%u", b);
    set(t, ka, "fixed-window 5/s", 0);
    set(t, "other", "fixed-window 6/s", 0);
    set(t, kb, "fixed-window 7/s", 0);
    set(t, "fourth", "fixed-window 8/s", 0); /* the array full: 4 of 4 */
    ask(t, ka, 5, 0, true, 0, 0);
    ask(t, kb, 7, 0, true, 0, 0);
    for (int k = 0; k < 2; k++) { /* remove the first (then the second) */
        const char *gone = k == 0 ? ka : kb, *kept = k == 0 ? kb : ka;
        assert_int_equal(sluice_table_override_remove_at(t, gone, strlen(gone), 0), 0);
        assert_int_equal(sluice_table_override_get(t, gone, strlen(gone), spec, sizeof spec), SLUICE_ENOENT);
        if (k == 0) {
            assert_int_equal(sluice_table_override_get(t, kept, strlen(kept), spec, sizeof spec), 0);
            assert_string_equal(spec, "fixed-window 7/s");
        }
        assert_int_equal(sluice_table_override_get(t, "other", 5, spec, sizeof spec), 0);
        assert_string_equal(spec, "fixed-window 6/s");
    }
    /* removed ka at 0 carried 5 admitted into a window of 2: refused */
    ask(t, ka, 1, 0, false, 0, (int64_t)SEC);
    assert_int_equal(sluice_table_override_count(t), 2);
    sluice_table_free(t);
}

/* ---- bad calls -------------------------------------------------------------- */

/* t and twin decide alike on the keys a, b and premium */
static void expect_twins(sluice_table *t, sluice_table *twin, uint64_t t0)
{
    static const char *const keys[] = {"a", "b", "premium"};
    for (uint64_t k = 0; k < 30; k++) {
        sluice_result x, y;
        const char *key = keys[k % 3];
        uint64_t at = t0 + k * 37 * MS;
        bool ox = sluice_table_try_acquire_at(t, key, strlen(key), k % 4, at, &x);
        bool oy = sluice_table_try_acquire_at(twin, key, strlen(key), k % 4, at, &y);
        assert_true(ox == oy);
        assert_int_equal(x.remaining, y.remaining);
        assert_int_equal(x.retry_after_ns, y.retry_after_ns);
    }
}

static void bad_set(const char *base, const char *to, const char *token, int code)
{
    sluice_table *t = mk(base, 16, 0), *twin = mk(base, 16, 0);
    set(t, "premium", base, 0);
    set(twin, "premium", base, 0);
    assert_true(sluice_table_try_acquire_at(t, "premium", 7, 2, 10 * MS, NULL));
    assert_true(sluice_table_try_acquire_at(twin, "premium", 7, 2, 10 * MS, NULL));
    char err[256];
    int rc = sluice_table_override_set_at(t, "premium", 7, to, 20 * MS, err, sizeof err);
    if (rc != code || !strstr(err, token))
        fprintf(stderr, "%s -> %s: rc %d, err \"%s\" (want %d naming %s)\n", base, to ? to : "NULL",
                rc, err, code, token);
    assert_int_equal(rc, code);
    assert_non_null(strstr(err, token));
    rc = sluice_table_override_set_at(t, "new", 3, to, 20 * MS, err, sizeof err);
    assert_int_equal(rc, code);
    assert_int_equal(sluice_table_override_count(t), 1);
    expect_twins(t, twin, 5 * MS);
    sluice_table_free(t);
    sluice_table_free(twin);
}

static void test_bad_calls(void **state)
{
    (void)state;
    bad_set("token-bucket 5/s", "token-bucket 0/s", "\"0/s\"", SLUICE_ERANGE);
    bad_set("token-bucket 5/s", "token-bucket 5/s burts=2", "\"burts=2\"", SLUICE_EINVAL);
    bad_set("token-bucket 5/s", "tokenbucket 5/s", "\"tokenbucket\"", SLUICE_EINVAL);
    bad_set("token-bucket 5/s", NULL, "NULL", SLUICE_EINVAL);
    bad_set("token-bucket 5/s", "leaky-bucket 5/s", "\"leaky-bucket\"", SLUICE_EINVAL);
    bad_set("sliding-wheel 5/s slots=10", "sliding-wheel 5/s slots=5", "slot width", SLUICE_EINVAL);
    bad_set("token-bucket 3/1000000000000000000ns", "token-bucket 3/1000000000000000000ns burst=20",
            "16 bytes", SLUICE_EINVAL);

    char err[256], spec[SLUICE_SPEC_MAX];
    sluice_table *t = mk("fixed-window 5/s", 16, 0), *twin = mk("fixed-window 5/s", 16, 0);
    /* NULLs and bad keys */
    assert_int_equal(sluice_table_override_set_at(NULL, "a", 1, "fixed-window 1/s", 0, err, sizeof err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err, "NULL"));
    assert_int_equal(sluice_table_override_set_at(t, NULL, 3, "fixed-window 1/s", 0, err, sizeof err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err, "key"));
    static char longkey[SLUICE_MAX_KEY_BYTES + 1];
    assert_int_equal(sluice_table_override_set_at(t, longkey, sizeof longkey, "fixed-window 1/s", 0,
                                                  err, sizeof err),
                     0); /* a long key is a key (its digest), removed below */
    assert_int_equal(sluice_table_override_set_at(t, "a", 1, "fixed-window x/s", 0, NULL, 0),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_table_override_remove_at(NULL, "a", 1, 0), SLUICE_EINVAL);
    assert_int_equal(sluice_table_override_remove_at(t, NULL, 1, 0), SLUICE_EINVAL);
    assert_int_equal(sluice_table_override_remove_at(t, longkey, sizeof longkey, 0), 0);
    assert_int_equal(sluice_table_override_remove_at(t, "a", 1, 0), SLUICE_ENOENT);
    assert_int_equal(sluice_table_override_get(NULL, "a", 1, spec, sizeof spec), SLUICE_EINVAL);
    assert_int_equal(sluice_table_override_get(t, NULL, 1, spec, sizeof spec), SLUICE_EINVAL);
    assert_int_equal(sluice_table_override_count(NULL), 0);
    assert_int_equal(sluice_table_set_max_overrides(NULL, 5), SLUICE_EINVAL);
    assert_int_equal(sluice_table_set_max_overrides(t, (size_t)SLUICE_TABLE_OVERRIDES_MAX + 1),
                     SLUICE_EINVAL);
    /* the empty key is a key */
    set(t, "", "fixed-window 9/s", 0);
    assert_int_equal(sluice_table_override_get(t, NULL, 0, spec, sizeof spec), 0);
    assert_string_equal(spec, "fixed-window 9/s");
    assert_int_equal(sluice_table_override_get(t, "", 0, spec, 5), SLUICE_ENOSPC);
    assert_int_equal(sluice_table_override_remove_at(t, NULL, 0, 0), 0);
    /* the bound: 2 */
    assert_int_equal(sluice_table_set_max_overrides(t, 2), 0);
    set(t, "x", "fixed-window 7/s", 0);
    set(t, "premium", "fixed-window 8/s", 0);
    assert_int_equal(sluice_table_override_set_at(t, "y", 1, "fixed-window 9/s", 0, err, sizeof err),
                     SLUICE_EFULL);
    assert_non_null(strstr(err, "sluice_table_set_max_overrides"));
    set(t, "x", "fixed-window 6/s", 0); /* a change is not one more */
    assert_int_equal(sluice_table_set_max_overrides(t, 1), SLUICE_EINVAL); /* 2 held */
    assert_int_equal(sluice_table_override_count(t), 2);
    assert_int_equal(sluice_table_override_remove_at(t, "x", 1, 0), 0);
    assert_int_equal(sluice_table_set_max_overrides(t, 1), 0);
    assert_int_equal(sluice_table_override_get(t, "premium", 7, spec, sizeof spec), 0);
    assert_string_equal(spec, "fixed-window 8/s");
    set(twin, "premium", "fixed-window 8/s", 0);
    expect_twins(t, twin, 0);
    expect_twins(t, twin, 2 * SEC);
    sluice_table_free(t);
    sluice_table_free(twin);
    /* out of memory: nothing changes (tables made and freed with the
     * counting allocator installed) */
    assert_int_equal(tu_alloc_install(), 0);
    t = mk("fixed-window 5/s", 16, 0);
    twin = mk("fixed-window 5/s", 16, 0);
    set(t, "premium", "fixed-window 8/s", 0);
    set(twin, "premium", "fixed-window 8/s", 0);
    for (long n = 0; n < 4; n++) {
        tu_alloc_arm(n, true);
        char key[8];
        snprintf(key, sizeof key, "k%ld", n);
        int rc = sluice_table_override_set_at(t, key, strlen(key), "fixed-window 3/s", 0, err,
                                              sizeof err);
        tu_alloc_disarm();
        if (rc == 0) { /* enough calls succeeded: undo */
            assert_int_equal(sluice_table_override_remove_at(t, key, strlen(key), 0), 0);
            continue;
        }
        assert_int_equal(rc, SLUICE_ENOMEM);
        assert_non_null(strstr(err, "memory"));
        assert_int_equal(sluice_table_override_count(t), 1);
        assert_int_equal(sluice_table_override_get(t, key, strlen(key), spec, sizeof spec),
                         SLUICE_ENOENT);
    }
    expect_twins(t, twin, 2 * SEC);
    sluice_table_free(t);
    sluice_table_free(twin);
    assert_int_equal(tu_alloc_uninstall(), 0);
}

/* ---- threads ------------------------------------------------------------ */

#define THREADS 4
#define TKEYS 16

typedef struct tctx {
    sluice_table *t;
    uint64_t at;
    _Atomic bool stop;
    _Atomic unsigned ready;
    _Atomic uint64_t admitted[TKEYS];
} tctx;

static void *decider(void *v)
{
    tctx *c = v;
    uint64_t rs = g_seed ^ (uint64_t)(uintptr_t)&rs;
    uint64_t mine[TKEYS] = {0};
    atomic_fetch_add(&c->ready, 1);
    for (unsigned k = 0; !atomic_load(&c->stop) || k < 500; k++) {
        unsigned key = (unsigned)tu_splitmix64_below(&rs, TKEYS);
        if (tu_splitmix64_below(&rs, 8) == 0)
            sluice_table_peek_at(c->t, &key, sizeof key, 1, c->at, NULL, NULL);
        else if (sluice_table_try_acquire_at(c->t, &key, sizeof key, 1, c->at, NULL))
            mine[key]++;
        if (k > 200000) break;
    }
    for (int i = 0; i < TKEYS; i++) atomic_fetch_add(&c->admitted[i], mine[i]);
    return NULL;
}

/* Every limit is at most 50 per day and every request at one instant: a
 * key can never admit more than 50, whatever the order of the changes. */
static void threads_case(const char *const specs[3], uint64_t final_room)
{
    char err[256];
    tctx c = {.at = 10 * SEC};
    c.t = mk(specs[0], 4 * TKEYS, 0);
    atomic_init(&c.stop, false);
    atomic_init(&c.ready, 0);
    for (int i = 0; i < TKEYS; i++) atomic_init(&c.admitted[i], 0);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, decider, &c), 0);
    while (atomic_load(&c.ready) < THREADS) {
    }
    uint64_t rs = g_seed ^ 0x7b;
    for (int k = 0; k < 600; k++) {
        unsigned key = (unsigned)tu_splitmix64_below(&rs, TKEYS / 2); /* half the keys */
        switch (tu_splitmix64_below(&rs, 4)) {
        case 0:
            sluice_table_override_remove_at(c.t, &key, sizeof key, c.at);
            break;
        case 1:
            assert_int_equal(sluice_table_reconfigure_at(c.t, specs[k % 3], c.at, err, sizeof err), 0);
            break;
        default:
            assert_int_equal(sluice_table_override_set_at(c.t, &key, sizeof key, specs[k % 3], c.at,
                                                          err, sizeof err),
                             0);
        }
    }
    atomic_store(&c.stop, true);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    for (unsigned key = 0; key < TKEYS; key++) /* all back to the table's spec */
        sluice_table_override_remove_at(c.t, &key, sizeof key, c.at);
    assert_int_equal(sluice_table_override_count(c.t), 0);
    char last[64];
    snprintf(last, sizeof last, "%s", specs[0]);
    char *slash = strchr(last, ' ');
    assert_non_null(slash);
    snprintf(slash + 1, sizeof last - (size_t)(slash + 1 - last), "%llu/d", ULL(final_room));
    assert_int_equal(sluice_table_reconfigure_at(c.t, last, c.at, err, sizeof err), 0);
    for (unsigned key = 0; key < TKEYS; key++) {
        uint64_t n = atomic_load(&c.admitted[key]);
        assert_true(n <= 50);
        sluice_result r;
        sluice_table_peek_at(c.t, &key, sizeof key, 0, c.at, &r, NULL);
        assert_int_equal(r.remaining, final_room - n);
    }
    sluice_table_free(c.t);
}

static void test_threads(void **state)
{
    (void)state;
    static const char *const fw[3] = {"fixed-window 20/d", "fixed-window 50/d", "fixed-window 35/d"};
    static const char *const log[3] = {"sliding-log 20/d", "sliding-log 50/d", "sliding-log 35/d"};
    for (size_t rep = 0; rep < tu_scaled(3, g_scale); rep++) {
        threads_case(fw, 70);
        threads_case(log, 70);
    }
}

int main(void)
{
    g_seed = tu_env_seed();
    g_scale = tu_env_scale(1.0);
    printf("SLUICE_TEST_SEED=%llu\n", ULL(g_seed));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_premium),
        cmocka_unit_test(test_against_model),
        cmocka_unit_test(test_reclaimed),
        cmocka_unit_test(test_equal_tags),
        cmocka_unit_test(test_bad_calls),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_unpacked_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
