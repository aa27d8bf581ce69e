/* test_sketch.c -- the keys a table refuses most (sluice_table_set_top,
 * sluice_table_top_refused; src/table/topk.c).
 *
 * Every check is against an exact count kept by the test (a plain array of
 * per-key refusals), never against the sketch:
 *
 *  - Zipf streams (one shard -- 3, 8, 64 and 4096 counters, the last with
 *    index buckets that fill, so keys sit past their bucket -- and 64
 *    shards): every reported count is at
 *    least the true count and at most true + its error, every error is at
 *    most N/m, every key refused more than N/m times is reported, and the
 *    true top 5 are among the reported top 10;
 *  - adversarial streams (bursts of distinct one-off keys between the heavy
 *    keys' refusals, and the heavy keys only after a flood of one-offs):
 *    the heavy keys (each > N/m) are still found within the bound;
 *  - memory: a counting allocator sees no allocation after set_top, however
 *    many keys (long ones too) are refused and read; every allocation
 *    failure of set_top is SLUICE_ENOMEM and changes nothing;
 *  - truncation: keys longer than max_key_bytes count under their prefix,
 *    marked truncated, apart from an untruncated key of the same bytes, and
 *    across shards as one; keys too long for the table count too;
 *  - which refusals count: the algorithm's, SLUICE_EFULL, SLUICE_EINVAL, a
 *    refused composite (in every table of it); admissions and probes never;
 *  - bad calls: bounds, a second set_top, no sketch, NULL arguments;
 *  - threads (run under TSan, label concurrency): refusals from 4 threads
 *    while another reads, and two threads racing to set the sketch; with
 *    fewer keys than counters the final counts are exact;
 *  - the per-thread pending records (src/table/topk.c): runs of one key of every
 *    length around the flush bound (256), read in the middle of runs, with
 *    exact counts when the keys fit and the N/m bounds when they do not;
 *    the record's policy (a key refused once counted at once, twice in a
 *    row taking the record) across alternations, pairs and a hot key
 *    between one-off keys, read anywhere, exact;
 *    Zipf streams from 4 threads while a fifth reads, checked against the
 *    same N/m bound as one thread (a read folds in every pending record);
 *    refusals of a thread that has exited; 20 threads at once (more than
 *    own a record); a table freed while the thread that refused in it
 *    lives on, and a new one made;
 *  - the metrics: the exact lines for keys that need escaping (quote,
 *    backslash, newline, a byte that is not UTF-8, a truncated key).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sluice.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* A spec under which a request for 2 permits is always refused (2 is past
 * the capacity), without making the key: refusals that change nothing. */
#define SPEC "fixed-window 1/s"
#define NO 2

static uint64_t rng_state = 0x853c49e6748fea9bULL;
static uint64_t rnd(void) { return tu_splitmix64(&rng_state); }

static size_t key_name(char *buf, size_t i) { return (size_t)sprintf(buf, "key-%zu", i); }

static void refuse(sluice_table *t, const void *key, size_t len)
{
    sluice_result r;
    assert_false(sluice_table_try_acquire_at(t, key, len, NO, 1000, &r));
}

/* Check what the table reports against exact[] (nkeys keys, key_name),
 * with n_total refusals and m counters per shard.  Returns the reported
 * entries' number. */
static size_t check_bounds(sluice_table *t, const uint64_t *exact, size_t nkeys, uint64_t n_total,
                           size_t m, sluice_top_entry *out, size_t max)
{
    size_t n = 0;
    assert_int_equal(sluice_table_top_refused(t, out, max, &n), 0);
    uint64_t bound = n_total / m; /* error <= floor(N/m): errors are integers */
    bool *seen = calloc(nkeys, 1);
    assert_non_null(seen);
    for (size_t i = 0; i < n; i++) {
        if (i > 0) assert_true(out[i - 1].count >= out[i].count);
        assert_false(out[i].truncated);
        char name[32];
        size_t id;
        assert_true(out[i].keylen < sizeof name);
        memcpy(name, out[i].key, out[i].keylen);
        name[out[i].keylen] = 0;
        assert_int_equal(sscanf(name, "key-%zu", &id), 1);
        assert_true(id < nkeys);
        assert_false(seen[id]);
        seen[id] = true;
        if (out[i].count < exact[id] || out[i].count - out[i].error > exact[id] ||
            out[i].error > bound)
            fail_msg("key %zu: count %llu error %llu, exact %llu, N/m %llu", id,
                     (unsigned long long)out[i].count, (unsigned long long)out[i].error,
                     (unsigned long long)exact[id], (unsigned long long)bound);
    }
    for (size_t id = 0; id < nkeys; id++)
        if (exact[id] * m > n_total && !seen[id])
            fail_msg("key %zu refused %llu times > N/m = %llu/%zu, not reported", id,
                     (unsigned long long)exact[id], (unsigned long long)n_total, m);
    free(seen);
    return n;
}

/* ---- Zipf ---------------------------------------------------------------- */

static void zipf_run(size_t max_keys, size_t m)
{
    enum { NKEYS = 10000, N = 200000 };
    double *cdf = malloc(NKEYS * sizeof *cdf);
    uint64_t *exact = calloc(NKEYS, sizeof *exact);
    assert_non_null(cdf);
    assert_non_null(exact);
    double sum = 0;
    for (size_t i = 0; i < NKEYS; i++) cdf[i] = sum += pow((double)(i + 1), -1.1);
    char err[128];
    sluice_table *t = sluice_table_new(SPEC, max_keys, err, sizeof err);
    assert_non_null(t);
    assert_int_equal(sluice_table_set_top(t, m, 32), 0);
    for (size_t r = 0; r < N; r++) {
        double u = (double)(rnd() >> 11) / 9007199254740992.0 * sum;
        size_t lo = 0, hi = NKEYS - 1;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (cdf[mid] < u) lo = mid + 1;
            else hi = mid;
        }
        char k[32];
        size_t kl = key_name(k, lo);
        refuse(t, k, kl);
        exact[lo]++;
    }
    /* admissions and probes are not refusals: they change nothing */
    sluice_result res;
    assert_true(sluice_table_try_acquire_at(t, "key-0", 5, 1, 1000, &res));
    assert_true(sluice_table_try_acquire_at(t, "key-0", 5, 0, 1000, &res));
    sluice_top_entry *out = calloc(4096, sizeof *out);
    assert_non_null(out);
    size_t n = check_bounds(t, exact, NKEYS, N, m, out, 4096);
    assert_true(n > 0);
    /* the true top 5 (key-0 .. key-4 by construction; checked) among the
     * reported top 10, when the counters are enough for the tail to stay
     * below them (with few, a churning counter may outrank key-4) */
    for (size_t id = 0; m >= 16 && id < 5; id++) {
        assert_true(exact[id] > exact[id + 1]);
        bool found = false;
        for (size_t i = 0; i < 10 && i < n; i++) {
            char k[32];
            size_t kl = key_name(k, id);
            found |= out[i].keylen == kl && memcmp(out[i].key, k, kl) == 0;
        }
        if (!found) fail_msg("true top key %zu not in the reported top 10", id);
    }
    /* a shorter read is the head of the longer one */
    sluice_top_entry few[3];
    size_t nf;
    assert_int_equal(sluice_table_top_refused(t, few, 3, &nf), 0);
    assert_int_equal(nf, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(few[i].count, out[i].count);
        assert_memory_equal(few[i].key, out[i].key, out[i].keylen);
    }
    free(out);
    sluice_table_free(t);
    free(cdf);
    free(exact);
}

static void test_zipf_one_shard(void **st)
{
    (void)st;
    zipf_run(100, 64);
    zipf_run(256, 8);
    zipf_run(100, 3);
    /* 4096 counters: 2048 index buckets of 7 slots, a few full at any time
     * (about 2 keys a bucket), so keys sit past their bucket and leave */
    zipf_run(100, 4096);
}

static void test_zipf_shards(void **st)
{
    (void)st;
    zipf_run(1000000, 16); /* 64 shards */
}

/* ---- adversarial ---------------------------------------------------------- */

static void test_adversarial(void **st)
{
    (void)st;
    enum { M = 16, HEAVY = 4, F = 3000, ONEOFF = 20000 };
    for (int order = 0; order < 3; order++) {
        char err[128];
        sluice_table *t = sluice_table_new(SPEC, 200, err, sizeof err);
        assert_non_null(t);
        assert_int_equal(sluice_table_set_top(t, M, 32), 0);
        uint64_t *exact = calloc(HEAVY + ONEOFF, sizeof *exact);
        assert_non_null(exact);
        size_t next = HEAVY; /* the next one-off key */
        uint64_t n = 0;
        char k[32];
        size_t kl;
        if (order == 0) {
            /* every heavy refusal followed by a burst of M one-offs, enough
             * to push out every counter that is not heavy */
            for (size_t r = 0; r < F; r++) {
                for (size_t h = 0; h < HEAVY; h++) {
                    kl = key_name(k, h);
                    refuse(t, k, kl);
                    exact[h]++;
                    n++;
                    for (size_t j = 0; j < 2 && next < HEAVY + ONEOFF; j++) {
                        kl = key_name(k, next);
                        refuse(t, k, kl);
                        exact[next++]++;
                        n++;
                    }
                }
            }
        } else if (order == 1) { /* one-offs first, the heavy keys last */
            while (next < HEAVY + ONEOFF) {
                kl = key_name(k, next);
                refuse(t, k, kl);
                exact[next++]++;
                n++;
            }
            for (size_t r = 0; r < F; r++)
                for (size_t h = 0; h < HEAVY; h++) {
                    kl = key_name(k, h);
                    refuse(t, k, kl);
                    exact[h]++;
                    n++;
                }
        } else { /* the heavy keys first, then the flood */
            for (size_t r = 0; r < F; r++)
                for (size_t h = 0; h < HEAVY; h++) {
                    kl = key_name(k, h);
                    refuse(t, k, kl);
                    exact[h]++;
                    n++;
                }
            while (next < HEAVY + ONEOFF) {
                kl = key_name(k, next);
                refuse(t, k, kl);
                exact[next++]++;
                n++;
            }
        }
        assert_true((uint64_t)F * M > n); /* the heavy keys are each > N/m */
        sluice_top_entry out[M];
        size_t got = check_bounds(t, exact, HEAVY + ONEOFF, n, M, out, M);
        assert_int_equal(got, M);
        sluice_top_entry top[HEAVY];
        size_t nt;
        assert_int_equal(sluice_table_top_refused(t, top, HEAVY, &nt), 0);
        assert_int_equal(nt, HEAVY);
        for (size_t i = 0; i < HEAVY; i++) /* the heavy keys rank first */
            assert_true(top[i].keylen == 5 && memcmp(top[i].key, "key-", 4) == 0 &&
                        top[i].key[4] >= '0' && top[i].key[4] < '0' + HEAVY);
        free(exact);
        sluice_table_free(t);
    }
}

/* ---- memory ---------------------------------------------------------------- */

static void test_memory_fixed(void **st)
{
    (void)st;
    assert_int_equal(tu_alloc_install(), 0); /* counts and fails (tests/testutil.h) */
    char err[128];
    sluice_table *t = sluice_table_new(SPEC, 100000, err, sizeof err); /* 64 shards */
    assert_non_null(t);
    /* every failure of set_top: ENOMEM, and no sketch */
    for (long k = 1;; k++) {
        tu_alloc_arm(k - 1, false); /* its k-th allocation fails */
        int rc = sluice_table_set_top(t, 32, 64);
        tu_alloc_disarm();
        if (rc == 0) break;
        assert_int_equal(rc, SLUICE_ENOMEM);
        size_t n;
        assert_int_equal(sluice_table_top_refused(t, NULL, 0, &n), SLUICE_ENOENT);
        assert_true(k < 20);
    }
    tu_alloc_arm(-1, false); /* count the allocations from here */
    unsigned char key[300];
    sluice_top_entry out[20];
    size_t n;
    for (size_t r = 0; r < 50000; r++) {
        size_t len = 1 + rnd() % sizeof key;
        for (size_t i = 0; i < len; i++) key[i] = (unsigned char)rnd();
        refuse(t, key, len);
        if (r % 5000 == 0) assert_int_equal(sluice_table_top_refused(t, out, 20, &n), 0);
    }
    assert_int_equal(sluice_table_top_refused(t, out, 20, &n), 0);
    assert_int_equal(n, 20);
    assert_int_equal(tu_alloc_calls(), 0);
    sluice_table_free(t);
    assert_int_equal(tu_alloc_uninstall(), 0);
}

/* ---- truncation --------------------------------------------------------------- */

static bool has(const sluice_top_entry *out, size_t n, const char *key, bool trunc,
                uint64_t count)
{
    for (size_t i = 0; i < n; i++)
        if (out[i].keylen == strlen(key) && memcmp(out[i].key, key, out[i].keylen) == 0 &&
            out[i].truncated == trunc)
            return out[i].count == count && out[i].error == 0;
    return false;
}

static void test_truncation(void **st)
{
    (void)st;
    for (int big = 0; big < 2; big++) {
        char err[128];
        sluice_table *t = sluice_table_new(SPEC, big ? 100000 : 10, err, sizeof err);
        assert_non_null(t);
        assert_int_equal(sluice_table_set_top(t, 64, 8), 0);
        char k[64];
        for (int i = 0; i < 40; i++) { /* 40 keys, one prefix */
            int kl = sprintf(k, "abcdefgh-%d", i);
            refuse(t, k, (size_t)kl);
        }
        for (int i = 0; i < 3; i++) refuse(t, "abcdefgh", 8); /* exactly 8: not truncated */
        for (int i = 0; i < 2; i++) refuse(t, "abcdefg", 7);
        /* a key longer than the table stores (held by its digest), refused
         * by its limit: counted by its first bytes */
        size_t huge = SLUICE_MAX_KEY_BYTES + 1;
        char *h = malloc(huge);
        assert_non_null(h);
        memset(h, 'z', huge);
        refuse(t, h, huge);
        free(h);
        sluice_top_entry out[8];
        size_t n;
        assert_int_equal(sluice_table_top_refused(t, out, 8, &n), 0);
        assert_int_equal(n, 4);
        assert_true(has(out, n, "abcdefgh", true, 40));
        assert_true(has(out, n, "abcdefgh", false, 3));
        assert_true(has(out, n, "abcdefg", false, 2));
        assert_true(has(out, n, "zzzzzzzz", true, 1));
        assert_true(out[0].truncated && out[0].count == 40);
        sluice_table_free(t);
    }
}

/* ---- which refusals count ---------------------------------------------------- */

static uint64_t count_of(sluice_table *t, const char *key)
{
    sluice_top_entry out[16];
    size_t n;
    assert_int_equal(sluice_table_top_refused(t, out, 16, &n), 0);
    for (size_t i = 0; i < n; i++)
        if (out[i].keylen == strlen(key) && memcmp(out[i].key, key, out[i].keylen) == 0)
            return out[i].count;
    return 0;
}

static void test_what_counts(void **st)
{
    (void)st;
    char err[128];
    /* the algorithm: 2 allowed a second, the third refused */
    sluice_table *t = sluice_table_new("fixed-window 2/s", 2, err, sizeof err);
    assert_non_null(t);
    sluice_result r;
    assert_true(sluice_table_try_acquire_at(t, "a", 1, 1, 0, &r));
    assert_false(sluice_table_try_acquire_at(t, "z", 1, NO + 1, 0, &r)); /* before the sketch */
    assert_int_equal(sluice_table_set_top(t, 4, 16), 0);
    assert_true(sluice_table_try_acquire_at(t, "a", 1, 1, 0, &r));
    assert_false(sluice_table_try_acquire_at(t, "a", 1, 1, 0, &r));
    assert_true(sluice_table_try_acquire_at(t, "a", 1, 0, 0, &r)); /* a probe */
    assert_int_equal(count_of(t, "a"), 1);
    /* SLUICE_EFULL: two keys in use fill the table */
    assert_true(sluice_table_try_acquire_at(t, "b", 1, 1, 0, &r));
    assert_false(sluice_table_try_acquire_at(t, "c", 1, 1, 0, &r));
    assert_int_equal(r.error, SLUICE_EFULL);
    assert_int_equal(count_of(t, "c"), 1);
    assert_int_equal(count_of(t, "z"), 0);
    assert_int_equal(count_of(t, "b"), 0);
    /* a refused composite: counted in every table with a sketch */
    sluice_table *u = sluice_table_new("fixed-window 5/s", 10, err, sizeof err);
    assert_non_null(u);
    assert_int_equal(sluice_table_set_top(u, 4, 16), 0);
    sluice_limit_ref refs[2] = {sluice_ref_key(t, "a", 1), sluice_ref_key(u, "a", 1)};
    assert_false(sluice_composite_try_acquire_at(refs, 2, 1, 0, &r, NULL));
    assert_int_equal(count_of(t, "a"), 2);
    assert_int_equal(count_of(u, "a"), 1);
    refs[0] = sluice_ref_key(t, "b", 1); /* b has one permit left: allowed */
    assert_true(sluice_composite_try_acquire_at(refs, 2, 1, 0, &r, NULL));
    assert_int_equal(count_of(t, "b"), 0);
    sluice_table_free(u);
    sluice_table_free(t);
}

static void test_bad_calls(void **st)
{
    (void)st;
    char err[128];
    sluice_table *t = sluice_table_new(SPEC, 10, err, sizeof err);
    assert_non_null(t);
    sluice_top_entry out[2];
    size_t n = 99;
    assert_int_equal(sluice_table_top_refused(t, out, 2, &n), SLUICE_ENOENT);
    assert_int_equal(n, 0);
    refuse(t, "x", 1); /* no sketch: nothing to count in */
    assert_int_equal(sluice_table_set_top(NULL, 4, 4), SLUICE_EINVAL);
    assert_int_equal(sluice_table_set_top(t, 0, 4), SLUICE_EINVAL);
    assert_int_equal(sluice_table_set_top(t, SLUICE_TOP_COUNTERS_MAX + 1, 4), SLUICE_EINVAL);
    assert_int_equal(sluice_table_set_top(t, 4, 0), SLUICE_EINVAL);
    assert_int_equal(sluice_table_set_top(t, 4, SLUICE_TOP_KEY_MAX + 1), SLUICE_EINVAL);
    assert_int_equal(sluice_table_top_refused(t, out, 2, &n), SLUICE_ENOENT);
    assert_int_equal(sluice_table_set_top(t, 1, SLUICE_TOP_KEY_MAX), 0);
    assert_int_equal(sluice_table_set_top(t, 4, 4), SLUICE_EINVAL); /* a second */
    assert_int_equal(sluice_table_top_refused(NULL, out, 2, &n), SLUICE_EINVAL);
    assert_int_equal(sluice_table_top_refused(t, out, 2, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_table_top_refused(t, NULL, 2, &n), SLUICE_EINVAL);
    assert_int_equal(sluice_table_top_refused(t, NULL, 0, &n), 0);
    assert_int_equal(n, 0);
    /* one counter: the last key holds it, with count = N and error N - 1 */
    refuse(t, "x", 1);
    refuse(t, "y", 1);
    refuse(t, "", 0);
    refuse(t, NULL, 0);
    assert_int_equal(sluice_table_top_refused(t, out, 2, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].keylen, 0);
    assert_int_equal(out[0].count, 4);
    assert_int_equal(out[0].error, 2);
    sluice_table_free(t);
}

/* ---- threads ----------------------------------------------------------------- */

enum { THREADS = 4, KEYS_PER = 8, ROUNDS = 3000 };
static sluice_table *shared_t;
static atomic_int stop_reader;

static void *refuser(void *arg)
{
    size_t id = (size_t)(uintptr_t)arg;
    for (size_t r = 0; r < ROUNDS; r++)
        for (size_t k = 0; k < KEYS_PER; k++) {
            char key[32];
            size_t kl = key_name(key, id * KEYS_PER + k);
            for (size_t c = 0; c <= k; c++) { /* key k refused k + 1 times a round */
                sluice_result res;
                if (sluice_table_try_acquire_at(shared_t, key, kl, NO, 1000, &res)) return arg;
            }
        }
    return NULL;
}

static void *reader(void *arg)
{
    (void)arg;
    sluice_top_entry out[8];
    uint64_t last = 0;
    while (!atomic_load(&stop_reader)) {
        size_t n;
        if (sluice_table_top_refused(shared_t, out, 8, &n) != 0) return (void *)1;
        if (n && out[0].count < last) return (void *)1; /* counts never fall */
        if (n) last = out[0].count;
    }
    return NULL;
}

static void *setter(void *arg)
{
    return (void *)(intptr_t)sluice_table_set_top(arg, 64, 16);
}

static void test_threads(void **st)
{
    (void)st;
    for (int big = 0; big < 2; big++) {
        char err[128];
        shared_t = sluice_table_new(SPEC, big ? 100000 : 100, err, sizeof err);
        assert_non_null(shared_t);
        pthread_t s1, s2, th[THREADS], rd;
        assert_int_equal(pthread_create(&s1, NULL, setter, shared_t), 0);
        assert_int_equal(pthread_create(&s2, NULL, setter, shared_t), 0);
        void *r1, *r2;
        pthread_join(s1, &r1);
        pthread_join(s2, &r2);
        /* exactly one of two racing set_top calls wins */
        assert_true((r1 == NULL) != (r2 == NULL));
        assert_int_equal((int)(intptr_t)(r1 ? r1 : r2), SLUICE_EINVAL);
        atomic_store(&stop_reader, 0);
        assert_int_equal(pthread_create(&rd, NULL, reader, NULL), 0);
        for (size_t i = 0; i < THREADS; i++)
            assert_int_equal(pthread_create(&th[i], NULL, refuser, (void *)(uintptr_t)i), 0);
        for (size_t i = 0; i < THREADS; i++) {
            void *rv;
            pthread_join(th[i], &rv);
            assert_null(rv);
        }
        atomic_store(&stop_reader, 1);
        void *rv;
        pthread_join(rd, &rv);
        assert_null(rv);
        /* 32 keys, 64 counters a shard: no key ever evicted, counts exact */
        sluice_top_entry out[THREADS * KEYS_PER + 1];
        size_t n;
        assert_int_equal(sluice_table_top_refused(shared_t, out, THREADS * KEYS_PER + 1, &n), 0);
        assert_int_equal(n, THREADS * KEYS_PER);
        for (size_t i = 0; i < n; i++) {
            char name[32];
            size_t id;
            memcpy(name, out[i].key, out[i].keylen);
            name[out[i].keylen] = 0;
            assert_int_equal(sscanf(name, "key-%zu", &id), 1);
            assert_int_equal(out[i].count, (uint64_t)ROUNDS * (id % KEYS_PER + 1));
            assert_int_equal(out[i].error, 0);
        }
        sluice_table_free(shared_t);
    }
}

/* ---- pending records ------------------------------------------------------- */

/* Runs of one key, of lengths around the flush bound, from one thread,
 * with reads in the middle of runs: exact with fewer keys than counters,
 * within the bounds with more. */
static void runs_run(size_t nkeys, size_t m, size_t max_keys)
{
    char err[128];
    sluice_table *t = sluice_table_new(SPEC, max_keys, err, sizeof err);
    assert_non_null(t);
    assert_int_equal(sluice_table_set_top(t, m, 16), 0);
    uint64_t *exact = calloc(nkeys, sizeof *exact);
    sluice_top_entry *out = calloc(nkeys + 1, sizeof *out);
    assert_non_null(exact);
    assert_non_null(out);
    static const size_t lens[] = {1, 2, 255, 256, 257, 511, 512, 513, 1000};
    uint64_t n = 0;
    for (size_t r = 0; r < 600; r++) {
        size_t id = (size_t)(rnd() % nkeys);
        size_t len = r % 3 ? lens[rnd() % (sizeof lens / sizeof lens[0])] : 1 + rnd() % 40;
        char k[32];
        size_t kl = key_name(k, id);
        for (size_t i = 0; i < len; i++) {
            refuse(t, k, kl);
            exact[id]++;
            n++;
            if (rnd() % 997 == 0) check_bounds(t, exact, nkeys, n, m, out, nkeys + 1);
        }
    }
    size_t got = check_bounds(t, exact, nkeys, n, m, out, nkeys + 1);
    if (nkeys <= m && max_keys <= 256) { /* one shard, room for every key */
        for (size_t id = 0; id < nkeys; id++) assert_true(exact[id] > 0);
        assert_int_equal(got, nkeys);
        for (size_t i = 0; i < got; i++) assert_int_equal(out[i].error, 0);
    }
    free(out);
    free(exact);
    sluice_table_free(t);
}

static void test_pending_runs(void **st)
{
    (void)st;
    runs_run(12, 16, 100);     /* every key fits: exact, the runs' moves checked */
    runs_run(200, 16, 100);    /* evictions with weights up to 256 */
    runs_run(200, 8, 100000);  /* 64 shards */
}

/* The record's policy (src/table/topk.c): a key refused once is counted at
 * once, a key refused twice in a row takes the record, and the record's
 * key keeps it while other keys come between its refusals.  Streams that
 * cross every transition -- alternations (a b a b), pairs (a a b b),
 * a hot key between one-off keys, a key that comes back after its record
 * went to another, runs across the flush bound with other keys between --
 * each read at many points: with fewer keys than counters (one shard)
 * every count is exact, error 0. */
static void test_pending_policy(void **st)
{
    (void)st;
    enum { NK = 12, STEPS = 6000 };
    char err[128];
    sluice_table *t = sluice_table_new(SPEC, 100, err, sizeof err);
    assert_non_null(t);
    assert_int_equal(sluice_table_set_top(t, 16, 16), 0);
    uint64_t exact[NK] = {0};
    sluice_top_entry out[NK + 1];
    size_t step = 0;
    for (int pattern = 0; step < STEPS; pattern = (pattern + 1) % 5) {
        size_t a = (size_t)(rnd() % NK), b = (size_t)(rnd() % NK);
        size_t reps = 1 + (size_t)(rnd() % 300);
        for (size_t r = 0; r < reps; r++, step++) {
            size_t id;
            switch (pattern) {
            case 0: id = r % 2 ? b : a; break;                       /* a b a b */
            case 1: id = r % 4 < 2 ? a : b; break;                   /* a a b b */
            case 2: id = r % 3 ? a : (size_t)(rnd() % NK); break;    /* hot a, others between */
            case 3: id = r % 5 == 4 ? b : a; break;                  /* a a a a b */
            default: id = (size_t)(rnd() % NK); break;               /* any */
            }
            char k[32];
            size_t kl = key_name(k, id);
            refuse(t, k, kl);
            exact[id]++;
            if (rnd() % 61 == 0) { /* a read anywhere: every refusal before it counted */
                size_t n;
                assert_int_equal(sluice_table_top_refused(t, out, NK + 1, &n), 0);
                size_t nonzero = 0;
                for (size_t i = 0; i < NK; i++) nonzero += exact[i] > 0;
                assert_int_equal(n, nonzero);
                for (size_t i = 0; i < n; i++) {
                    char name[32];
                    size_t got;
                    memcpy(name, out[i].key, out[i].keylen);
                    name[out[i].keylen] = 0;
                    assert_int_equal(sscanf(name, "key-%zu", &got), 1);
                    assert_true(got < NK);
                    assert_int_equal(out[i].count, exact[got]);
                    assert_int_equal(out[i].error, 0);
                }
            }
        }
    }
    sluice_table_free(t);
}

enum { ZT = 4, ZKEYS = 2000, ZN = 60000 };
static double zcdf[ZKEYS], zsum;
static _Atomic uint64_t zexact[ZKEYS];

static void *zipf_refuser(void *arg)
{
    uint64_t rng = 0x9e3779b9u * ((uint64_t)(uintptr_t)arg + 1);
    for (size_t r = 0; r < ZN; r++) {
        double u = (double)(tu_splitmix64(&rng) >> 11) / 9007199254740992.0 * zsum;
        size_t lo = 0, hi = ZKEYS - 1;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (zcdf[mid] < u) lo = mid + 1;
            else hi = mid;
        }
        /* a run of 1 .. 8 of the drawn key: a thread's hot key repeats */
        size_t run = 1 + tu_splitmix64(&rng) % 8;
        char k[32];
        size_t kl = key_name(k, lo);
        for (size_t i = 0; i < run; i++) {
            sluice_result res;
            if (sluice_table_try_acquire_at(shared_t, k, kl, NO, 1000, &res)) return arg;
            atomic_fetch_add(&zexact[lo], 1);
        }
    }
    return NULL;
}

static void test_pending_zipf_threads(void **st)
{
    (void)st;
    zsum = 0;
    for (size_t i = 0; i < ZKEYS; i++) zcdf[i] = zsum += pow((double)(i + 1), -1.1);
    for (int big = 0; big < 2; big++) {
        const size_t m = 16;
        char err[128];
        shared_t = sluice_table_new(SPEC, big ? 100000 : 100, err, sizeof err);
        assert_non_null(shared_t);
        assert_int_equal(sluice_table_set_top(shared_t, m, 32), 0);
        for (size_t i = 0; i < ZKEYS; i++) atomic_store(&zexact[i], 0);
        atomic_store(&stop_reader, 0);
        pthread_t th[ZT], rd;
        assert_int_equal(pthread_create(&rd, NULL, reader, NULL), 0);
        for (size_t i = 0; i < ZT; i++)
            assert_int_equal(pthread_create(&th[i], NULL, zipf_refuser, (void *)(uintptr_t)i), 0);
        for (size_t i = 0; i < ZT; i++) {
            void *rv;
            pthread_join(th[i], &rv);
            assert_null(rv);
        }
        atomic_store(&stop_reader, 1);
        void *rv;
        pthread_join(rd, &rv);
        assert_null(rv);
        uint64_t *exact = malloc(ZKEYS * sizeof *exact), n = 0;
        assert_non_null(exact);
        for (size_t i = 0; i < ZKEYS; i++) n += exact[i] = atomic_load(&zexact[i]);
        sluice_top_entry *out = calloc(ZKEYS, sizeof *out);
        assert_non_null(out);
        /* the same N/m as one thread's: nothing left pending at the read */
        size_t got = check_bounds(shared_t, exact, ZKEYS, n, m, out, ZKEYS);
        assert_true(got >= m);
        free(out);
        free(exact);
        sluice_table_free(shared_t);
    }
}

typedef struct exit_job {
    sluice_table *t;
    const char *key;
    size_t times;
} exit_job;

static void *refuse_and_exit(void *arg)
{
    exit_job *j = arg;
    for (size_t i = 0; i < j->times; i++) {
        sluice_result res;
        if (sluice_table_try_acquire_at(j->t, j->key, strlen(j->key), NO, 1000, &res))
            return arg;
    }
    return NULL;
}

static void run_exit_job(sluice_table *t, const char *key, size_t times)
{
    exit_job j = {t, key, times};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, refuse_and_exit, &j), 0);
    void *rv;
    pthread_join(th, &rv);
    assert_null(rv);
}

static void test_pending_thread_exit(void **st)
{
    (void)st;
    char err[128];
    sluice_table *t = sluice_table_new(SPEC, 100, err, sizeof err);
    assert_non_null(t);
    assert_int_equal(sluice_table_set_top(t, 16, 16), 0);
    /* each thread exits with refusals pending (below the flush bound); the
     * next thread likely takes over the same record */
    run_exit_job(t, "gone", 10);
    run_exit_job(t, "next", 3);
    run_exit_job(t, "next", 300); /* past the bound: one move, 44 pending */
    run_exit_job(t, "gone", 1);
    assert_int_equal(count_of(t, "gone"), 11);
    assert_int_equal(count_of(t, "next"), 303);
    sluice_table_free(t);
}

enum { MANY = 20, MANY_HOT = 300 };
static pthread_barrier_t many_bar;

static void *many_refuser(void *arg)
{
    size_t id = (size_t)(uintptr_t)arg;
    pthread_barrier_wait(&many_bar); /* all 20 alive at once: some without a record */
    char k[32];
    size_t kl = key_name(k, 100 + id);
    for (size_t r = 0; r < MANY_HOT; r++) {
        sluice_result res;
        if (sluice_table_try_acquire_at(shared_t, "hot", 3, NO, 1000, &res)) return arg;
        if (r % 10 == 0 && sluice_table_try_acquire_at(shared_t, k, kl, NO, 1000, &res))
            return arg;
    }
    pthread_barrier_wait(&many_bar); /* none exits before all are done */
    return NULL;
}

static void test_pending_many_threads(void **st)
{
    (void)st;
    char err[128];
    shared_t = sluice_table_new(SPEC, 100, err, sizeof err);
    assert_non_null(shared_t);
    assert_int_equal(sluice_table_set_top(shared_t, 64, 16), 0);
    assert_int_equal(pthread_barrier_init(&many_bar, NULL, MANY), 0);
    pthread_t th[MANY];
    for (size_t i = 0; i < MANY; i++)
        assert_int_equal(pthread_create(&th[i], NULL, many_refuser, (void *)(uintptr_t)i), 0);
    for (size_t i = 0; i < MANY; i++) {
        void *rv;
        pthread_join(th[i], &rv);
        assert_null(rv);
    }
    pthread_barrier_destroy(&many_bar);
    assert_int_equal(count_of(shared_t, "hot"), (uint64_t)MANY * MANY_HOT);
    sluice_top_entry out[MANY + 2];
    size_t n;
    assert_int_equal(sluice_table_top_refused(shared_t, out, MANY + 2, &n), 0);
    assert_int_equal(n, MANY + 1);
    for (size_t i = 1; i < n; i++) { /* every thread's own key, exact */
        assert_int_equal(out[i].count, MANY_HOT / 10);
        assert_int_equal(out[i].error, 0);
    }
    sluice_table_free(shared_t);
}

/* A thread refuses in a table that is then freed, while it lives on; a
 * new table (perhaps at the same address) counts only its own refusals. */
static sluice_table *swap_t;
static pthread_barrier_t swap_bar;

static void *swap_refuser(void *arg)
{
    (void)arg;
    sluice_result res;
    for (int i = 0; i < 7; i++)
        if (sluice_table_try_acquire_at(swap_t, "old", 3, NO, 1000, &res)) return arg;
    pthread_barrier_wait(&swap_bar); /* the main thread frees it, makes another */
    pthread_barrier_wait(&swap_bar);
    for (int i = 0; i < 5; i++)
        if (sluice_table_try_acquire_at(swap_t, "new", 3, NO, 1000, &res)) return arg;
    for (int i = 0; i < 2; i++)
        if (sluice_table_try_acquire_at(swap_t, "old", 3, NO, 1000, &res)) return arg;
    return NULL;
}

static void test_pending_table_freed(void **st)
{
    (void)st;
    char err[128];
    swap_t = sluice_table_new(SPEC, 100, err, sizeof err);
    assert_non_null(swap_t);
    assert_int_equal(sluice_table_set_top(swap_t, 16, 16), 0);
    assert_int_equal(pthread_barrier_init(&swap_bar, NULL, 2), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, swap_refuser, NULL), 0);
    pthread_barrier_wait(&swap_bar);
    sluice_table_free(swap_t); /* with 7 refusals pending in the thread's record */
    swap_t = sluice_table_new(SPEC, 100, err, sizeof err);
    assert_non_null(swap_t);
    assert_int_equal(sluice_table_set_top(swap_t, 16, 16), 0);
    pthread_barrier_wait(&swap_bar);
    void *rv;
    pthread_join(th, &rv);
    assert_null(rv);
    pthread_barrier_destroy(&swap_bar);
    assert_int_equal(count_of(swap_t, "new"), 5);
    assert_int_equal(count_of(swap_t, "old"), 2);
    sluice_table_free(swap_t);
}

/* ---- metrics ----------------------------------------------------------------- */

static void test_metrics_lines(void **st)
{
    (void)st;
    char err[128];
    sluice_table *t = sluice_table_new(SPEC, 10, err, sizeof err);
    assert_non_null(t);
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_table(m, "api", t), 0);
    char buf[8192];
    /* no sketch: no family of keys */
    assert_int_equal(sluice_metrics_write(m, buf, sizeof buf, NULL), 0);
    assert_null(strstr(buf, "refused_key"));
    assert_int_equal(sluice_table_set_top(t, 16, 6), 0);
    assert_int_equal(sluice_metrics_write(m, buf, sizeof buf, NULL), 0);
    assert_null(strstr(buf, "refused_key")); /* nothing refused yet */
    for (int i = 0; i < 5; i++) refuse(t, "a\"b", 3);
    for (int i = 0; i < 4; i++) refuse(t, "c\\xd", 4);
    for (int i = 0; i < 3; i++) refuse(t, "e\nf\xff", 4);
    for (int i = 0; i < 2; i++) refuse(t, "long-key-1", 10);
    refuse(t, "\xc3\xa9t\xc3\xa9", 5);
    assert_int_equal(sluice_metrics_write(m, buf, sizeof buf, NULL), 0);
    const char *want =
        "# HELP sluice_table_refused_key_requests "
        "Requests refused for the key, as estimated by the table's sketch of the keys "
        "refused most (at least the true number, at most that plus the error series); "
        "the top keys only.\n"
        "# TYPE sluice_table_refused_key_requests gauge\n"
        "sluice_table_refused_key_requests{limit=\"api\",key=\"a\\\"b\"} 5\n"
        "sluice_table_refused_key_requests{limit=\"api\",key=\"c\\\\\\\\xd\"} 4\n"
        "sluice_table_refused_key_requests{limit=\"api\",key=\"e\\\\x0af\\\\xff\"} 3\n"
        "sluice_table_refused_key_requests{limit=\"api\",key=\"long-k\\\\...\"} 2\n"
        "sluice_table_refused_key_requests{limit=\"api\",key=\"\xc3\xa9t\xc3\xa9\"} 1\n"
        "# HELP sluice_table_refused_key_error ";
    const char *at = strstr(buf, "# HELP sluice_table_refused_key_requests");
    assert_non_null(at);
    if (strncmp(at, want, strlen(want)) != 0) fail_msg("got:\n%s", at);
    assert_non_null(strstr(buf, "sluice_table_refused_key_error{limit=\"api\",key=\"a\\\"b\"} 0\n"));
    sluice_metrics_free(m);
    sluice_table_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zipf_one_shard), cmocka_unit_test(test_zipf_shards),
        cmocka_unit_test(test_adversarial),    cmocka_unit_test(test_memory_fixed),
        cmocka_unit_test(test_truncation),     cmocka_unit_test(test_what_counts),
        cmocka_unit_test(test_bad_calls),      cmocka_unit_test(test_threads),
        cmocka_unit_test(test_pending_runs),   cmocka_unit_test(test_pending_policy),
        cmocka_unit_test(test_pending_zipf_threads),
        cmocka_unit_test(test_pending_thread_exit), cmocka_unit_test(test_pending_many_threads),
        cmocka_unit_test(test_pending_table_freed), cmocka_unit_test(test_metrics_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
