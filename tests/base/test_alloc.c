/* test_alloc.c -- running out of memory, as SQLite tests it: fail the Nth
 * allocation, for N = 0, 1, 2, ... until the call succeeds.
 *
 * The counting allocator of tests/testutil.h is installed.  Every
 * block it hands out carries a header with a magic number, so a block the
 * library frees with the wrong allocator (or twice) is caught at once, and
 * `live` counts the blocks not yet freed.  Two variants: the Nth allocation
 * (malloc_fn or calloc_fn) fails alone ("once") or with every later one
 * ("from N on").
 *
 *  - every constructor (sluice_limiter_new for each algorithm,
 *    sluice_table_new) fails cleanly: NULL, a one-line message, nothing
 *    left allocated; once it succeeds, the object works and frees back to
 *    zero live blocks;
 *  - sluice_table_try_acquire_at() for a new key: refused with
 *    res->error == SLUICE_ENOMEM and retry_after_ns = -1,
 *    nothing taken (the key's later first grant sees a full limiter), and
 *    nothing leaked once the table is freed;
 *  - sliding-log and sliding-wheel, whose memory grows on the decision
 *    path: with allocations failing, a request is refused rather than
 *    admitted unrecorded (never more than the contract admits), and after
 *    the allocator recovers every decision is exactly the contract's
 *    (checked against a plain list of the admitted requests);
 *  - a table sized for 10^6 keys, made through the hook, leaves its pages
 *    untouched (the library asks the hook's calloc_fn, never zeroes memory
 *    itself), and sluice_set_allocator() refuses an incomplete allocator.
 *
 * Each test restores libc's allocator in its teardown.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "sluice.h"
#include "testutil.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_N 10000 /* no constructor needs this many allocations */

/* ------------------------------------------------------------------------ */
/* The counting, failing allocator (tests/testutil.h)                        */

static void install(void)
{
    assert_int_equal(tu_alloc_install(), 0);
    sluice_allocator back;
    sluice_get_allocator(&back);
    assert_true(back.malloc_fn == tu_malloc);
    assert_true(back.calloc_fn == tu_calloc);
    assert_true(back.free_fn == tu_free);
}

/* The object a test is working on, freed by the teardown when a failed
 * check ends the test early (so a failure does not also report a leak). */
static sluice_table *g_table;
static sluice_limiter *g_lim;

static int restore_allocator(void **state)
{
    (void)state;
    tu_alloc_disarm();
    sluice_table_free(g_table);
    sluice_limiter_free(g_lim);
    g_table = NULL;
    g_lim = NULL;
    tu_alloc_uninstall();
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Constructors                                                              */

struct alg_spec {
    const char *spec;
    uint64_t first_remaining; /* remaining after one permit from rest */
};

static const struct alg_spec alg_specs[] = {
    {"fixed-window 10/s", 9},
    {"sliding-log 10/s", 9},
    {"sliding-wheel 10/s", 9},
    {"sliding-wheel 10/s slots=10", 9},
    {"sliding-approx 10/s", 9},
    {"token-bucket 10/s", 9},
    {"token-bucket 10/s burst=5", 4},
    {"leaky-bucket 10/s", 9},
    {"leaky-bucket 10/s capacity=5 nodelay", 4},
};

static void check_message(const char *what, const char *spec, long n,
                          const char *err, size_t errlen)
{
    if (!memchr(err, '\0', errlen))
        fail_msg("%s(\"%s\") failing allocation %ld: message not NUL-terminated", what, spec, n);
    if (err[0] == '\0')
        fail_msg("%s(\"%s\") failing allocation %ld: no message", what, spec, n);
    if (strchr(err, '\n'))
        fail_msg("%s(\"%s\") failing allocation %ld: message not one line", what, spec, n);
}

static void check_no_leak(const char *what, const char *spec, long n)
{
    if (tu_alloc_live() != 0)
        fail_msg("%s(\"%s\") failing allocation %ld: %ld blocks leaked", what,
                 spec, n, tu_alloc_live());
}

static void limiter_new_loop(bool persistent)
{
    for (size_t s = 0; s < COUNT(alg_specs); s++) {
        const char *spec = alg_specs[s].spec;
        install();
        long n;
        for (n = 0; n < MAX_N; n++) {
            char err[256];
            memset(err, 'Z', sizeof err);
            tu_alloc_arm(n, persistent);
            sluice_limiter *lim = sluice_limiter_new(spec, err, sizeof err);
            long failures = tu_alloc_failures();
            tu_alloc_arm(-1, false);
            if (!lim) {
                if (failures == 0)
                    fail_msg("sluice_limiter_new(\"%s\") failed with no failed allocation: %s", spec, err);
                check_message("sluice_limiter_new", spec, n, err, sizeof err);
                check_no_leak("sluice_limiter_new", spec, n);
                continue;
            }
            sluice_result r;
            g_lim = lim;
            assert_true(sluice_try_acquire_at(lim, 1, 1000, &r));
            assert_int_equal(r.remaining, alg_specs[s].first_remaining);
            sluice_limiter_free(lim);
            g_lim = NULL;
            check_no_leak("sluice_limiter_new + free", spec, n);
            if (failures == 0) break;
        }
        if (n == MAX_N) fail_msg("sluice_limiter_new(\"%s\") never succeeded", spec);
        restore_allocator(NULL);
    }
}

static void test_limiter_new_once(void **state)
{
    (void)state;
    limiter_new_loop(false);
}

static void test_limiter_new_from_n(void **state)
{
    (void)state;
    limiter_new_loop(true);
}

static void table_new_loop(bool persistent)
{
    static const size_t max_keys[] = {1, 16, 1000, 100000};
    for (size_t s = 0; s < COUNT(alg_specs); s++) {
        for (size_t m = 0; m < COUNT(max_keys); m++) {
            const char *spec = alg_specs[s].spec;
            install();
            long n;
            for (n = 0; n < MAX_N; n++) {
                char err[256];
                memset(err, 'Z', sizeof err);
                tu_alloc_arm(n, persistent);
                sluice_table *t = sluice_table_new(spec, max_keys[m], err, sizeof err);
                long failures = tu_alloc_failures();
                tu_alloc_arm(-1, false);
                if (!t) {
                    if (failures == 0)
                        fail_msg("sluice_table_new(\"%s\", %zu) failed with no failed "
                                 "allocation: %s", spec, max_keys[m], err);
                    check_message("sluice_table_new", spec, n, err, sizeof err);
                    check_no_leak("sluice_table_new", spec, n);
                    continue;
                }
                sluice_result r;
                g_table = t;
                assert_true(sluice_table_try_acquire_at(t, "k", 1, 1, 1000, &r));
                assert_int_equal(r.remaining, alg_specs[s].first_remaining);
                sluice_table_free(t);
                g_table = NULL;
                check_no_leak("sluice_table_new + free", spec, n);
                if (failures == 0) break;
            }
            if (n == MAX_N) fail_msg("sluice_table_new(\"%s\") never succeeded", spec);
            restore_allocator(NULL);
        }
    }
}

static void test_table_new(void **state)
{
    (void)state;
    table_new_loop(false);
    table_new_loop(true);
}

/* sluice_spec_check makes nothing to keep: it may fail with SLUICE_ENOMEM
 * but never leaks. */
static void test_spec_check(void **state)
{
    (void)state;
    for (size_t s = 0; s < COUNT(alg_specs); s++) {
        install();
        long n;
        for (n = 0; n < MAX_N; n++) {
            char canon[64], err[256];
            tu_alloc_arm(n, true);
            int rc = sluice_spec_check(alg_specs[s].spec, canon, sizeof canon, err, sizeof err);
            long failures = tu_alloc_failures();
            tu_alloc_arm(-1, false);
            check_no_leak("sluice_spec_check", alg_specs[s].spec, n);
            if (rc == 0 && failures == 0) break;
            if (rc != 0 && rc != SLUICE_ENOMEM)
                fail_msg("sluice_spec_check(\"%s\") = %d", alg_specs[s].spec, rc);
            if (rc == 0) continue;
        }
        restore_allocator(NULL);
    }
}

/* ------------------------------------------------------------------------ */
/* A table's new keys                                                        */

#define TABLE_KEYS 70 /* new keys, each longer than the 16 bytes kept inline:
                       * the key copy is the allocation a new key makes */

static void table_key_loop(bool persistent)
{
    for (size_t s = 0; s < COUNT(alg_specs); s++) {
        const char *spec = alg_specs[s].spec;
        const uint64_t now = 5000000000ULL;
        install();
        sluice_table *t = g_table = sluice_table_new(spec, 1000, NULL, 0);
        assert_non_null(t);
        long total_failures = 0;
        for (int k = 0; k < TABLE_KEYS; k++) {
            char key[32];
            int keylen = snprintf(key, sizeof key, "key-%d-longer-than-inline", k);
            long n;
            for (n = 0; n < MAX_N; n++) {
                sluice_result r;
                memset(&r, 0x5a, sizeof r);
                tu_alloc_arm(n, persistent);
                bool ok = sluice_table_try_acquire_at(t, key, (size_t)keylen, 1, now, &r);
                int le = r.error;
                long failures = tu_alloc_failures();
                tu_alloc_arm(-1, false);
                total_failures += failures;
                if (!ok) {
                    if (failures == 0)
                        fail_msg("\"%s\" key %d: refused with no failed allocation "
                                 "(last_error %d)", spec, k, le);
                    if (le != SLUICE_ENOMEM)
                        fail_msg("\"%s\" key %d, failing allocation %ld: last_error %d, "
                                 "want SLUICE_ENOMEM", spec, k, n, le);
                    assert_false(r.allowed);
                    if (r.retry_after_ns != -1)
                        fail_msg("\"%s\" key %d, failing allocation %ld: retry_after_ns "
                                 "%lld, want -1", spec, k, n, (long long)r.retry_after_ns);
                    continue;
                }
                assert_int_equal(le, 0);
                assert_true(r.allowed);
                /* nothing was taken by the refused attempts */
                if (r.remaining != alg_specs[s].first_remaining)
                    fail_msg("\"%s\" key %d: remaining %llu after %ld refused attempts, "
                             "want %llu", spec, k, (unsigned long long)r.remaining, n,
                             (unsigned long long)alg_specs[s].first_remaining);
                if (failures == 0) break;
            }
            if (n == MAX_N) fail_msg("\"%s\": key %d never admitted", spec, k);
        }
        /* every key holds exactly one permit */
        for (int k = 0; k < TABLE_KEYS; k++) {
            char key[32];
            int keylen = snprintf(key, sizeof key, "key-%d-longer-than-inline", k);
            sluice_result r;
            assert_true(sluice_table_try_acquire_at(t, key, (size_t)keylen, 0, now, &r));
            assert_int_equal(r.remaining, alg_specs[s].first_remaining);
        }
        sluice_table_free(t);
        g_table = NULL;
        if (tu_alloc_live() != 0) fail_msg("\"%s\": %ld blocks leaked by the table", spec, tu_alloc_live());
        if (total_failures == 0) fail_msg("\"%s\": no allocation was ever failed", spec);
        restore_allocator(NULL);
    }
}

static void test_table_new_key(void **state)
{
    (void)state;
    table_key_loop(false);
    table_key_loop(true);
}

/* ------------------------------------------------------------------------ */
/* Decision-path memory: sliding-log and sliding-wheel                       */

/* The contract's window rule over a plain list of admitted requests. */
#define MAX_EVENTS 20000

typedef struct model {
    uint64_t limit, period_ns, tick_ns, slots; /* sliding-log: tick 1, slots W */
    uint64_t t_last;
    size_t first; /* events before it no longer count (time only advances) */
    size_t n;
    uint64_t t[MAX_EVENTS], p[MAX_EVENTS];
} model;

static model M;

static void model_init(uint64_t limit, uint64_t period_ns, uint64_t slots)
{
    memset(&M, 0, sizeof M);
    M.limit = limit;
    M.period_ns = period_ns;
    M.slots = slots;
    M.tick_ns = period_ns / slots;
}

/* Does a request admitted at ti still count at time t >= ti?  (3.3; with
 * tick 1 ns and N = W this is 3.2's t - W < ti <= t.) */
static bool model_counts(uint64_t ti, uint64_t t)
{
    uint64_t s = t / M.tick_ns, si = ti / M.tick_ns;
    return si <= s && si + M.slots > s;
}

/* The permits counted at time t (t never less than any earlier call's). */
static uint64_t model_used(uint64_t t)
{
    while (M.first < M.n && !model_counts(M.t[M.first], t)) M.first++;
    uint64_t sum = 0;
    for (size_t i = M.first; i < M.n; i++) {
        assert_true(model_counts(M.t[i], t));
        sum += M.p[i];
    }
    return sum;
}

/* The least wait after which p is allowed with no other traffic: the
 * counted requests leave oldest slot first; find the first instant at which
 * enough have left. */
static int64_t model_retry(uint64_t t, uint64_t p)
{
    if (p > M.limit) return -1;
    uint64_t used = model_used(t);
    if (used + p <= M.limit) return 0;
    uint64_t dropped = 0;
    for (size_t i = M.first; i < M.n; i++) {
        uint64_t slot = M.t[i] / M.tick_ns;
        dropped += M.p[i];
        if (i + 1 < M.n && M.t[i + 1] / M.tick_ns == slot) continue;
        if (used - dropped + p <= M.limit) return (int64_t)((slot + M.slots) * M.tick_ns - t);
    }
    fail_msg("model: no retry time found");
    return -1;
}

static void model_admit(uint64_t t, uint64_t p)
{
    assert_true(M.n < MAX_EVENTS);
    M.t[M.n] = t;
    M.p[M.n] = p;
    M.n++;
}

/* One request; returns whether the library admitted it.  `may_oom`: the
 * library may refuse a request the model allows (only when an allocation
 * failed during the call). */
static bool decide_and_check(sluice_limiter *lim, const char *spec, uint64_t t,
                             uint64_t p, bool *oom_refusal)
{
    if (t < M.t_last) t = M.t_last;
    M.t_last = t;
    uint64_t used = model_used(t);
    bool want = p == 0 || used + p <= M.limit;
    long failures_before = tu_alloc_failures();
    sluice_result r;
    memset(&r, 0x5a, sizeof r);
    bool got = sluice_try_acquire_at(lim, p, t, &r);
    bool failed_alloc = tu_alloc_failures() != failures_before;
    *oom_refusal = false;

    if (got != r.allowed) fail_msg("\"%s\" t=%llu: return value and res->allowed differ", spec, (unsigned long long)t);
    if (got && !want)
        fail_msg("\"%s\" t=%llu p=%llu: admitted beyond the limit (used %llu of %llu)",
                 spec, (unsigned long long)t, (unsigned long long)p,
                 (unsigned long long)used, (unsigned long long)M.limit);
    if (!got && want) {
        if (!failed_alloc)
            fail_msg("\"%s\" t=%llu p=%llu: refused with room (used %llu of %llu) and no "
                     "failed allocation", spec, (unsigned long long)t, (unsigned long long)p,
                     (unsigned long long)used, (unsigned long long)M.limit);
        *oom_refusal = true;
        /* nothing was taken: the state is what it was */
        if (r.remaining != M.limit - used)
            fail_msg("\"%s\" t=%llu: remaining %llu after a refusal for memory, want %llu",
                     spec, (unsigned long long)t, (unsigned long long)r.remaining,
                     (unsigned long long)(M.limit - used));
        return false;
    }
    if (got && p > 0) model_admit(t, p);
    uint64_t rem = M.limit - model_used(t);
    if (r.remaining != rem)
        fail_msg("\"%s\" t=%llu p=%llu %s: remaining %llu, want %llu", spec,
                 (unsigned long long)t, (unsigned long long)p, got ? "allowed" : "denied",
                 (unsigned long long)r.remaining, (unsigned long long)rem);
    int64_t retry = got ? 0 : model_retry(t, p);
    if (r.retry_after_ns != retry)
        fail_msg("\"%s\" t=%llu p=%llu %s: retry_after_ns %lld, want %lld", spec,
                 (unsigned long long)t, (unsigned long long)p, got ? "allowed" : "denied",
                 (long long)r.retry_after_ns, (long long)retry);
    if (r.wait_ns != 0) fail_msg("\"%s\": wait_ns %llu, want 0", spec, (unsigned long long)r.wait_ns);
    return got;
}

struct window_spec {
    const char *spec;
    uint64_t limit, period_ns, slots;
};

static const struct window_spec window_specs[] = {
    {"sliding-log 1000/s", 1000, 1000000000ULL, 1000000000ULL},
    {"sliding-log 50/10ms", 50, 10000000ULL, 10000000ULL},
    {"sliding-wheel 1000/s", 1000, 1000000000ULL, 1000},
    {"sliding-wheel 1000/s slots=10", 1000, 1000000000ULL, 10},
    {"sliding-wheel 300/d", 300, 86400000000000ULL, 86400000ULL},
};

/* persistent: once the allocator starts failing, it fails every call until
 * it recovers; else single allocations fail now and then. */
static void window_oom(bool persistent)
{
    for (size_t s = 0; s < COUNT(window_specs); s++) {
        const struct window_spec *w = &window_specs[s];
        install();
        sluice_limiter *lim = g_lim = sluice_limiter_new(w->spec, NULL, 0);
        assert_non_null(lim);
        model_init(w->limit, w->period_ns, w->slots);
        /* small steps: many requests, each in its own slot, in one window */
        uint64_t step = w->period_ns / 1000 < w->period_ns / w->slots
                            ? w->period_ns / w->slots
                            : w->period_ns / 1000;
        uint64_t seed = 0x2545f4914f6cdd1dULL + s, t = 7 * w->period_ns + 3;
        bool oom;
        long oom_refusals = 0;

        /* 1: a few requests with memory */
        for (int i = 0; i < 3; i++) {
            decide_and_check(lim, w->spec, t, 1, &oom);
            t += step;
        }
        /* 2: allocations fail */
        long live_before = tu_alloc_live();
        if (persistent) tu_alloc_arm(0, true);
        for (int i = 0; i < 300; i++) {
            uint64_t r = tu_xorshift64(&seed);
            if (!persistent && i % 5 == 0) tu_alloc_arm(0, false); /* the next one fails */
            decide_and_check(lim, w->spec, t, 1 + r % 3, &oom);
            oom_refusals += oom;
            if (!persistent) tu_alloc_arm(-1, false);
            t += step * (1 + r % 2);
        }
        tu_alloc_arm(-1, false);
        if (persistent && tu_alloc_live() > live_before)
            fail_msg("\"%s\": memory grew while every allocation failed", w->spec);
        /* 3: recovered: every decision is the contract's, over several
         * windows, with the history the library actually admitted */
        for (int i = 0; i < 4000; i++) {
            uint64_t r = tu_xorshift64(&seed);
            uint64_t p = r % 4;
            if (r % 97 == 0) p = w->limit + 1;
            if (r % 89 == 0) p = w->limit;
            decide_and_check(lim, w->spec, t, p, &oom);
            assert_false(oom);
            t += (step * (r % 2048)) / 1024;
        }
        print_message("%s (%s): %ld requests refused for memory\n", w->spec,
                      persistent ? "failing from N on" : "failing once", oom_refusals);
        sluice_limiter_free(lim);
        g_lim = NULL;
        if (tu_alloc_live() != 0) fail_msg("\"%s\": %ld blocks leaked", w->spec, tu_alloc_live());
        restore_allocator(NULL);
    }
}

static void test_window_oom_persistent(void **state)
{
    (void)state;
    window_oom(true);
}

static void test_window_oom_once(void **state)
{
    (void)state;
    window_oom(false);
}

/* A limiter whose first admission already finds no memory: refused, and the
 * limiter is still at rest once memory is back. */
static void test_window_oom_first_request(void **state)
{
    (void)state;
    static const char *const specs[] = {"sliding-log 10/s", "sliding-wheel 10/s",
                                        "sliding-wheel 10/s slots=10"};
    for (size_t s = 0; s < COUNT(specs); s++) {
        install();
        sluice_limiter *lim = g_lim = sluice_limiter_new(specs[s], NULL, 0);
        assert_non_null(lim);
        tu_alloc_arm(0, true);
        sluice_result r;
        bool got = sluice_try_acquire_at(lim, 1, 1000, &r);
        long failures = tu_alloc_failures();
        tu_alloc_arm(-1, false);
        if (got) {
            /* the library had the memory already: fine, but then it counts */
            assert_int_equal(failures, 0);
            assert_int_equal(r.remaining, 9);
        } else {
            assert_true(failures > 0);
            assert_false(r.allowed);
            assert_int_equal(r.remaining, 10);
            assert_true(sluice_try_acquire_at(lim, 10, 1000, &r));
            assert_int_equal(r.remaining, 0);
            assert_false(sluice_try_acquire_at(lim, 1, 1000, &r));
        }
        sluice_limiter_free(lim);
        g_lim = NULL;
        assert_int_equal(tu_alloc_live(), 0);
        restore_allocator(NULL);
    }
}

/* ------------------------------------------------------------------------ */
/* A hook does not make a table touch its memory                             */

/* A table sized for 10^6 keys allocates tens of MB up front (its index and
 * slab) but, with libc's calloc, the pages stay untouched until keys arrive.
 * Through a hook it must stay so: the resident set grows by far less than
 * what the table asked the hook for (tu_alloc_bytes(), an
 * independent measure of the table's size).  A library that zeroes its
 * blocks itself (malloc + memset) makes them all resident. */
static void test_table_untouched_pages(void **state)
{
    (void)state;
    static const char *const specs[] = {"token-bucket 10/s", "sliding-log 10/s"};
#ifdef M_MMAP_THRESHOLD
    /* glibc raises its mmap threshold as large blocks are freed, and then
     * serves them from recycled heap memory, which its calloc must clear:
     * keep it fixed, so every large block is fresh zero pages. */
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);
#endif
    for (size_t s = 0; s < COUNT(specs); s++) {
        install();
        size_t before = tu_rss_bytes();
        if (before == 0) skip();
        sluice_table *t = g_table = sluice_table_new(specs[s], 1000000, NULL, 0);
        assert_non_null(t);
        size_t after = tu_rss_bytes(), asked = tu_alloc_bytes();
        size_t grew = after > before ? after - before : 0;
        print_message("%s, 10^6 keys: %zu bytes allocated through the hook, RSS +%zu\n",
                      specs[s], asked, grew);
        if (asked < 16 * 1000000)
            fail_msg("\"%s\": only %zu bytes allocated for 10^6 keys", specs[s], asked);
        if (grew > asked / 16)
            fail_msg("\"%s\": the table's creation made %zu of its %zu bytes resident",
                     specs[s], grew, asked);
        /* the table works, and its pages come in as keys do */
        sluice_result r;
        assert_true(sluice_table_try_acquire_at(t, "k", 1, 1, 1000, &r));
        assert_int_equal(r.remaining, 9);
        sluice_table_free(t);
        g_table = NULL;
        assert_int_equal(tu_alloc_live(), 0);
        restore_allocator(NULL);
    }
}

/* An allocator with a function missing, or a reserved slot set (by a caller
 * built for a later version), is refused and changes nothing; NULL restores
 * libc's. */
static void test_set_allocator_refuses(void **state)
{
    (void)state;
    install();
    static int marker;
    const sluice_allocator bad[] = {
        {.calloc_fn = tu_calloc, .free_fn = tu_free},
        {.malloc_fn = tu_malloc, .free_fn = tu_free},
        {.malloc_fn = tu_malloc, .calloc_fn = tu_calloc},
        {.malloc_fn = tu_malloc, .calloc_fn = tu_calloc, .free_fn = tu_free, .reserved = {&marker}},
        {.malloc_fn = tu_malloc, .calloc_fn = tu_calloc, .free_fn = tu_free,
         .reserved = {NULL, NULL, NULL, &marker}},
    };
    for (size_t i = 0; i < COUNT(bad); i++) {
        if (sluice_set_allocator(&bad[i]) != SLUICE_EINVAL) fail_msg("allocator %zu accepted", i);
        sluice_allocator now;
        sluice_get_allocator(&now);
        assert_true(now.malloc_fn == tu_malloc && now.calloc_fn == tu_calloc && now.free_fn == tu_free);
    }
    /* still ours: a limiter is made through it */
    sluice_limiter *lim = g_lim = sluice_limiter_new("token-bucket 1/s", NULL, 0);
    assert_non_null(lim);
    assert_true(tu_alloc_live() > 0);
    sluice_limiter_free(lim);
    g_lim = NULL;
    assert_int_equal(tu_alloc_live(), 0);
    assert_int_equal(sluice_set_allocator(NULL), 0);
    sluice_allocator now;
    sluice_get_allocator(&now);
    assert_true(now.malloc_fn == malloc && now.calloc_fn == calloc && now.free_fn == free);
    for (size_t i = 0; i < COUNT(now.reserved); i++) assert_null(now.reserved[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_limiter_new_once, restore_allocator),
        cmocka_unit_test_teardown(test_limiter_new_from_n, restore_allocator),
        cmocka_unit_test_teardown(test_table_new, restore_allocator),
        cmocka_unit_test_teardown(test_spec_check, restore_allocator),
        cmocka_unit_test_teardown(test_table_new_key, restore_allocator),
        cmocka_unit_test_teardown(test_window_oom_persistent, restore_allocator),
        cmocka_unit_test_teardown(test_window_oom_once, restore_allocator),
        cmocka_unit_test_teardown(test_window_oom_first_request, restore_allocator),
        cmocka_unit_test_teardown(test_table_untouched_pages, restore_allocator),
        cmocka_unit_test_teardown(test_set_allocator_refuses, restore_allocator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
