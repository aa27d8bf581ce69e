/* test_region_hostile.c -- a co-tenant writing garbage into a live shared
 * table (src/table/region_table.c; include/sluice.h, "What a damaged region can
 * do").
 *
 * Forked processes attach one region and decide on it -- try_acquire,
 * bursts, peeks, removes, scans, statistics, composites, changes of spec,
 * reservations settled or cancelled -- while another forked process, the
 * co-tenant, writes garbage into it: random words anywhere, and aimed ones
 * (slot header words with the longest key length, epochs far ahead, the
 * slots' generations, counts of zero or 2^64 - 1, odd
 * sequence words, lock words naming dead processes or start time 0).  The
 * region has a PROT_NONE page on each side.
 *
 * Checked, for each of three layouts (a packed token bucket, a window log
 * with its rings, a sliding-approx window too large to pack: whole
 * states), several shards:
 *  - no decider crashes: each exits 0 (a write outside the region faults on
 *    a guard page; ASan and UBSan abort);
 *  - none hangs: after the co-tenant stops, each decider makes AFTER more
 *    calls, and the parent's watchdog (scaled for a loaded machine) kills
 *    and fails any child still running;
 *  - none grows: each decider's resident set after the run is within
 *    GROWTH of what it was after its first calls.
 * Answers are not checked: a damaged region may give wrong ones.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sluice.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define SEC 1000000000ULL
#define DECIDERS 3
#define KEY_BYTES 24
#define AFTER 20000                     /* calls each decider makes after the garbage */
#define GROWTH ((size_t)32 << 20)       /* resident set growth allowed */
#define GARBAGE_NS (2 * SEC)            /* how long the co-tenant writes */
#define GARBAGE_MAX 3000000             /* and at most this many writes */

typedef struct shared {
    _Atomic int stop;                   /* the co-tenant is done */
    _Atomic uint64_t calls[DECIDERS];
    _Atomic uint64_t writes;
} shared;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

#define CHILD_CHECK(c)                                                  \
    do {                                                                \
        if (!(c)) {                                                     \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c);     \
            _exit(1);                                                   \
        }                                                               \
    } while (0)

static int scan_fn(const void *key, size_t keylen, const sluice_key_state *st, void *arg)
{
    (void)key;
    (void)st;
    (void)arg;
    return keylen > KEY_BYTES; /* a key longer than any stops the scan: checked below */
}

/* One call of a random kind on t, at *now. */
static void one_call(sluice_table *t, sluice_limiter *lim, const char *change, uint64_t *rng,
                     uint64_t *now)
{
    char key[KEY_BYTES + 1];
    const uint64_t x = tu_xorshift64(rng);
    const size_t len = (size_t)(x % (KEY_BYTES + 1));
    for (size_t i = 0; i < len; i++) key[i] = (char)('a' + (x >> (8 + i % 40)) % 3);
    const uint64_t p = (x >> 50) % 4;
    *now += (x >> 20) % (SEC / 50);
    sluice_result r;
    switch ((x >> 56) % 16) {
    default: {
        const bool ok = sluice_table_try_acquire_at(t, key, len, p, *now, &r);
        CHILD_CHECK(ok == r.allowed);
        break;
    }
    case 7: { /* a reservation, settled or cancelled; every one closed */
        sluice_table_reservation rv;
        if (!sluice_table_reserve_at(t, key, len, p, *now, (x >> 8) % SEC, &rv, &r)) {
            CHILD_CHECK(!r.allowed && rv.table == NULL);
            break;
        }
        const int rc = (x >> 4) & 1 ? sluice_table_reservation_cancel_at(&rv, *now)
                                    : sluice_table_reservation_settle_at(&rv, (x >> 12) % 8, *now);
        CHILD_CHECK(rc == 0 || rc == SLUICE_ENOENT || rc == SLUICE_EINVAL || rc == SLUICE_ENOMEM);
        /* still open (a window's cancel, a probe's, a ring that could not
         * take the overdraft): closed at its own permits, which changes
         * nothing */
        if (rv.table) CHILD_CHECK(sluice_table_reservation_settle_at(&rv, rv.permits, *now) == 0);
        CHILD_CHECK(rv.table == NULL);
        break;
    }
    case 8:
    case 9: (void)sluice_table_peek_at(t, key, len, p, *now, &r, NULL); break;
    case 10: (void)sluice_table_remove(t, key, len); break;
    case 11: {
        uint64_t cursor = 0;
        int rounds = 0;
        do {
            CHILD_CHECK(sluice_table_scan(t, cursor, 256, scan_fn, NULL, &cursor) == 0);
        } while (cursor && ++rounds < 10000);
        CHILD_CHECK(cursor == 0);
        break;
    }
    case 12: {
        sluice_table_stats st;
        sluice_table_stats_get(t, &st);
        break;
    }
    case 13: {
        const void *keys[2] = {key, "b"};
        const size_t lens[2] = {len, 1};
        const uint64_t ps[2] = {p, 1};
        sluice_result rs[2];
        CHILD_CHECK(sluice_table_try_acquire_burst_at(t, 2, keys, lens, ps, *now, rs) <= 2);
        break;
    }
    case 14: {
        if (len == 2 && memcmp(key, "zz", 2) == 0) break;
        sluice_limit_ref refs[3] = {sluice_ref_key(t, key, len), sluice_ref_key(t, "zz", 2),
                                    sluice_ref_limiter(lim)};
        const bool ok = sluice_composite_try_acquire_at(refs, 3, p, *now, &r, NULL);
        CHILD_CHECK(ok == r.allowed);
        break;
    }
    case 15:
        if ((x & 0xff) == 0) (void)sluice_table_reconfigure_at(t, change, *now, NULL, 0);
        break;
    }
}

static void decider(void *reg, size_t n, const char *spec, const char *change, shared *sh,
                    int me)
{
    char err[256] = "";
    sluice_table *t = sluice_table_attach(reg, n, spec, 600, KEY_BYTES, 0, err, sizeof err);
    /* another decider that started first may have changed the spec already
     * (case 15): a handle attached later gives the current one */
    if (!t) t = sluice_table_attach(reg, n, change, 600, KEY_BYTES, 0, err, sizeof err);
    if (!t) {
        fprintf(stderr, "decider %d: attach: %s\n", me, err);
        _exit(1);
    }
    sluice_limiter *lim = sluice_limiter_new("token-bucket 1000/s", NULL, 0);
    CHILD_CHECK(lim);
    uint64_t rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(me + 1), now = SEC;
    for (int i = 0; i < 2000; i++) one_call(t, lim, change, &rng, &now);
    const size_t rss0 = tu_rss_bytes();
    /* while the co-tenant writes (bounded: it stops), then AFTER more */
    uint64_t calls = 0;
    while (!atomic_load(&sh->stop) && calls < 50000000) {
        one_call(t, lim, change, &rng, &now);
        atomic_store(&sh->calls[me], ++calls);
    }
    for (int i = 0; i < AFTER; i++) {
        one_call(t, lim, change, &rng, &now);
        atomic_store(&sh->calls[me], ++calls);
    }
    const size_t rss1 = tu_rss_bytes();
    if (rss1 > rss0 + GROWTH) {
        fprintf(stderr, "decider %d grew from %zu to %zu bytes\n", me, rss0, rss1);
        _exit(1);
    }
    sluice_limiter_free(lim);
    sluice_table_free(t);
    _exit(0);
}

/* Garbage into the region: random words anywhere, and aimed ones. */
static void cotenant(unsigned char *reg, size_t n, shared *sh)
{
    uint32_t nshards, cap, stride;
    memcpy(&nshards, reg + 64, 4);
    memcpy(&cap, reg + 68, 4);
    memcpy(&stride, reg + 76, 4);
    const size_t slots = 512 + (size_t)nshards * 128;
    uint64_t rng = 0x243f6a8885a308d3ULL ^ (uint64_t)getpid();
    const uint64_t end = mono_ns() + GARBAGE_NS;
    uint64_t w = 0;
    for (; w < GARBAGE_MAX && ((w & 1023) || mono_ns() < end); w++) {
        const uint64_t x = tu_xorshift64(&rng), y = tu_xorshift64(&rng);
        size_t at;
        uint64_t v = y;
        switch (x % 8) {
        case 0: /* a slot's header word: live, the longest length */
            at = slots + (size_t)((x >> 8) % ((uint64_t)nshards * cap)) * stride;
            v = (y & ~(uint64_t)0xffffffff) | (0x1fffffu << 3) | (y & 3);
            break;
        case 1: /* a slot's epochs */
            at = slots + (size_t)((x >> 8) % ((uint64_t)nshards * cap)) * stride + 8;
            break;
        case 2: /* a shard's lock word (a dead pid, or start time 0), sequence, count, due */
            at = 512 + (size_t)((x >> 8) % nshards) * 128 + 8 * (size_t)((x >> 40) % 4);
            if (at % 128 == 0) v = y & 1 ? 0x3ffffff0u | (y & 0x7fffffff00000000ULL)
                                         : (uint64_t)(uint32_t)getppid();
            else if ((y & 3) == 0) v = 0;
            break;
        case 3: /* the epoch, the count of keys */
            at = (x >> 8) & 1 ? 320 : 256;
            break;
        case 5: /* slots' generations: the array after the configurations
                 * (8 of 144 bytes) */
            at = slots + (size_t)nshards * cap * stride + 8 * 144 +
                 4 * (size_t)((x >> 8) % ((uint64_t)nshards * cap));
            break;
        case 4: /* within a slot, anywhere */
            at = slots + (size_t)((x >> 8) % ((uint64_t)nshards * cap)) * stride +
                 (size_t)((x >> 40) % stride);
            break;
        default: /* anywhere past the init word and the header's sizes */
            at = 128 + (size_t)((x >> 8) % (n - 128));
            break;
        }
        at &= ~(size_t)7;
        if (at + 8 > n) continue;
        memcpy(reg + at, &v, 8);
    }
    atomic_store(&sh->writes, w);
    atomic_store(&sh->stop, 1);
    _exit(0);
}

static void hostile(const char *spec, const char *change)
{
    char err[256];
    const size_t n = sluice_table_region_size(spec, 600, KEY_BYTES, err, sizeof err);
    if (!n) fail_msg("%s: %s", spec, err);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), body = (n + page - 1) / page * page;
    unsigned char *m = mmap(NULL, body + 2 * page, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(mprotect(m, page, PROT_NONE), 0);
    assert_int_equal(mprotect(m + page + body, page, PROT_NONE), 0);
    unsigned char *reg = m + page;
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    sluice_table *t = sluice_table_attach(reg, n, spec, 600, KEY_BYTES, 0, err, sizeof err);
    if (!t) fail_msg("attach %s: %s", spec, err);
    sluice_table_free(t);

    pid_t kids[DECIDERS + 1];
    for (int i = 0; i < DECIDERS; i++) {
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) decider(reg, n, spec, change, sh, i);
    }
    /* the deciders attach before the garbage starts */
    const uint64_t t0 = mono_ns();
    for (int i = 0; i < DECIDERS; i++)
        while (atomic_load(&sh->calls[i]) == 0 && mono_ns() - t0 < 60 * SEC) tu_sleep_ns(SEC / 100);
    kids[DECIDERS] = fork();
    assert_true(kids[DECIDERS] >= 0);
    if (kids[DECIDERS] == 0) cotenant(reg, n, sh);

    /* the watchdog: every child done within the bound, on a loaded machine */
    const uint64_t limit = (uint64_t)(300 * tu_env_scale(1.0)) * SEC;
    int failed = 0;
    for (int i = 0; i <= DECIDERS; i++) {
        int ws = 0;
        pid_t got;
        while ((got = waitpid(kids[i], &ws, WNOHANG)) == 0 && mono_ns() - t0 < limit)
            tu_sleep_ns(SEC / 50);
        if (got == 0) {
            print_error("%s: %s %d still running after %llu s (%llu calls)\n", spec,
                        i < DECIDERS ? "decider" : "co-tenant", i,
                        (unsigned long long)(limit / SEC),
                        (unsigned long long)(i < DECIDERS ? atomic_load(&sh->calls[i]) : 0));
            kill(kids[i], SIGKILL);
            waitpid(kids[i], &ws, 0);
            failed++;
        } else if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            print_error("%s: %s %d %s %d\n", spec, i < DECIDERS ? "decider" : "co-tenant", i,
                        WIFSIGNALED(ws) ? "died of signal" : "exited",
                        WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));
            failed++;
        }
    }
    print_message("  %s: %llu garbage writes; calls %llu %llu %llu; %.1f s\n", spec,
                  (unsigned long long)atomic_load(&sh->writes),
                  (unsigned long long)atomic_load(&sh->calls[0]),
                  (unsigned long long)atomic_load(&sh->calls[1]),
                  (unsigned long long)atomic_load(&sh->calls[2]), (double)(mono_ns() - t0) / SEC);
    munmap(sh, sizeof *sh);
    munmap(m, body + 2 * page);
    assert_int_equal(failed, 0);
}

static void test_packed(void **state)
{
    (void)state;
    hostile("token-bucket 50/s burst=20", "token-bucket 40/s burst=10");
}

static void test_window_log(void **state)
{
    (void)state;
    hostile("sliding-log 10/s", "sliding-log 8/s");
}

static void test_whole_state(void **state)
{
    (void)state;
    hostile("sliding-approx 5000000000/10s", "sliding-approx 6000000000/10s");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed),
        cmocka_unit_test(test_window_log),
        cmocka_unit_test(test_whole_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
