/* test_table.c -- per-key limiters: independence of keys, key lengths, the
 * max_keys bound with reclamation of keys at rest and refusal of new keys
 * when every held key is in use, counters; keys whose probe run is 150
 * slots long (test_long_runs). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sluice.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_model.h"
#include "table/table.h"
#include "testutil.h"

#define SEC 1000000000ULL

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

static void test_keys_independent(void **state)
{
    (void)state;
    sluice_table *t = mk("fixed-window 3/s", 100);
    sluice_result r;
    for (int i = 0; i < 3; i++) {
        assert_true(ask(t, "a", 1, SEC, &r));
        assert_true(ask(t, "b", 1, SEC, &r));
    }
    assert_false(ask(t, "a", 1, SEC, &r));
    assert_int_equal(r.error, 0); /* the limiter said no */
    assert_false(ask(t, "b", 1, SEC, &r));
    assert_true(ask(t, "", 1, SEC, &r));            /* the empty key */
    assert_true(sluice_table_try_acquire_at(t, NULL, 0, 1, SEC, &r)); /* same key */
    assert_int_equal(r.remaining, 1);
    /* keys differ by bytes, not by C string: embedded NUL */
    assert_true(sluice_table_try_acquire_at(t, "a\0x", 3, 3, SEC, &r));
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    assert_int_equal(st.keys, 4);
    assert_int_equal(st.decisions.requests_allowed, 9);
    assert_int_equal(st.decisions.requests_denied, 2);
    sluice_table_free(t);
}

static void test_key_length(void **state)
{
    (void)state;
    sluice_table *t = mk("token-bucket 1/s", 10);
    char *big = calloc(SLUICE_MAX_KEY_BYTES + 1, 1);
    assert_non_null(big);
    sluice_result r;
    assert_true(sluice_table_try_acquire_at(t, big, SLUICE_MAX_KEY_BYTES, 1, 0, &r));
    assert_false(sluice_table_try_acquire_at(t, big, SLUICE_MAX_KEY_BYTES, 1, 0, &r));
    assert_int_equal(r.error, 0);
    /* one byte longer: held by its digest, limited as any key */
    assert_true(sluice_table_try_acquire_at(t, big, SLUICE_MAX_KEY_BYTES + 1, 1, 0, &r));
    assert_false(sluice_table_try_acquire_at(t, big, SLUICE_MAX_KEY_BYTES + 1, 1, 0, &r));
    assert_int_equal(r.error, 0);
    assert_false(sluice_table_try_acquire_at(t, NULL, 5, 1, 0, &r));
    assert_int_equal(r.error, SLUICE_EINVAL);
    free(big);
    sluice_table_free(t);
}

/* max_keys = 2: a third key is refused while both are in use, gets room as
 * soon as one is at rest, and the one reclaimed loses nothing. */
static void test_full_table(void **state)
{
    (void)state;
    sluice_table *t = mk("token-bucket 10/s burst=2", 2);
    sluice_result r;
    assert_true(ask(t, "a", 2, 0, &r));            /* a full again at 200 ms */
    assert_true(ask(t, "b", 1, 50000000, &r));     /* b full again at 150 ms */
    assert_false(ask(t, "c", 1, 100000000, &r));
    assert_int_equal(r.error, SLUICE_EFULL);
    assert_int_equal(r.retry_after_ns, 50000000); /* when b comes to rest */
    assert_true(ask(t, "c", 1, 150000000, &r));    /* b reclaimed */
    assert_int_equal(r.error, 0);
    assert_int_equal(r.remaining, 1);
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    assert_int_equal(st.keys, 2);
    assert_int_equal(st.reclaimed, 1);
    assert_int_equal(st.refused, 1);
    /* b comes back as a full bucket, exactly as if it had been kept: but
     * the table is full of a and c, both in use until 200/250 ms */
    assert_false(ask(t, "b", 2, 160000000, &r));
    assert_int_equal(r.error, SLUICE_EFULL);
    assert_true(ask(t, "b", 2, 200000000, &r)); /* a at rest: reclaimed */
    assert_int_equal(r.remaining, 0);
    /* a was at rest: its new limiter starts full, as the old one was */
    assert_true(ask(t, "a", 2, 260000000, &r));
    sluice_table_free(t);
}

/* Many keys, each compared with its own limiter: the table changes no
 * decision while there is room. */
static void test_many_keys_match_limiters(void **state)
{
    (void)state;
    enum { KEYS = 2000, STEPS = 60000 };
    static const char *const specs[] = {
        "sliding-wheel 5/s slots=10", "token-bucket 3/s burst=4", "sliding-approx 4/s",
        "leaky-bucket 2/s capacity=3", "sliding-log 3/s", "fixed-window 4/s",
    };
    for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
        sluice_table *t = mk(specs[si], KEYS);
        sluice_limiter **ls = calloc(KEYS, sizeof *ls);
        assert_non_null(ls);
        uint64_t x = 88172645463325252ULL, now = 0;
        for (int i = 0; i < STEPS; i++) {
            tu_xorshift64(&x);
            unsigned k = (unsigned)(x % KEYS);
            now += (x >> 40) % 3000000;
            uint64_t p = (x >> 20) % 3;
            char key[16];
            snprintf(key, sizeof key, "k%u", k);
            if (!ls[k]) ls[k] = sluice_limiter_new(specs[si], NULL, 0);
            sluice_result a, b;
            bool ta = ask(t, key, p, now, &a);
            bool tb = sluice_try_acquire_at(ls[k], p, now, &b);
            assert_int_equal(ta, tb);
            assert_int_equal(a.remaining, b.remaining);
            assert_int_equal(a.retry_after_ns, b.retry_after_ns);
            assert_int_equal(a.wait_ns, b.wait_ns);
        }
        for (int k = 0; k < KEYS; k++) sluice_limiter_free(ls[k]);
        free(ls);
        sluice_table_free(t);
    }
}

/* A key of `len` bytes that holds every byte value: byte i is (i * 7 +
 * salt) mod 256. */
static unsigned char *key_of(size_t len, unsigned salt)
{
    unsigned char *k = malloc(len ? len : 1);
    assert_non_null(k);
    for (size_t i = 0; i < len; i++) k[i] = (unsigned char)(i * 7 + salt);
    return k;
}

typedef struct digest_seen {
    unsigned char bytes[16];
    size_t n, digests;
} digest_seen;

static int see_digest(const void *key, size_t keylen, const sluice_key_state *ks, void *arg)
{
    digest_seen *d = arg;
    d->n++;
    if (ks->flags & SLUICE_KEY_DIGEST) {
        assert_int_equal(keylen, 16);
        memcpy(d->bytes, key, 16);
        d->digests++;
    }
    return 0;
}

/* Keys longer than SLUICE_MAX_KEY_BYTES are held by a keyed digest: no
 * length escapes its limit (issue 22); every operation that takes a key
 * agrees; a long key never equals a short one, its digest bytes included;
 * decisions are exact against the reference model. */
static void test_long_keys(void **state)
{
    (void)state;
    const size_t cap = SLUICE_MAX_KEY_BYTES;
    const size_t lens[] = {cap - 1, cap, cap + 1, 1024, 64 * 1024, 1024 * 1024, cap + 8};
    sluice_table *t = mk("token-bucket 3/s", 1000);
    sluice_result r;
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        unsigned char *k = key_of(lens[i], (unsigned)i);
        for (int n = 0; n < 3; n++) assert_true(sluice_table_try_acquire_at(t, k, lens[i], 1, SEC, &r));
        assert_false(sluice_table_try_acquire_at(t, k, lens[i], 1, SEC, &r)); /* limited */
        assert_int_equal(r.error, 0);
        assert_true(r.retry_after_ns > 0);
        assert_int_equal(sluice_table_peek_at(t, k, lens[i], 1, SEC, &r, NULL), 0);
        assert_false(r.allowed);
        free(k);
    }
    /* two 1 MB keys that differ in one byte (the last; then the first) */
    const size_t mb = 1024 * 1024;
    unsigned char *a = key_of(mb, 5), *b = key_of(mb, 5);
    b[mb - 1] ^= 1;
    for (int n = 0; n < 3; n++) assert_true(sluice_table_try_acquire_at(t, a, mb, 1, 2 * SEC, &r));
    assert_false(sluice_table_try_acquire_at(t, a, mb, 1, 2 * SEC, &r));
    assert_true(sluice_table_try_acquire_at(t, b, mb, 3, 2 * SEC, &r)); /* its own limit */
    b[mb - 1] ^= 1;
    b[0] ^= 0x80;
    assert_true(sluice_table_try_acquire_at(t, b, mb, 3, 2 * SEC, &r));
    free(b);
    sluice_table_free(t);

    /* a long key and its own digest bytes as a short key: distinct */
    t = mk("token-bucket 2/s", 10);
    for (int n = 0; n < 2; n++) assert_true(sluice_table_try_acquire_at(t, a, mb, 1, SEC, &r));
    digest_seen d = {0};
    uint64_t cur = 0;
    do {
        assert_int_equal(sluice_table_scan(t, cur, 100, see_digest, &d, &cur), 0);
    } while (cur);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.digests, 1);
    assert_true(sluice_table_try_acquire_at(t, d.bytes, 16, 2, SEC, &r)); /* a fresh key */
    assert_false(sluice_table_try_acquire_at(t, a, mb, 1, SEC, &r));     /* still spent */
    /* remove, reset, peek agree */
    assert_int_equal(sluice_table_remove(t, a, mb), 0);
    assert_int_equal(sluice_table_remove(t, a, mb), SLUICE_ENOENT);
    assert_int_equal(sluice_table_peek_at(t, a, mb, 2, SEC, &r, NULL), SLUICE_ENOENT);
    assert_true(r.allowed);
    assert_true(sluice_table_try_acquire_at(t, a, mb, 2, SEC, &r));
    assert_int_equal(sluice_table_reset(t, a, mb), 0);
    assert_true(sluice_table_try_acquire_at(t, a, mb, 2, SEC, &r));
    /* an override of the long key */
    char err[256];
    assert_int_equal(sluice_table_override_set_at(t, a, mb, "token-bucket 5/s", SEC, err, sizeof err), 0);
    char spec[128];
    assert_int_equal(sluice_table_override_get(t, a, mb, spec, sizeof spec), 0);
    assert_non_null(strstr(spec, "5/s"));
    assert_int_equal(sluice_table_override_get(t, d.bytes, 16, spec, sizeof spec), SLUICE_ENOENT);
    assert_true(sluice_table_try_acquire_at(t, a, mb, 5, 2 * SEC, &r)); /* refilled to 5 */
    assert_false(sluice_table_try_acquire_at(t, a, mb, 1, 2 * SEC, &r));
    assert_int_equal(sluice_table_override_remove_at(t, a, mb, 2 * SEC), 0);
    /* a burst with long keys among short ones, as single calls */
    const void *keys[4] = {a, "s", a, "s"};
    const size_t klens[4] = {mb, 1, mb, 1};
    sluice_result rs[4];
    assert_int_equal(sluice_table_try_acquire_burst_at(t, 4, keys, klens, NULL, 10 * SEC, rs), 4);
    assert_int_equal(sluice_table_try_acquire_burst_at(t, 4, keys, klens, NULL, 10 * SEC, rs), 0);
    /* a composite of a long key and a limiter */
    sluice_limiter *lim = sluice_limiter_new("token-bucket 100/s", err, sizeof err);
    assert_non_null(lim);
    sluice_limit_ref refs[2] = {sluice_ref_key(t, a, mb), sluice_ref_limiter(lim)};
    assert_false(sluice_composite_try_acquire_at(refs, 2, 1, 10 * SEC, &r, NULL));
    assert_true(sluice_composite_try_acquire_at(refs, 2, 2, 11 * SEC, &r, NULL));
    assert_false(sluice_composite_try_acquire_at(refs, 2, 1, 11 * SEC, &r, NULL));
    sluice_limiter_free(lim);
    sluice_table_free(t);

    /* exact against the reference model: three long keys that differ in
     * one middle byte, random requests at increasing times */
    t = mk("sliding-log 5/s", 100);
    ref_params p = {.alg = REF_SLIDING_LOG, .limit = 5, .period_ns = SEC};
    ref_model *m[3];
    unsigned char *ks[3];
    for (int j = 0; j < 3; j++) {
        m[j] = ref_model_new(&p);
        assert_non_null(m[j]);
        ks[j] = key_of(cap + 100, 9);
        ks[j][cap / 2] = (unsigned char)j;
    }
    uint64_t now = SEC, rng = 12345;
    for (int n = 0; n < 3000; n++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        now += (rng >> 33) % (SEC / 8);
        const int j = (int)((rng >> 20) % 3);
        const uint64_t pm = (rng >> 10) % 3;
        ref_result want;
        ref_model_decide(m[j], pm, now, &want);
        assert_int_equal(sluice_table_try_acquire_at(t, ks[j], cap + 100, pm, now, &r), want.allowed);
        assert_int_equal(r.remaining, want.remaining);
        assert_int_equal(r.retry_after_ns, want.retry_after_ns);
    }
    for (int j = 0; j < 3; j++) {
        ref_model_free(m[j]);
        free(ks[j]);
    }
    sluice_table_free(t);
    free(a);
}

static void test_bad_args(void **state)
{
    (void)state;
    char err[128];
    assert_null(sluice_table_new("token-bucket 1/s", 0, err, sizeof err));
    assert_non_null(strstr(err, "max_keys"));
    assert_null(sluice_table_new("token-bucket 0/s", 10, err, sizeof err));
    assert_non_null(strstr(err, "\"0\""));
}

/* Regression (issue 9, defect 9): a table honours clock=coarse in its live
 * function.  A 1/d bucket admits at the live time; a refusal at a later
 * time c then says retry after exactly (admission + 1 d) - c.  When the coarse clock
 * reads the same c before and after the call (it moves once per tick), the
 * admission was at exactly c on the coarse clock -- the fine clock would
 * have put it later. */
static void test_live_clock_coarse(void **state)
{
    (void)state;
    const uint64_t day = 86400ULL * 1000000000ULL;
    for (int attempt = 0; attempt < 100; attempt++) {
        char err[256];
        sluice_table *t = sluice_table_new("token-bucket 1/d burst=1 clock=coarse", 4, err,
                                           sizeof err);
        assert_non_null(t);
        struct timespec b, a;
        clock_gettime(CLOCK_MONOTONIC_COARSE, &b);
        sluice_result r;
        assert_true(sluice_table_try_acquire(t, "k", 1, 1, &r));
        clock_gettime(CLOCK_MONOTONIC_COARSE, &a);
        const uint64_t cb = (uint64_t)b.tv_sec * 1000000000u + (uint64_t)b.tv_nsec;
        const uint64_t ca = (uint64_t)a.tv_sec * 1000000000u + (uint64_t)a.tv_nsec;
        if (cb == ca) {
            /* half a day later (not at ca, which would be clamped to the
             * admission's own time whatever clock it came from) */
            assert_false(sluice_table_try_acquire_at(t, "k", 1, 1, ca + day / 2, &r));
            assert_int_equal(r.retry_after_ns, (int64_t)(day / 2));
            sluice_table_free(t);
            return;
        }
        sluice_table_free(t);
    }
    fail_msg("the coarse clock moved during each of 100 calls");
}

/* Times out of order across keys: key "a" admitted at 0, key "b" at 5 s,
 * then "a" at 0.5 s.  A 1/s bucket with burst 1 holds no token for "a" at
 * 0.5 s.  A table that swept by its own clock (5 s by then) would have
 * dropped "a" as at rest and started it fresh (the limitation of the old
 * default); keys at rest stay in place until room is wanted, so the table
 * keeps "a" and is exact, with SLUICE_TABLE_RECLAIM_WHEN_FULL (now the
 * default, still accepted) or without. */
static void test_reclaim_when_full(void **state)
{
    (void)state;
    {
        char err[256] = "";
        /* a flag bit no version defines: refused, with the reason */
        assert_null(sluice_table_new_flags("token-bucket 1/s burst=1", 8, 0x40000000u, err,
                                           sizeof err));
        assert_non_null(strstr(err, "flags"));
    }
    for (int flag = 0; flag <= 1; flag++) {
        char err[256];
        sluice_table *t = sluice_table_new_flags("token-bucket 1/s burst=1", 8,
                                                 flag ? SLUICE_TABLE_RECLAIM_WHEN_FULL : 0, err,
                                                 sizeof err);
        assert_non_null(t);
        sluice_result r;
        assert_true(sluice_table_try_acquire_at(t, "a", 1, 1, 0, &r));
        for (uint64_t i = 1; i <= 20; i++) /* time goes by, for "b" */
            assert_true(sluice_table_try_acquire_at(t, "b", 1, 1, 5 * SEC + i * SEC, &r));
        bool ok = sluice_table_try_acquire_at(t, "a", 1, 1, SEC / 2, &r);
        sluice_table_stats st;
        sluice_table_stats_get(t, &st);
        assert_false(ok); /* exact: half a token */
        assert_int_equal(r.retry_after_ns, (int64_t)(SEC / 2));
        assert_int_equal(st.reclaimed, 0);
        assert_int_equal(st.keys, 2);
        sluice_table_free(t);
    }
    /* when full, the flag's table still reclaims keys at rest to make room */
    char err[256];
    sluice_table *t = sluice_table_new_flags("token-bucket 1/s burst=1", 1,
                                             SLUICE_TABLE_RECLAIM_WHEN_FULL, err, sizeof err);
    assert_non_null(t);
    sluice_result r;
    assert_true(sluice_table_try_acquire_at(t, "a", 1, 1, 0, &r));
    assert_false(sluice_table_try_acquire_at(t, "b", 1, 1, SEC / 2, &r)); /* "a" in use */
    assert_int_equal(r.error, SLUICE_EFULL);
    assert_true(sluice_table_try_acquire_at(t, "b", 1, 1, 2 * SEC, &r)); /* "a" at rest */
    sluice_table_free(t);
}

/* Refusals and probes write nothing: the shards -- lock word (a sequence
 * that every hold moves), clock, wheel, index, entries -- are bit for bit
 * what they were, through single calls, bursts and peeks, for a held key refused,
 * a held key probed, requests no limiter grants, and a flood of new keys
 * against a full table; and the refusals are counted. */
static unsigned char *image(const sluice_table *t, size_t *n)
{
    *n = sluice__table_image(t, NULL, 0);
    unsigned char *b = malloc(*n);
    assert_non_null(b);
    assert_int_equal(sluice__table_image(t, b, *n), *n);
    return b;
}

static void test_refusal_writes_nothing(void **state)
{
    (void)state;
    const char *specs[] = {"token-bucket 1/s burst=3", "fixed-window 3/s",
                           "sliding-approx 3/s", "leaky-bucket 1/s capacity=3"};
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
        const size_t max = 1000; /* 4 shards */
        sluice_table *t = mk(specs[si], max);
        sluice_result r;
        char kb[32];
        for (size_t i = 0; i + 1 < max; i++) {
            snprintf(kb, sizeof kb, "k%zu", i);
            assert_true(ask(t, kb, 1, SEC, &r));
        }
        for (int i = 0; i < 3; i++) assert_true(ask(t, "hot", 1, SEC, &r));
        sluice_table_stats before;
        sluice_table_stats_get(t, &before);
        assert_int_equal(before.keys, max);
        size_t n0, n1;
        unsigned char *a = image(t, &n0);
        const uint64_t now = SEC + 10 * 1000 * 1000; /* 10 ms on: nothing at rest */
        uint64_t denied = 0, probes = 0;
        for (int i = 0; i < 5; i++, denied++) {
            assert_false(ask(t, "hot", 1, now + (uint64_t)i, &r));
            assert_int_equal(r.error, 0);
            assert_true(r.retry_after_ns > 0);
        }
        assert_false(ask(t, "hot", 4, now, &r)); /* more than it can ever grant */
        assert_int_equal(r.retry_after_ns, -1);
        denied++;
        assert_true(ask(t, "hot", 0, now, &r)); /* probes */
        assert_true(ask(t, "k7", 0, now, &r));
        assert_true(ask(t, "absent", 0, now, &r));
        probes += 3;
        assert_false(ask(t, "absent", 4, now, &r));
        assert_int_equal(r.error, 0);
        denied++;
        for (int i = 0; i < 200; i++, denied++) { /* a flood of new keys */
            snprintf(kb, sizeof kb, "flood%d", i);
            assert_false(ask(t, kb, 1, now, &r));
            assert_int_equal(r.error, SLUICE_EFULL);
            assert_true(r.retry_after_ns > 0);
        }
        sluice_key_state ks;
        assert_int_equal(sluice_table_peek_at(t, "hot", 3, 1, now, &r, &ks), 0);
        assert_false(r.allowed);
        assert_int_equal(ks.last_ns, SEC);
        assert_int_equal(sluice_table_peek_at(t, "nope", 4, 1, now, &r, &ks), SLUICE_ENOENT);
        assert_true(r.allowed);
        const void *keys[4] = {"hot", "flood-a", "hot", "k9"};
        const size_t lens[4] = {3, 7, 3, 2};
        const uint64_t perm[4] = {1, 1, 0, 0};
        sluice_result rs[4];
        assert_int_equal(sluice_table_try_acquire_burst_at(t, 4, keys, lens, perm, now, rs), 2);
        assert_int_equal(rs[1].error, SLUICE_EFULL);
        denied += 2;
        probes += 2;
        unsigned char *b = image(t, &n1);
        assert_int_equal(n0, n1);
        if (memcmp(a, b, n0) != 0) fail_msg("%s: a refusal or a probe wrote the table", specs[si]);
        sluice_table_stats after;
        sluice_table_stats_get(t, &after);
        assert_int_equal(after.refused - before.refused, 201);
        assert_int_equal(after.decisions.requests_denied - before.decisions.requests_denied,
                         denied);
        assert_int_equal(after.decisions.probes - before.decisions.probes, probes);
        assert_int_equal(after.decisions.requests_allowed, before.decisions.requests_allowed);
        free(b);
        /* an admission does write (the check can fail) */
        assert_true(ask(t, "hot", 1, SEC + 3 * SEC, &r));
        b = image(t, &n1);
        assert_true(memcmp(a, b, n0) != 0);
        free(a);
        free(b);
        sluice_table_free(t);
    }
}

/* After a change of spec a held key's first decision carries its state
 * over under the lock (that writes); from then on its refusals read again,
 * under the new spec. */
static void test_refusal_after_reconfigure(void **state)
{
    (void)state;
    sluice_table *t = mk("fixed-window 3/h", 1000);
    sluice_result r;
    for (int i = 0; i < 3; i++) assert_true(ask(t, "hot", 1, SEC, &r));
    assert_false(ask(t, "hot", 1, SEC + 1, &r));
    char err[128];
    assert_int_equal(sluice_table_reconfigure_at(t, "fixed-window 5/h", SEC + 2, err, sizeof err), 0);
    size_t n0, n1, n2;
    unsigned char *a = image(t, &n0);
    assert_true(ask(t, "hot", 1, SEC + 3, &r)); /* 5 now: carried over, admitted */
    assert_true(ask(t, "hot", 1, SEC + 4, &r));
    unsigned char *b = image(t, &n1);
    assert_true(memcmp(a, b, n0) != 0);
    assert_false(ask(t, "hot", 1, SEC + 5, &r)); /* 5 of 5: refused, read */
    assert_int_equal(r.remaining, 0);
    assert_true(ask(t, "hot", 0, SEC + 5, &r));
    unsigned char *c = image(t, &n2);
    assert_int_equal(n1, n2);
    if (memcmp(b, c, n1) != 0) fail_msg("a refusal after the change wrote the table");
    free(a);
    free(b);
    free(c);
    sluice_table_free(t);
}

/* ---- long probe runs ----------------------------------------------------- */

/* Keys whose entries all want one home slot (the seed is known): their
 * probe run grows to 150 slots, far past the distances the slot's 5-bit code
 * holds exactly (DIST_SAT, src/table/table.c), so that lookups, Robin Hood
 * insertions (the run's tail moving a slot on), removals and reclaiming at
 * rest (moving it back) and the wheel's links that follow each move all run
 * on saturated distances.  Checked against an independent model of
 * fixed-window 2/s per key (a key's window k = t / 1 s admits 2), every
 * decision; after each round, a full scan gives each held key exactly once
 * and the keys held are the table's count.  Composites of 3 keys of the run
 * (made together: each made entry moves the others) are all or nothing. */
#define RUN_KEYS 150
typedef struct run_model {
    uint64_t win[RUN_KEYS], used[RUN_KEYS];
} run_model;

static bool run_model_ask(run_model *m, size_t i, uint64_t now)
{
    const uint64_t k = now / SEC + 1; /* 0: nothing admitted yet */
    if (m->win[i] != k) {
        m->win[i] = k;
        m->used[i] = 0;
    }
    if (m->used[i] >= 2) return false;
    m->used[i]++;
    return true;
}

typedef struct run_seen {
    char (*keys)[16];
    unsigned hits[RUN_KEYS];
    size_t other;
} run_seen;

static int run_scan_cb(const void *key, size_t keylen, const sluice_key_state *ks, void *arg)
{
    (void)ks;
    run_seen *s = arg;
    for (size_t i = 0; i < RUN_KEYS; i++)
        if (keylen == 16 && memcmp(s->keys[i], key, 16) == 0) {
            s->hits[i]++;
            return 0;
        }
    s->other++;
    return 0;
}

static void test_long_runs(void **state)
{
    (void)state;
    const uint64_t seed[2] = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};
    char err[256];
    sluice_table *t = sluice__table_new_seeded("fixed-window 2/s", 200, 0, seed, err, sizeof err);
    if (!t) fail_msg("%s", err);
    /* one shard of 200 entries and 251 slots: home 0 is a tag below 2^32/251 */
    static char keys[RUN_KEYS][16];
    size_t n = 0;
    for (uint64_t c = 0; n < RUN_KEYS; c++) {
        char k[16];
        memset(k, 0, sizeof k);
        snprintf(k, sizeof k, "run-%llu", (unsigned long long)c);
        if ((uint32_t)sluice__siphash13(seed, k, 16) < (UINT64_C(1) << 32) / 251)
            memcpy(keys[n++], k, 16);
    }
    uint32_t longest = 0;
    run_model m;
    memset(&m, 0, sizeof m);
    uint64_t rng = tu_env_seed(), now = SEC;
    size_t decisions = 0, composites = 0, removals = 0;
    for (int round = 0; round < 60; round++) {
        for (int step = 0; step < 400; step++) {
            now += tu_splitmix64_below(&rng, SEC / 50); /* rests and reclaims now and then */
            const size_t i = (size_t)tu_splitmix64_below(&rng, RUN_KEYS);
            const uint64_t what = tu_splitmix64_below(&rng, 20);
            sluice_result r;
            if (what == 0) { /* remove: the model starts it afresh */
                int rc = sluice_table_remove(t, keys[i], 16);
                assert_true(rc == 0 || rc == SLUICE_ENOENT);
                m.win[i] = 0;
                removals++;
            } else if (what == 1) { /* three keys of the run at once */
                size_t j = (i + 1 + (size_t)tu_splitmix64_below(&rng, RUN_KEYS - 1)) % RUN_KEYS;
                size_t k = (j + 1 + (size_t)tu_splitmix64_below(&rng, RUN_KEYS - 1)) % RUN_KEYS;
                if (k == i) k = (k + 1) % RUN_KEYS;
                if (k == j) continue;
                const sluice_limit_ref refs[3] = {sluice_ref_key(t, keys[i], 16),
                                                  sluice_ref_key(t, keys[j], 16),
                                                  sluice_ref_key(t, keys[k], 16)};
                const bool ok = sluice_composite_try_acquire_at(refs, 3, 1, now, &r, NULL);
                /* the model: all or nothing */
                run_model before = m;
                const bool wi = run_model_ask(&m, i, now), wj = run_model_ask(&m, j, now),
                           wk = run_model_ask(&m, k, now);
                const bool want = wi && wj && wk;
                if (!want) m = before;
                if (ok != want)
                    fail_msg("round %d step %d: composite of %zu %zu %zu: %d, model %d", round,
                             step, i, j, k, ok, want);
                composites++;
            } else {
                const bool ok = sluice_table_try_acquire_at(t, keys[i], 16, 1, now, &r);
                const bool want = run_model_ask(&m, i, now);
                if (ok != want)
                    fail_msg("round %d step %d: key %zu: %d, model %d", round, step, i, ok, want);
                decisions++;
            }
        }
        /* a full scan: each held key once, nothing else */
        run_seen s = {.keys = keys};
        uint64_t cur = 0;
        int calls = 0;
        do {
            assert_int_equal(sluice_table_scan(t, cur, 7, run_scan_cb, &s, &cur), 0);
            assert_true(++calls < 100000);
        } while (cur != 0);
        sluice_table_stats st;
        sluice_table_stats_get(t, &st);
        size_t held = 0;
        for (size_t i = 0; i < RUN_KEYS; i++) {
            sluice_result r;
            const int rc = sluice_table_peek_at(t, keys[i], 16, 0, now, &r, NULL);
            assert_true(rc == 0 || rc == SLUICE_ENOENT);
            if (s.hits[i] != (rc == 0))
                fail_msg("round %d: key %zu given %u times, peek says %s", round, i, s.hits[i],
                         rc == 0 ? "held" : "not held");
            held += rc == 0;
            const uint32_t p = sluice__table_probe_len(t, keys[i], 16);
            if (p > longest) longest = p;
        }
        assert_int_equal(s.other, 0);
        assert_int_equal(st.keys, held);
    }
    printf("[ table    ] long runs: %zu decisions, %zu composites, %zu removals; longest probe %u "
           "slots\n",
           decisions, composites, removals, longest);
    assert_true(longest > 40); /* past the exact codes: the saturated ones ran */
    sluice_table_free(t);
}

typedef struct churn {
    sluice_table *t;
    _Atomic bool stop;
    uint64_t decided, allowed;
    unsigned seed;
} churn;

static void *churn_decide(void *p)
{
    churn *c = p;
    char kb[16];
    uint64_t now = SEC;
    for (uint64_t n = 0; n < 4000000 && !atomic_load(&c->stop); n++) {
        const int kl = snprintf(kb, sizeof kb, "k%u", (unsigned)((n + c->seed) % 64));
        now += 1000;
        c->allowed += sluice_table_try_acquire_at(c->t, kb, (size_t)kl, n % 3, now, NULL);
        if (n % 64 == 0) (void)sluice_table_peek_at(c->t, kb, (size_t)kl, 1, now, NULL, NULL);
        c->decided++;
    }
    return NULL;
}

/* Changes of spec do not grow the table's memory (issue 26 5: each took a
 * configuration, kept until the table was freed): 100,000 changes,
 * reconfigure_at and set_limit_at alternating, with held keys and decisions
 * between, leave the counting allocator's live bytes as they were; then
 * 20,000 more beside two deciding threads (ThreadSanitizer's concern), and
 * the keys' decisions stay the contract's (a key spent under one spec
 * stays spent). */
static void test_spec_change_memory(void **state)
{
    (void)state;
    assert_int_equal(tu_alloc_install(), 0);
    char err[256];
    sluice_table *t = mk("token-bucket 10/s", 1000);
    sluice_result r;
    uint64_t now = SEC;
    for (int i = 0; i < 100; i++) { /* held keys, some longer than 16 bytes */
        char kb[48];
        const int kl = snprintf(kb, sizeof kb, i % 2 ? "key %d" : "a longer key, number %d", i);
        assert_true(sluice_table_try_acquire_at(t, kb, (size_t)kl, 1, now, &r));
    }
    for (int i = 0; i < 64; i++) { /* warm: every id the churn will reuse made */
        assert_int_equal(sluice_table_set_limit_at(t, 10 + (uint64_t)(i % 2), SEC, now, err, sizeof err), 0);
        now += 1000;
    }
    const size_t before = tu_alloc_live_bytes();
    const long blocks = tu_alloc_live();
    for (int i = 0; i < 100000; i++) {
        const int rc = i % 2 ? sluice_table_reconfigure_at(t, i % 4 == 1 ? "token-bucket 20/s"
                                                                            : "token-bucket 10/s",
                                                           now, err, sizeof err)
                             : sluice_table_set_limit_at(t, 5 + (uint64_t)(i % 7), SEC, now, err,
                                                         sizeof err);
        if (rc != 0) fail_msg("change %d: %s", i, err);
        if (i % 16 == 0) (void)sluice_table_try_acquire_at(t, "key 1", 5, 1, now, &r);
        now += 1000;
    }
    print_message("  100000 changes: live %zu bytes in %ld blocks before, %zu in %ld after\n",
                  before, blocks, tu_alloc_live_bytes(), tu_alloc_live());
    assert_true(tu_alloc_live_bytes() <= before);
    assert_true(tu_alloc_live() <= blocks);
    /* still exact: a spent key stays spent across changes of its limit */
    assert_int_equal(sluice_table_reconfigure_at(t, "token-bucket 3/s", now, err, sizeof err), 0);
    assert_true(sluice_table_try_acquire_at(t, "fresh", 5, 3, now, &r));
    assert_int_equal(sluice_table_set_limit_at(t, 4, SEC, now, err, sizeof err), 0);
    assert_false(sluice_table_try_acquire_at(t, "fresh", 5, 1, now, &r));

    churn a = {.t = t, .seed = 0}, b = {.t = t, .seed = 7};
    pthread_t th[2];
    assert_int_equal(pthread_create(&th[0], NULL, churn_decide, &a), 0);
    assert_int_equal(pthread_create(&th[1], NULL, churn_decide, &b), 0);
    for (int i = 0; i < 20000; i++) {
        const int rc = i % 2 ? sluice_table_reconfigure_at(t, "token-bucket 10/s", now, err, sizeof err)
                             : sluice_table_set_limit_at(t, 20, SEC, now, err, sizeof err);
        if (rc != 0) fail_msg("change %d: %s", i, err);
    }
    atomic_store(&a.stop, true);
    atomic_store(&b.stop, true);
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    print_message("  20000 changes beside %llu decisions (%llu admitted): live %zu bytes\n",
                  (unsigned long long)(a.decided + b.decided),
                  (unsigned long long)(a.allowed + b.allowed), tu_alloc_live_bytes());
    /* one change more with no reader running frees what the deciders held */
    assert_int_equal(sluice_table_set_limit_at(t, 20, SEC, now, err, sizeof err), 0);
    assert_true(tu_alloc_live_bytes() <= before + 64 * 4096); /* the deciders' 64 keys */
    sluice_table_free(t);
    assert_int_equal(tu_alloc_live(), 0);
    assert_int_equal(tu_alloc_uninstall(), 0);
}

/* Overrides changed, removed and set again do not grow the table either
 * (issue 26 5, the same leak): 100,000 override changes on held and
 * unheld keys, with decisions between, leave the live bytes as they were,
 * and the override decides. */
static void test_override_churn_memory(void **state)
{
    (void)state;
    assert_int_equal(tu_alloc_install(), 0);
    char err[256];
    sluice_table *t = mk("token-bucket 10/s", 100);
    sluice_result r;
    uint64_t now = SEC;
    assert_true(sluice_table_try_acquire_at(t, "held", 4, 1, now, &r));
    for (int i = 0; i < 64; i++) { /* warm */
        assert_int_equal(sluice_table_override_set_at(t, "held", 4, i % 2 ? "token-bucket 3/s" : "token-bucket 4/s", now, err, sizeof err), 0);
        assert_int_equal(sluice_table_override_set_at(t, "other", 5, "token-bucket 2/s", now, err, sizeof err), 0);
        assert_int_equal(sluice_table_override_remove_at(t, "other", 5, now), 0);
    }
    const size_t before = tu_alloc_live_bytes();
    for (int i = 0; i < 100000; i++) {
        const char *spec = i % 2 ? "token-bucket 3/s" : "token-bucket 4/s";
        if (sluice_table_override_set_at(t, "held", 4, spec, now, err, sizeof err) != 0)
            fail_msg("override %d: %s", i, err);
        if (i % 3 == 0) {
            assert_int_equal(sluice_table_override_set_at(t, "other", 5, spec, now, err, sizeof err), 0);
            (void)sluice_table_try_acquire_at(t, "other", 5, 1, now, &r);
            assert_int_equal(sluice_table_override_remove_at(t, "other", 5, now), 0);
        }
        if (i % 16 == 0) (void)sluice_table_try_acquire_at(t, "held", 4, 1, now, &r);
        now += 1000;
    }
    print_message("  100000 override changes: live %zu bytes before, %zu after\n", before,
                  tu_alloc_live_bytes());
    assert_true(tu_alloc_live_bytes() <= before);
    assert_int_equal(sluice_table_override_set_at(t, "held", 4, "token-bucket 1/h", now, err, sizeof err), 0);
    now += 3600 * SEC;
    assert_true(sluice_table_try_acquire_at(t, "held", 4, 1, now, &r));
    assert_false(sluice_table_try_acquire_at(t, "held", 4, 1, now, &r)); /* 1/h decides */
    sluice_table_free(t);
    assert_int_equal(tu_alloc_live(), 0);
    assert_int_equal(tu_alloc_uninstall(), 0);
}

/* ---- keys at rest stay in place until their room is wanted --------------- */

/* Every algorithm: 48 keys in a table of 64 (never full), requests of 0..3
 * permits at times that run forwards overall but are out of order across
 * keys (each request up to a period behind the latest), gaps that let
 * keys rest between visits.  Each key's decisions are the reference
 * model's (tests/ref_model.c), field by field; a key whose model is at rest
 * at the request's time (and not behind its latest admission) is also
 * decided as a fresh model decides; nothing is ever reclaimed, every key
 * made stays held (peek), and stats.keys counts exactly the keys made. */
static void test_rest_in_place_exact(void **state)
{
    (void)state;
    enum { KEYS = 48, STEPS = 6000 };
    static const struct {
        const char *spec;
        ref_params p;
    } cases[] = {
        {"token-bucket 10/s burst=3", {.alg = REF_TOKEN_BUCKET, .limit = 10, .period_ns = SEC, .capacity = 3}},
        {"leaky-bucket 5/s capacity=2", {.alg = REF_LEAKY_BUCKET, .limit = 5, .period_ns = SEC, .capacity = 2}},
        {"fixed-window 3/100ms", {.alg = REF_FIXED_WINDOW, .limit = 3, .period_ns = SEC / 10}},
        {"sliding-approx 4/100ms", {.alg = REF_SLIDING_APPROX, .limit = 4, .period_ns = SEC / 10}},
        {"sliding-wheel 4/100ms slots=10", {.alg = REF_SLIDING_WHEEL, .limit = 4, .period_ns = SEC / 10, .slots = 10}},
        {"sliding-log 3/100ms", {.alg = REF_SLIDING_LOG, .limit = 3, .period_ns = SEC / 10}},
    };
    uint64_t rng = tu_env_seed() ^ 0x5ba25e;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        sluice_table *t = mk(cases[ci].spec, 64);
        ref_model *m[KEYS];
        bool made[KEYS] = {false};
        size_t nmade = 0, fresh_checked = 0;
        for (int k = 0; k < KEYS; k++) assert_non_null(m[k] = ref_model_new(&cases[ci].p));
        const uint64_t period = cases[ci].p.period_ns;
        uint64_t clock = 10 * SEC;
        for (int i = 0; i < STEPS; i++) {
            clock += tu_splitmix64_below(&rng, period / 8); /* a key rests in a few visits */
            const int k = (int)tu_splitmix64_below(&rng, KEYS);
            const uint64_t now = clock - tu_splitmix64_below(&rng, period); /* out of order */
            const uint64_t p = tu_splitmix64_below(&rng, 4);
            char key[8];
            snprintf(key, sizeof key, "k%d", k);
            ref_result fr = {0};
            bool fresh_ok = false;
            const bool at_rest = made[k] && now >= ref_model_latest(m[k]) &&
                                 ref_model_at_rest(m[k], now);
            if (at_rest) { /* held in place, and decided as a fresh key */
                assert_int_equal(sluice_table_peek_at(t, key, strlen(key), 0, now, NULL, NULL), 0);
                ref_model *f = ref_model_new(&cases[ci].p);
                assert_non_null(f);
                fresh_ok = ref_model_decide(f, p, now, &fr);
                ref_model_free(f);
            }
            ref_result want;
            const bool want_ok = ref_model_decide(m[k], p, now, &want);
            sluice_result r;
            const bool ok = ask(t, key, p, now, &r);
            if (ok != want_ok || r.remaining != want.remaining ||
                r.retry_after_ns != want.retry_after_ns || r.wait_ns != want.wait_ns || r.error)
                fail_msg("%s, step %d, key %d, %llu permits at %llu: table %d rem %llu retry %lld "
                         "wait %llu err %d; model %d rem %llu retry %lld wait %llu",
                         cases[ci].spec, i, k, (unsigned long long)p, (unsigned long long)now,
                         ok, (unsigned long long)r.remaining, (long long)r.retry_after_ns,
                         (unsigned long long)r.wait_ns, r.error, want_ok,
                         (unsigned long long)want.remaining, (long long)want.retry_after_ns,
                         (unsigned long long)want.wait_ns);
            if (at_rest) {
                assert_int_equal(ok, fresh_ok);
                assert_int_equal(r.remaining, fr.remaining);
                assert_int_equal(r.retry_after_ns, fr.retry_after_ns);
                assert_int_equal(r.wait_ns, fr.wait_ns);
                fresh_checked++;
            }
            if (!made[k] && ok && p > 0) { /* an admission makes the key */
                made[k] = true;
                nmade++;
            }
            sluice_table_stats st;
            sluice_table_stats_get(t, &st);
            assert_int_equal(st.keys, nmade);
            assert_int_equal(st.reclaimed, 0);
        }
        for (int k = 0; k < KEYS; k++) {
            char key[8];
            snprintf(key, sizeof key, "k%d", k);
            assert_int_equal(sluice_table_peek_at(t, key, strlen(key), 0, clock, NULL, NULL),
                             made[k] ? 0 : SLUICE_ENOENT);
            ref_model_free(m[k]);
        }
        print_message("  %s: %zu keys made, %zu decisions of keys at rest checked as fresh\n",
                      cases[ci].spec, nmade, fresh_checked);
        assert_true(fresh_checked > STEPS / 10);
        sluice_table_free(t);
    }
}

typedef struct held_count {
    size_t n;
} held_count;

static int count_held(const void *key, size_t keylen, const sluice_key_state *ks, void *arg)
{
    (void)key;
    (void)keylen;
    (void)ks;
    ((held_count *)arg)->n++;
    return 0;
}

/* The keys the table holds, counted by a whole scan. */
static size_t scan_count(sluice_table *t)
{
    held_count c = {0};
    uint64_t cur = 0;
    int calls = 0;
    do {
        assert_int_equal(sluice_table_scan(t, cur, 16, count_held, &c, &cur), 0);
        assert_true(++calls < 1000000);
    } while (cur != 0);
    return c.n;
}

/* stats.keys against the keys a whole scan finds and against the count of
 * keys made less those reclaimed and evicted; never above max_keys. */
static void check_count(sluice_table *t, size_t max_keys, size_t made)
{
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    assert_true(st.keys <= max_keys);
    assert_int_equal(st.keys, scan_count(t));
    assert_int_equal(st.keys, made - st.reclaimed - st.evicted);
}

/* A full table of keys in use and keys at rest, then a flood of new keys:
 * the flood takes the places of the keys at rest first -- nothing is
 * evicted and nothing refused while one is at rest, with or without
 * SLUICE_TABLE_EVICT_LRU -- and the keys in use keep their state (their
 * decisions are the contract's: refused, with the exact wait).  Once every
 * held key is in use, the flood is refused (default) or evicts (LRU).
 * max_keys stays a hard bound throughout, and stats.keys is exact. */
static void test_rest_in_place_flood(void **state)
{
    (void)state;
    for (int lru = 0; lru <= 1; lru++) {
        char err[256], key[16];
        const size_t max = 16;
        sluice_table *t = sluice_table_new_flags("token-bucket 10/s burst=2", max,
                                                 lru ? SLUICE_TABLE_EVICT_LRU : 0, err, sizeof err);
        assert_non_null(t);
        sluice_result r;
        size_t made = 0;
        const uint64_t T = 100 * SEC;
        for (int k = 0; k < 8; k++, made++) { /* at rest from T - 900 ms on */
            snprintf(key, sizeof key, "rest%d", k);
            assert_true(ask(t, key, 1, T - SEC, &r));
        }
        for (int k = 0; k < 8; k++, made++) { /* in use until T + 200 ms */
            snprintf(key, sizeof key, "use%d", k);
            assert_true(ask(t, key, 2, T, &r));
        }
        check_count(t, max, made);
        for (int k = 0; k < 8; k++, made++) { /* each takes a place of a key at rest */
            snprintf(key, sizeof key, "new%d", k);
            assert_true(ask(t, key, 1, T + SEC / 1000, &r));
            assert_int_equal(r.error, 0);
            check_count(t, max, made + 1);
        }
        sluice_table_stats st;
        sluice_table_stats_get(t, &st);
        assert_int_equal(st.reclaimed, 8);
        assert_int_equal(st.evicted, 0);
        assert_int_equal(st.refused, 0);
        for (int k = 0; k < 8; k++) { /* kept, exactly: empty until T + 100 ms */
            snprintf(key, sizeof key, "use%d", k);
            assert_false(ask(t, key, 1, T + SEC / 500, &r));
            assert_int_equal(r.error, 0);
            assert_int_equal(r.retry_after_ns, (int64_t)(SEC / 10 - SEC / 500));
        }
        /* every held key in use: the next new key is refused, or evicts one */
        const bool ok = ask(t, "over", 1, T + SEC / 500, &r);
        sluice_table_stats_get(t, &st);
        if (lru) {
            assert_true(ok);
            assert_int_equal(st.evicted, 1);
            made++;
        } else {
            assert_false(ok);
            assert_int_equal(r.error, SLUICE_EFULL);
            assert_int_equal(st.refused, 1);
            assert_int_equal(st.evicted, 0);
        }
        check_count(t, max, made);
        /* later, all at rest: a flood of 200 new keys, never refused, never
         * evicting, never above max_keys */
        for (int k = 0; k < 200; k++, made++) {
            snprintf(key, sizeof key, "f%d", k);
            assert_true(ask(t, key, 1, T + SEC + (uint64_t)k * (SEC / 5), &r));
            check_count(t, max, made + 1);
        }
        sluice_table_stats_get(t, &st);
        assert_int_equal(st.evicted, lru ? 1 : 0);
        assert_int_equal(st.refused, lru ? 0 : 1);
        sluice_table_free(t);
    }
}

/* Many shards (max_keys 3000: 16 shards): 3000 keys at rest fill the
 * table; 30000 new keys then come, in batches whose keys stay in use for
 * a while, mixed with visits of old keys: max_keys is never passed (a
 * place is taken only with room for it: stats.keys, sampled after every
 * call, and a whole scan after each batch agree), no new key is refused
 * while the keys in use are fewer than max_keys, and every admitted
 * decision is a fresh key's or the contract's. */
static void test_rest_in_place_bound(void **state)
{
    (void)state;
    enum { MAX = 3000, NEW = 30000, BATCH = 500 };
    sluice_table *t = mk("token-bucket 1/s burst=5", MAX);
    sluice_result r;
    char key[24];
    size_t made = 0;
    uint64_t now = SEC;
    for (int k = 0; k < MAX; k++, made++) {
        snprintf(key, sizeof key, "old%d", k);
        assert_true(ask(t, key, 1, now, &r)); /* at rest 1 s later */
    }
    check_count(t, MAX, made);
    uint64_t rng = tu_env_seed() ^ 0xb0b;
    for (int b = 0; b < NEW / BATCH; b++) {
        now += 6 * SEC; /* every earlier key at rest (5 permits: 5 s) */
        const uint64_t off = tu_splitmix64_below(&rng, MAX);
        for (int k = 0; k < BATCH; k++) {
            snprintf(key, sizeof key, "new%d", b * BATCH + k);
            assert_true(ask(t, key, 5, now, &r)); /* in use for 5 s */
            assert_int_equal(r.error, 0);
            made++;
            sluice_table_stats st;
            sluice_table_stats_get(t, &st);
            assert_true(st.keys <= MAX);
            if (k % 4 == 0) { /* an old key (once a batch): held or not, decided as fresh */
                snprintf(key, sizeof key, "old%d", (int)((off + (uint64_t)k / 4) % MAX));
                const bool held = sluice_table_peek_at(t, key, strlen(key), 0, now, NULL, NULL) == 0;
                assert_true(ask(t, key, 5, now, &r));
                assert_int_equal(r.remaining, 0);
                made += !held;
            }
        }
        check_count(t, MAX, made);
    }
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    assert_int_equal(st.refused, 0);
    assert_int_equal(st.evicted, 0);
    assert_true(st.reclaimed > 0);
    sluice_table_free(t);
}

/* A full table of keys long at rest: a new key reclaims a few of them (at
 * least one; one, in its own place or through the wheel), not every one --
 * the others stay in place, and each later new key takes a few more at
 * most; none is refused.  (A call's cost stays bounded however many keys
 * rest.) */
static void test_rest_reclaim_few(void **state)
{
    (void)state;
    const size_t max = 256; /* one shard */
    sluice_table *t = mk("token-bucket 10/s burst=10", max);
    sluice_result r;
    char key[16];
    for (size_t k = 0; k < max; k++) { /* at rest 1 s after, at 1 .. 27 s */
        snprintf(key, sizeof key, "rest%zu", k);
        assert_true(ask(t, key, 10, (uint64_t)k * (SEC / 10), &r));
    }
    check_count(t, max, max);
    size_t made = max;
    uint64_t was = 0;
    for (int k = 0; k < 20; k++, made++) {
        snprintf(key, sizeof key, "new%d", k);
        assert_true(ask(t, key, 1, 3600 * SEC, &r));
        sluice_table_stats st;
        sluice_table_stats_get(t, &st);
        assert_true(st.reclaimed <= was + 64);
        if (k == 0) assert_true(st.reclaimed >= 1 && st.reclaimed < max);
        was = st.reclaimed;
        check_count(t, max, made + 1);
    }
    sluice_table_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_independent),
        cmocka_unit_test(test_key_length),
        cmocka_unit_test(test_full_table),
        cmocka_unit_test(test_many_keys_match_limiters),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_live_clock_coarse),
        cmocka_unit_test(test_reclaim_when_full),
        cmocka_unit_test(test_refusal_writes_nothing),
        cmocka_unit_test(test_refusal_after_reconfigure),
        cmocka_unit_test(test_long_runs),
        cmocka_unit_test(test_long_keys),
        cmocka_unit_test(test_spec_change_memory),
        cmocka_unit_test(test_override_churn_memory),
        cmocka_unit_test(test_rest_in_place_exact),
        cmocka_unit_test(test_rest_in_place_flood),
        cmocka_unit_test(test_rest_in_place_bound),
        cmocka_unit_test(test_rest_reclaim_few),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
