/* test_table_ops.c -- key operations on tables: sluice_table_remove,
 * sluice_table_reset, sluice_table_peek_at and sluice_table_scan
 * (include/sluice.h, "Key operations on tables").
 *
 *   test_remove          held, missing, twice, empty and long keys; the
 *                        next request starts fresh; the place is freed.
 *   test_reset           the same answers as a fresh key; 0 for a key not
 *                        held, which stays not held.
 *   test_bad_args        NULL table, a key one byte too long, a NULL key
 *                        with keylen > 0, for every operation, and the
 *                        scan's NULL callback/cursor and count 0:
 *                        SLUICE_EINVAL, nothing lost; a scan from any
 *                        cursor value ends, giving each key at most once.
 *   test_peek_traces     random traces over short and long keys for every
 *                        algorithm variant: before each decision a peek on
 *                        the table, then the same decision on a twin table
 *                        and on the reference model (ref_model.h), then the
 *                        decision on the table itself.  Peek = twin = model
 *                        in every field; the table then decides as its twin
 *                        (the peek wrote nothing); held or missing as the
 *                        trace says; last_ns the model's latest admission and
 *                        rest_ns a time at which the model is at rest.
 *   test_peek_pure       peeks of missing keys make nothing; peeks far in
 *                        the future reclaim nothing and count nothing.
 *   test_scan_quiet      a table nothing changes: each key exactly once
 *                        (keys of 0, 5, 16, 17, 300 and 5000 bytes), for
 *                        counts 1, 2, 7 and 10^6; no call looks at more than
 *                        `count` places; cursor 0 at the end; an empty
 *                        table; a callback that stops the scan and one that
 *                        removes each key it is given.
 *   test_scan_concurrent 2 threads insert, remove and re-insert churn keys
 *                        and move time on (so the wheel reclaims the churn
 *                        keys at rest, and insertions and removals move the
 *                        entries of the probe runs a slot on and back)
 *                        while the main thread scans with random small
 *                        counts, in a full one-shard table (index load 0.8)
 *                        and in one of 16 shards: every stable key (held
 *                        throughout) is given exactly once in every full
 *                        scan, every key given is one that was made (the
 *                        copy is whole), each call's work is at most its
 *                        count.  A cursor over slots instead of the hash
 *                        order fails it at once (keys missed and given
 *                        twice).  Run under TSan too.
 *
 * SLUICE_TEST_SEED sets the random seed (printed); SLUICE_STRESS_SCALE
 * scales the repetitions.
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
#include <sched.h>
#include <string.h>

#include "table/table.h"
#include "ref_model.h"
#include "testutil.h"

#define SEC 1000000000ULL
#define MS 1000000ULL
#define ULL(x) ((unsigned long long)(x))

static uint64_t g_seed;
static double g_scale = 1.0;

static sluice_table *mk(const char *spec, size_t max_keys)
{
    char err[256];
    sluice_table *t = sluice_table_new(spec, max_keys, err, sizeof err);
    if (!t) fail_msg("%s: %s", spec, err);
    return t;
}

static bool ask(sluice_table *t, const char *key, uint64_t p, uint64_t now, sluice_result *r)
{
    return sluice_table_try_acquire_at(t, key, strlen(key), p, now, r);
}

static uint64_t keys_held(const sluice_table *t)
{
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    return st.keys;
}

static int peek(sluice_table *t, const void *key, size_t keylen, uint64_t p, uint64_t now,
                sluice_result *r)
{
    sluice_key_state ks;
    return sluice_table_peek_at(t, key, keylen, p, now, r, &ks);
}

/* ---- remove and reset --------------------------------------------------- */

static void test_remove(void **state)
{
    (void)state;
    sluice_table *t = mk("fixed-window 3/s", 4);
    sluice_result r;
    const char *lng = "a key that is longer than sixteen bytes";
    for (int i = 0; i < 3; i++) {
        assert_true(ask(t, "a", 1, SEC, &r));
        assert_true(ask(t, lng, 1, SEC, &r));
        assert_true(sluice_table_try_acquire_at(t, NULL, 0, 1, SEC, &r)); /* the empty key */
    }
    assert_false(ask(t, "a", 1, SEC, &r));
    assert_int_equal(keys_held(t), 3);

    assert_int_equal(sluice_table_remove(t, "a", 1), 0);
    assert_int_equal(keys_held(t), 2);
    assert_int_equal(sluice_table_remove(t, "a", 1), SLUICE_ENOENT); /* twice */
    assert_int_equal(sluice_table_remove(t, "b", 1), SLUICE_ENOENT); /* never made */
    assert_int_equal(peek(t, "a", 1, 0, SEC, &r), SLUICE_ENOENT);
    /* the next request starts fresh: 3 more in the same window */
    assert_true(ask(t, "a", 1, SEC, &r));
    assert_int_equal(r.remaining, 2);

    /* long and empty keys; the others are untouched */
    assert_int_equal(sluice_table_remove(t, lng, strlen(lng)), 0);
    assert_int_equal(sluice_table_remove(t, lng, strlen(lng) - 1), SLUICE_ENOENT); /* a prefix */
    assert_true(ask(t, lng, 3, SEC, &r));
    assert_int_equal(sluice_table_remove(t, NULL, 0), 0);
    assert_int_equal(sluice_table_remove(t, "", 0), SLUICE_ENOENT);
    assert_true(ask(t, "", 3, SEC, &r));
    assert_false(ask(t, "a", 3, SEC, &r)); /* "a" kept its one admission */
    assert_true(ask(t, "a", 2, SEC, &r));

    /* the place is freed: a full table takes a new key after a remove */
    assert_true(ask(t, "z", 1, SEC, &r));
    assert_int_equal(keys_held(t), 4);
    assert_false(ask(t, "y", 1, SEC, &r));
    assert_int_equal(r.error, SLUICE_EFULL);
    assert_int_equal(sluice_table_remove(t, "z", 1), 0);
    assert_true(ask(t, "y", 1, SEC, &r));
    assert_int_equal(keys_held(t), 4);

    /* the window logs free their ring (ASan/valgrind would tell) */
    sluice_table *w = mk("sliding-log 5/s", 8);
    for (int i = 0; i < 5; i++) assert_true(ask(w, lng, 1, (uint64_t)i, &r));
    assert_int_equal(sluice_table_remove(w, lng, strlen(lng)), 0);
    assert_true(ask(w, lng, 5, 5, &r));
    sluice_table_free(w);
    sluice_table_free(t);
}

static void test_reset(void **state)
{
    (void)state;
    sluice_table *t = mk("token-bucket 1/s burst=4", 8);
    sluice_result r, f;
    const char *lng = "another key longer than sixteen";
    assert_true(ask(t, "k", 4, 10 * SEC, &r));
    assert_true(ask(t, lng, 3, 10 * SEC, &r));
    assert_false(ask(t, "k", 1, 10 * SEC, &r));
    assert_int_equal(sluice_table_reset(t, "k", 1), 0);
    assert_int_equal(sluice_table_reset(t, lng, strlen(lng)), 0);
    assert_int_equal(keys_held(t), 0);
    /* answered as a fresh key, and then decided as one */
    assert_int_equal(peek(t, "k", 1, 0, 10 * SEC, &r), SLUICE_ENOENT);
    assert_int_equal(peek(t, "never", 5, 0, 10 * SEC, &f), SLUICE_ENOENT);
    assert_int_equal(r.remaining, 4);
    assert_int_equal(f.remaining, 4);
    assert_true(ask(t, "k", 4, 10 * SEC, &r));
    assert_true(ask(t, lng, 4, 10 * SEC, &r));
    /* a key not held: 0, and still not held */
    assert_int_equal(sluice_table_reset(t, "never", 5), 0);
    assert_int_equal(sluice_table_reset(t, NULL, 0), 0);
    assert_int_equal(peek(t, "never", 5, 0, 10 * SEC, &r), SLUICE_ENOENT);
    assert_int_equal(keys_held(t), 2);
    sluice_table_free(t);
}

/* ---- bad arguments ------------------------------------------------------ */

static int count_cb(const void *key, size_t keylen, const sluice_key_state *ks, void *arg)
{
    (void)key;
    (void)keylen;
    (void)ks;
    (*(size_t *)arg)++;
    return 0;
}

static void test_bad_args(void **state)
{
    (void)state;
    sluice_table *t = mk("token-bucket 1/s burst=3", 100);
    sluice_result r;
    sluice_key_state ks;
    char *big = calloc(SLUICE_MAX_KEY_BYTES + 1, 1);
    assert_non_null(big);
    assert_true(ask(t, "held", 2, SEC, &r));
    assert_true(sluice_table_try_acquire_at(t, big, SLUICE_MAX_KEY_BYTES, 1, SEC, &r));

    assert_int_equal(sluice_table_remove(NULL, "held", 4), SLUICE_EINVAL);
    assert_int_equal(sluice_table_remove(t, big, SLUICE_MAX_KEY_BYTES + 1), SLUICE_ENOENT);
    assert_int_equal(sluice_table_remove(t, NULL, 4), SLUICE_EINVAL);
    assert_int_equal(sluice_table_reset(NULL, "held", 4), SLUICE_EINVAL);
    assert_int_equal(sluice_table_reset(t, big, SLUICE_MAX_KEY_BYTES + 1), 0); /* a digest, not held */
    assert_int_equal(sluice_table_reset(t, NULL, 4), SLUICE_EINVAL);
    memset(&r, 0x55, sizeof r);
    memset(&ks, 0x55, sizeof ks);
    assert_int_equal(sluice_table_peek_at(NULL, "held", 4, 1, SEC, &r, &ks), SLUICE_EINVAL);
    assert_int_equal(r.error, SLUICE_EINVAL);
    assert_false(r.allowed);
    assert_int_equal(r.retry_after_ns, -1);
    assert_int_equal(ks.last_ns, 0);
    assert_int_equal(sluice_table_peek_at(t, big, SLUICE_MAX_KEY_BYTES + 1, 1, SEC, &r, NULL),
                     SLUICE_ENOENT);
    assert_true(r.allowed);
    assert_int_equal(sluice_table_peek_at(t, NULL, 4, 1, SEC, NULL, NULL), SLUICE_EINVAL);
    /* no result, no state: the answer is the return code alone */
    assert_int_equal(sluice_table_peek_at(t, "absent", 6, 1, SEC, NULL, NULL), SLUICE_ENOENT);
    assert_int_equal(sluice_table_peek_at(t, "held", 4, 1, SEC, NULL, NULL), 0);

    /* nothing lost: both keys held with their state */
    assert_int_equal(keys_held(t), 2);
    assert_int_equal(sluice_table_peek_at(t, "held", 4, 0, SEC, &r, &ks), 0);
    assert_int_equal(r.remaining, 1);
    assert_int_equal(ks.last_ns, SEC);
    assert_int_equal(sluice_table_peek_at(t, big, SLUICE_MAX_KEY_BYTES, 0, SEC, &r, NULL), 0);
    assert_int_equal(r.remaining, 2);

    /* the scan: a table of 100 keys has one shard of 100 entries */
    size_t n = 0;
    uint64_t next = 12345;
    assert_int_equal(sluice_table_scan(NULL, 0, 10, count_cb, &n, &next), SLUICE_EINVAL);
    assert_int_equal(sluice_table_scan(t, 0, 10, NULL, &n, &next), SLUICE_EINVAL);
    assert_int_equal(sluice_table_scan(t, 0, 10, count_cb, &n, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_table_scan(t, 0, 0, count_cb, &n, &next), SLUICE_EINVAL);
    assert_int_equal(n, 0);
    assert_int_equal(next, 12345);
    /* every value is a point of the scan's order (shard, home slot, hash):
     * a scan from anywhere gives some of the 2 keys, once each, and ends */
    static const uint64_t anywhere[] = {101, (uint64_t)1 << 32, UINT64_MAX - 1, UINT64_MAX};
    for (size_t a = 0; a < sizeof anywhere / sizeof *anywhere; a++) {
        n = 0;
        next = anywhere[a];
        for (int calls = 0;; calls++) {
            assert_true(calls < 1000);
            assert_int_equal(sluice_table_scan(t, next, 10, count_cb, &n, &next), 0);
            if (next == 0) break;
        }
        assert_true(n <= 2);
    }
    n = 0;
    next = 0;
    do assert_int_equal(sluice_table_scan(t, next, 1000, count_cb, &n, &next), 0);
    while (next != 0);
    assert_int_equal(n, 2);
    assert_int_equal(keys_held(t), 2);
    free(big);
    sluice_table_free(t);
}

/* ---- peek --------------------------------------------------------------- */

typedef struct variant {
    const char *spec;
    ref_params p;
} variant;

static const variant variants[] = {
    {"fixed-window 4/1000ns", {.alg = REF_FIXED_WINDOW, .limit = 4, .period_ns = 1000}},
    {"sliding-log 4/1000ns", {.alg = REF_SLIDING_LOG, .limit = 4, .period_ns = 1000}},
    {"sliding-wheel 4/1000ns slots=5",
     {.alg = REF_SLIDING_WHEEL, .limit = 4, .period_ns = 1000, .slots = 5}},
    {"sliding-approx 4/1000ns", {.alg = REF_SLIDING_APPROX, .limit = 4, .period_ns = 1000}},
    {"token-bucket 3/997ns burst=5",
     {.alg = REF_TOKEN_BUCKET, .limit = 3, .period_ns = 997, .capacity = 5}},
    {"leaky-bucket 3/997ns capacity=5",
     {.alg = REF_LEAKY_BUCKET, .limit = 3, .period_ns = 997, .capacity = 5}},
    {"leaky-bucket 3/997ns capacity=5 nodelay",
     {.alg = REF_LEAKY_BUCKET, .limit = 3, .period_ns = 997, .capacity = 5, .nodelay = true}},
};

#define NKEYS 5

static void same_result(const sluice_result *a, const sluice_result *b, const char *what,
                        const char *spec, size_t step)
{
    if (a->allowed == b->allowed && a->wait_ns == b->wait_ns && a->remaining == b->remaining &&
        a->retry_after_ns == b->retry_after_ns && a->error == b->error)
        return;
    fail_msg("%s, step %zu, %s: allowed %d/%d wait %llu/%llu remaining %llu/%llu retry %lld/%lld "
             "error %d/%d",
             spec, step, what, a->allowed, b->allowed, ULL(a->wait_ns), ULL(b->wait_ns),
             ULL(a->remaining), ULL(b->remaining), (long long)a->retry_after_ns,
             (long long)b->retry_after_ns, a->error, b->error);
}

static void test_peek_traces(void **state)
{
    (void)state;
    uint64_t rs = g_seed ^ 0x7065656bULL;
    static const char *const keys[NKEYS] = {"", "k", "sixteen-bytes-xx", "seventeen-bytes-x",
                                            "a much longer key, well past the inline sixteen"};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const variant *va = &variants[v];
        for (size_t round = 0; round < tu_scaled(4, g_scale); round++) {
            sluice_table *t = mk(va->spec, 64), *twin = mk(va->spec, 64);
            ref_model *m[NKEYS];
            bool made[NKEYS] = {false};
            for (int k = 0; k < NKEYS; k++) assert_non_null(m[k] = ref_model_new(&va->p));
            uint64_t now = tu_splitmix64_below(&rs, 5000);
            const uint64_t cap = ref_model_max_grant(m[0]);
            for (size_t step = 0; step < tu_scaled(1500, g_scale); step++) {
                int k = (int)tu_splitmix64_below(&rs, NKEYS);
                const char *key = keys[k];
                size_t kl = strlen(key);
                if (tu_splitmix64_below(&rs, 40) == 0) { /* remove (or reset) it from both */
                    int rc = tu_splitmix64_below(&rs, 2) ? sluice_table_remove(t, key, kl)
                                               : sluice_table_reset(t, key, kl);
                    int rc2 = sluice_table_remove(twin, key, kl);
                    assert_true(rc == 0 || rc == SLUICE_ENOENT);
                    assert_true(rc2 == 0 || rc2 == SLUICE_ENOENT);
                    if (made[k] && !ref_model_at_rest(m[k], now)) { /* must be held */
                        assert_int_equal(rc2, 0);
                    }
                    ref_model_free(m[k]);
                    assert_non_null(m[k] = ref_model_new(&va->p));
                    made[k] = false;
                    continue;
                }
                now += tu_splitmix64_below(&rs, 4) == 0 ? 0 : tu_splitmix64_below(&rs, 700);
                uint64_t p = tu_splitmix64_below(&rs, cap + 2); /* probes .. beyond capacity */
                sluice_result pr, tr, ar;
                sluice_key_state ks;
                memset(&pr, 0x55, sizeof pr);
                const uint64_t latest = ref_model_latest(m[k]);
                int rc = sluice_table_peek_at(t, key, kl, p, now, &pr, &ks);
                if (!made[k]) {
                    assert_int_equal(rc, SLUICE_ENOENT);
                } else if (!ref_model_at_rest(m[k], now)) {
                    assert_int_equal(rc, 0);
                }
                if (rc == 0) {
                    assert_int_equal(ks.last_ns, latest);
                    assert_true(ref_model_at_rest(m[k], ks.rest_ns));
                } else {
                    assert_int_equal(rc, SLUICE_ENOENT);
                    assert_int_equal(ks.last_ns, 0);
                    assert_int_equal(ks.rest_ns, 0);
                }
                sluice_table_try_acquire_at(twin, key, kl, p, now, &tr);
                ref_result mr;
                ref_model_decide(m[k], p, now, &mr);
                sluice_result ms = {.allowed = mr.allowed, .wait_ns = mr.wait_ns,
                                    .remaining = mr.remaining,
                                    .retry_after_ns = mr.retry_after_ns};
                same_result(&pr, &tr, "peek vs twin", va->spec, step);
                same_result(&tr, &ms, "twin vs model", va->spec, step);
                /* the peek wrote nothing: the table decides as its twin */
                sluice_table_try_acquire_at(t, key, kl, p, now, &ar);
                same_result(&ar, &tr, "table vs twin", va->spec, step);
                if (mr.allowed && p > 0) made[k] = true;
            }
            sluice_table_stats a, b;
            sluice_table_stats_get(t, &a);
            sluice_table_stats_get(twin, &b);
            assert_memory_equal(&a.decisions, &b.decisions, sizeof a.decisions);
            assert_int_equal(a.keys, b.keys);
            for (int k = 0; k < NKEYS; k++) ref_model_free(m[k]);
            sluice_table_free(t);
            sluice_table_free(twin);
        }
    }
}

static void test_peek_pure(void **state)
{
    (void)state;
    sluice_table *t = mk("token-bucket 10/s burst=10", 4);
    sluice_result r;
    sluice_key_state ks;
    /* missing keys: nothing is made, whatever the permits */
    for (uint64_t p = 0; p <= 11; p++) {
        assert_int_equal(peek(t, "m", 1, p, SEC, &r), SLUICE_ENOENT);
        assert_int_equal(r.allowed, p <= 10);
        assert_int_equal(r.error, 0);
    }
    assert_int_equal(r.retry_after_ns, -1); /* 11 > burst */
    assert_int_equal(keys_held(t), 0);
    size_t n = 0;
    uint64_t next;
    assert_int_equal(sluice_table_scan(t, 0, 1000, count_cb, &n, &next), 0);
    assert_int_equal(n, 0);
    assert_int_equal(next, 0);

    /* a held key, peeked far past its rest: nothing reclaimed or counted */
    assert_true(ask(t, "h", 10, SEC, &r));
    assert_int_equal(sluice_table_peek_at(t, "h", 1, 10, 1000 * SEC, &r, &ks), 0);
    assert_true(r.allowed);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(ks.last_ns, SEC);
    assert_int_equal(ks.rest_ns, 2 * SEC);
    assert_int_equal(sluice_table_peek_at(t, "h", 1, 1, SEC + 1, &r, &ks), 0);
    assert_false(r.allowed);
    assert_int_equal(r.retry_after_ns, SEC / 10 - 1);
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    assert_int_equal(st.keys, 1);
    assert_int_equal(st.reclaimed, 0);
    assert_int_equal(st.decisions.requests_allowed, 1);
    assert_int_equal(st.decisions.requests_denied, 0);
    assert_int_equal(st.decisions.probes, 0);
    /* a decision at that far time leaves it in place (its room is not
     * wanted), at rest, as peek said: it answers as a fresh key */
    assert_true(ask(t, "other", 1, 1000 * SEC, &r));
    assert_int_equal(peek(t, "h", 1, 0, 1000 * SEC, &r), 0);
    assert_int_equal(r.remaining, 10);
    sluice_table_stats_get(t, &st);
    assert_int_equal(st.keys, 2);
    assert_int_equal(st.reclaimed, 0);
    sluice_table_free(t);
}

/* ---- scan --------------------------------------------------------------- */

typedef struct seen {
    size_t nkeys;
    char **keys;
    size_t *lens;
    unsigned *hits;
    size_t calls, stop_after; /* the callback returns 7 after stop_after keys (0: never) */
    sluice_table *remove_from;
} seen;

static int seen_cb(const void *key, size_t keylen, const sluice_key_state *ks, void *arg)
{
    seen *s = arg;
    assert_non_null(ks);
    size_t i = 0;
    while (i < s->nkeys && !(s->lens[i] == keylen && memcmp(s->keys[i], key, keylen) == 0)) i++;
    if (i == s->nkeys) fail_msg("scan gave a key that was never made (%zu bytes)", keylen);
    s->hits[i]++;
    assert_int_equal(ks->last_ns, SEC);
    if (s->remove_from) assert_int_equal(sluice_table_remove(s->remove_from, key, keylen), 0);
    s->calls++;
    return s->stop_after && s->calls % s->stop_after == 0 ? 7 : 0;
}

/* A full scan with `count`: returns the calls made; checks the work bound. */
static size_t full_scan(sluice_table *t, size_t count, seen *s)
{
    uint64_t cur = 0;
    size_t calls = 0;
    do {
        size_t visited, before = s->calls;
        int rc = sluice__table_scan_counted(t, cur, count, seen_cb, s, &cur, &visited);
        if (rc == 7) assert_int_equal(s->calls % s->stop_after, 0);
        else assert_int_equal(rc, 0);
        assert_true(visited <= count);
        assert_true(s->calls - before <= visited);
        calls++;
        assert_true(calls < 10000000);
    } while (cur != 0);
    return calls;
}

static void test_scan_quiet(void **state)
{
    (void)state;
    static const size_t lens[] = {0, 5, 16, 17, 300, 5000};
    const size_t nk = 1000;
    seen s = {.nkeys = nk};
    s.keys = calloc(nk, sizeof *s.keys);
    s.lens = calloc(nk, sizeof *s.lens);
    s.hits = calloc(nk, sizeof *s.hits);
    assert_true(s.keys && s.lens && s.hits);
    sluice_table *t = mk("token-bucket 1/h burst=2", 3000); /* several shards */
    for (size_t i = 0; i < nk; i++) {
        size_t len = i < 6 ? lens[i] : 6 + i % 40;
        s.lens[i] = len;
        s.keys[i] = malloc(len + 1);
        assert_non_null(s.keys[i]);
        memset(s.keys[i], 'a' + (int)(i % 26), len);
        if (len >= 6) snprintf(s.keys[i], len + 1 > 7 ? 7 : len + 1, "%05zu", i);
        if (len >= 6) s.keys[i][5] = '-';
        assert_true(sluice_table_try_acquire_at(t, s.keys[i], len, 1, SEC, NULL));
    }
    assert_int_equal(keys_held(t), nk);
    /* some removed: the scan skips their entries */
    for (size_t i = 0; i < nk; i += 10) assert_int_equal(sluice_table_remove(t, s.keys[i], s.lens[i]), 0);
    static const size_t counts[] = {1, 2, 7, 1000000};
    for (size_t c = 0; c < 4; c++) {
        memset(s.hits, 0, nk * sizeof *s.hits);
        size_t calls = full_scan(t, counts[c], &s);
        for (size_t i = 0; i < nk; i++) assert_int_equal(s.hits[i], i % 10 ? 1 : 0);
        if (counts[c] == 1000000) assert_int_equal(calls, 1);
    }
    /* a callback that stops every 3 keys: the resumed scan loses nothing */
    memset(s.hits, 0, nk * sizeof *s.hits);
    s.stop_after = 3;
    full_scan(t, 50, &s);
    for (size_t i = 0; i < nk; i++) assert_int_equal(s.hits[i], i % 10 ? 1 : 0);
    s.stop_after = 0;
    /* a callback that removes each key: the table is empty after */
    memset(s.hits, 0, nk * sizeof *s.hits);
    s.remove_from = t;
    full_scan(t, 13, &s);
    s.remove_from = NULL;
    for (size_t i = 0; i < nk; i++) assert_int_equal(s.hits[i], i % 10 ? 1 : 0);
    assert_int_equal(keys_held(t), 0);
    /* an empty table: every call stores a cursor, and the last 0 */
    memset(s.hits, 0, nk * sizeof *s.hits);
    size_t calls = full_scan(t, 1, &s);
    assert_true(calls >= 1);
    for (size_t i = 0; i < nk; i++) assert_int_equal(s.hits[i], 0);
    sluice_table *e = mk("token-bucket 1/s", 1);
    assert_int_equal(full_scan(e, 1, &s), 1);
    sluice_table_free(e);
    for (size_t i = 0; i < nk; i++) free(s.keys[i]);
    free(s.keys);
    free(s.lens);
    free(s.hits);
    sluice_table_free(t);
}

/* ---- scan under concurrent change --------------------------------------- */

/* Spec: token-bucket 1000/s burst=1000.  A stable key takes 1000 permits at
 * 0 and is at rest only at 1 s; a churn key takes 1 permit and is at rest
 * 1 ms later.  Every time stays below 0.9 s, so the stable keys are held
 * throughout while the wheel reclaims churn keys as time moves on. */
#define STABLE_MAX 600
#define CHURN_SPACE 4000

typedef struct churn_arg {
    sluice_table *t;
    uint64_t seed;
    _Atomic bool *stop;
    uint64_t space; /* churn keys 0 .. space - 1 */
    _Atomic size_t made, removed;
} churn_arg;

static size_t churn_key(char *buf, size_t cap, uint64_t n)
{
    /* lengths 8 .. 40: inline and out of line */
    int len = snprintf(buf, cap, "c:%llu:", ULL(n));
    size_t want = 8 + n % 33;
    while ((size_t)len < want) buf[len++] = 'x';
    return (size_t)len;
}

static size_t stable_key(char *buf, size_t cap, size_t i)
{
    int len = snprintf(buf, cap, "s:%zu:", i);
    size_t want = i % 7 == 0 ? 300 : 6 + i % 20; /* some past the scan's stack copy */
    while ((size_t)len < want) buf[len++] = 'y';
    return (size_t)len;
}

static void *churn(void *p)
{
    churn_arg *a = p;
    uint64_t rs = a->seed, now = 0;
    char buf[64];
    while (!atomic_load_explicit(a->stop, memory_order_relaxed)) {
        uint64_t n = tu_splitmix64_below(&rs, a->space);
        size_t len = churn_key(buf, sizeof buf, n);
        if (tu_splitmix64_below(&rs, 3) == 0) {
            if (sluice_table_remove(a->t, buf, len) == 0) atomic_fetch_add(&a->removed, 1);
        } else {
            if (sluice_table_try_acquire_at(a->t, buf, len, 1, now, NULL))
                atomic_fetch_add(&a->made, 1);
        }
        now += tu_splitmix64_below(&rs, 3000); /* ~1.5 us a call: the wheel moves */
        if (now > 900 * MS) now = 900 * MS;
    }
    return NULL;
}

typedef struct conc_seen {
    unsigned hits[STABLE_MAX];
    size_t stable, churn;
} conc_seen;

static int conc_cb(const void *key, size_t keylen, const sluice_key_state *ks, void *arg)
{
    conc_seen *c = arg;
    char buf[400], want[400];
    assert_true(keylen < sizeof buf);
    memcpy(buf, key, keylen);
    buf[keylen] = 0;
    unsigned long long n;
    if (sscanf(buf, "s:%llu:", &n) == 1) {
        assert_true(n < c->stable);
        assert_int_equal(stable_key(want, sizeof want, (size_t)n), keylen);
        assert_memory_equal(want, buf, keylen);
        assert_int_equal(ks->last_ns, 0);
        assert_int_equal(ks->rest_ns, SEC);
        c->hits[n]++;
    } else if (sscanf(buf, "c:%llu:", &n) == 1) {
        assert_true(n < CHURN_SPACE);
        assert_int_equal(churn_key(want, sizeof want, n), keylen);
        assert_memory_equal(want, buf, keylen);
        c->churn++;
    } else {
        fail_msg("scan gave a key that was never made: %.40s", buf);
    }
    return 0;
}

/* `stable` stable keys in a table of max_keys, churn keys from `space`;
 * the scanner yields after every call, or every 16th. */
static void scan_concurrent(size_t max_keys, size_t stable, uint64_t space, bool yield_each,
                            bool fills)
{
    sluice_table *t = mk("token-bucket 1000/s burst=1000", max_keys);
    char buf[400];
    for (size_t i = 0; i < stable; i++) {
        size_t len = stable_key(buf, sizeof buf, i);
        assert_true(sluice_table_try_acquire_at(t, buf, len, 1000, 0, NULL));
    }
    _Atomic bool stop = false;
    churn_arg ca[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        ca[i].t = t;
        ca[i].seed = g_seed + 17 * (uint64_t)(i + 1);
        ca[i].stop = &stop;
        ca[i].space = space;
        atomic_init(&ca[i].made, 0);
        atomic_init(&ca[i].removed, 0);
        assert_int_equal(pthread_create(&th[i], NULL, churn, &ca[i]), 0);
    }
    /* scan once the churn runs, and until it has made and removed keys
     * during the scans (at least 12 scans, at most 20000) */
    while (atomic_load(&ca[0].made) < 200 || atomic_load(&ca[1].made) < 200) sched_yield();
    const size_t made0 = atomic_load(&ca[0].made) + atomic_load(&ca[1].made);
    const size_t removed0 = atomic_load(&ca[0].removed) + atomic_load(&ca[1].removed);
    uint64_t rs = g_seed ^ 0x7363616eULL;
    static conc_seen c;
    size_t churn_seen = 0, scan;
    for (scan = 0; scan < 20000; scan++) {
        if (scan >= tu_scaled(12, g_scale) &&
            atomic_load(&ca[0].made) + atomic_load(&ca[1].made) >=
                made0 + tu_scaled(3000, g_scale) &&
            atomic_load(&ca[0].removed) + atomic_load(&ca[1].removed) >=
                removed0 + tu_scaled(1000, g_scale))
            break;
        memset(&c, 0, sizeof c);
        c.stable = stable;
        uint64_t cur = 0;
        do {
            size_t count = 1 + tu_splitmix64_below(&rs, 8), visited;
            assert_int_equal(sluice__table_scan_counted(t, cur, count, conc_cb, &c, &cur, &visited),
                             0);
            assert_true(visited <= count);
            if (yield_each || tu_splitmix64_below(&rs, 16) == 0)
                sched_yield(); /* let the churn move the index between calls */
        } while (cur != 0);
        for (size_t i = 0; i < stable; i++) {
            if (c.hits[i] != 1) fail_msg("scan %zu: stable key %zu given %u times", scan, i, c.hits[i]);
        }
        churn_seen += c.churn;
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    const size_t made = atomic_load(&ca[0].made) + atomic_load(&ca[1].made);
    const size_t removed = atomic_load(&ca[0].removed) + atomic_load(&ca[1].removed);
    printf("scan under churn (%zu keys): %zu scans, %zu churn keys given; during the scans %zu made, "
           "%zu removed; %llu reclaimed in all\n",
           max_keys, scan, churn_seen, made - made0, removed - removed0, ULL(st.reclaimed));
    /* the churn did churn during the scans: removals, and reclaiming in a
     * table it fills (keys at rest stay until their room is wanted) */
    assert_true(removed > removed0);
    assert_true(made > made0);
    if (fills) assert_true(st.reclaimed > 0);
    /* the stable keys are all still held, their state untouched */
    for (size_t i = 0; i < stable; i++) {
        size_t len = stable_key(buf, sizeof buf, i);
        sluice_result r;
        assert_int_equal(sluice_table_peek_at(t, buf, len, 0, 900 * MS, &r, NULL), 0);
        assert_int_equal(r.remaining, 900);
    }
    sluice_table_free(t);
}

static void test_scan_concurrent(void **state)
{
    (void)state;
    /* one shard kept full (index load 0.8: long Robin Hood runs, many
     * backward shifts), then 16 shards at a lower load */
    scan_concurrent(256, 128, 1000, true, true);
    scan_concurrent(4096, STABLE_MAX, CHURN_SPACE, false, false);
}

int main(void)
{
    g_seed = tu_env_seed();
    g_scale = tu_env_scale(1.0);
    printf("SLUICE_TEST_SEED=%llu\n", ULL(g_seed));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_remove),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_peek_traces),
        cmocka_unit_test(test_peek_pure),
        cmocka_unit_test(test_scan_quiet),
        cmocka_unit_test(test_scan_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
