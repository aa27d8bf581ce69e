/* test_calendar.c -- calendar quotas: fixed-window with tz=ZONE.
 *
 *  - the spec: good calendar specs and their canonical forms; bad ones
 *    (an unknown zone, a malformed zone name, anchor=0, anchor=32, 5month,
 *    tz= on another algorithm, w/month/y without tz=, tz= with an hourly
 *    period, clock= with tz=) refused with a message naming the token;
 *  - decisions through the public API at hand-computed instants: a day in
 *    UTC, a 23-hour and a 25-hour day in Europe/Paris, a day that starts
 *    at the end of a DST gap over midnight (America/Havana), a week from Monday,
 *    a month with anchor=31 in February of a leap year; retry_after_ns is
 *    the exact time to the window's end, the count restarts at the end;
 *  - times near 2^63 and years of idleness;
 *  - RateLimit headers (sluice_http_state_get): reset is the exact time to
 *    the calendar window's end (a 25-hour day), from a spec and from a
 *    limiter;
 *  - the zone's window cache under threads: 4 threads ask for the windows
 *    of instants spread over many days of three calendars sharing a zone
 *    (so the cache's slots are taken over and over) and each answer equals
 *    the one computed before, alone (run under TSan too: label concurrency);
 *  - settling reservations on the quota's windows (an overdraft, a
 *    give-back, a settle after the window's end), limiter and table key;
 *  - tables: an in-process table, and a shared region that a forked child
 *    attaches (parsing the spec, and reading the zone, on attach): the
 *    child's admissions count in the parent's window, whose end is exact;
 *  - sluice_limiter_now_ns / sluice_table_now_ns read the epoch's clock for
 *    a calendar quota, the monotonic one otherwise (in-process and region).
 *
 * With `--windows`, this program is the tool of tests/alg/calendar_ref.py:
 * it reads lines `SPEC|T` (T in ns since the epoch) and prints, per line,
 * the window `START END` (ns) that the library computes, for the Python
 * model (zoneinfo) to check.
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sluice.h"
#include "alg/calendar.h"

#define S 1000000000ULL
#define H (3600 * S)
#define D (24 * H)

/* 2024-03-30 00:00 UTC, 2024-03-31 00:00 UTC ... (seconds, by hand:
 * 2024-01-01 is 19723 days after the epoch) */
#define DAY_OF(d) ((uint64_t)(d) * D)
#define JAN1_2024 19723ULL

static void test_specs(void **state)
{
    (void)state;
    static const char *const good[][2] = {
        {"fixed-window 1000/d tz=UTC", "fixed-window 1000/d tz=UTC"},
        {"fixed-window 5/w tz=Europe/Paris", "fixed-window 5/w tz=Europe/Paris"},
        {"fixed-window 5/month tz=America/New_York anchor=31",
         "fixed-window 5/month tz=America/New_York anchor=31"},
        {"fixed-window 5/3month tz=Asia/Tokyo", "fixed-window 5/3month tz=Asia/Tokyo"},
        {"fixed-window 5/1month tz=UTC anchor=1", "fixed-window 5/month tz=UTC"},
        {"fixed-window 7/y tz=Australia/Lord_Howe", "fixed-window 7/y tz=Australia/Lord_Howe"},
    };
    char err[256], buf[256];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        sluice_limiter *l = sluice_limiter_new(good[i][0], err, sizeof err);
        if (!l) fail_msg("%s: %s", good[i][0], err);
        assert_true(sluice_limiter_spec_format(l, buf, sizeof buf) > 0);
        assert_string_equal(buf, good[i][1]);
        sluice_limiter_free(l);
    }
    static const char *const bad[][2] = {
        {"fixed-window 10/d tz=Mars/Olympus", "Mars/Olympus"},
        {"fixed-window 10/d tz=../etc/passwd", "../etc/passwd"},
        {"fixed-window 10/d tz=", "tz="},
        {"fixed-window 10/month tz=UTC anchor=0", "anchor=0"},
        {"fixed-window 10/month tz=UTC anchor=32", "anchor=32"},
        {"fixed-window 10/month tz=UTC anchor=x", "anchor=x"},
        {"fixed-window 10/5month tz=UTC", "5month"},
        {"fixed-window 10/0month tz=UTC", "0month"},
        {"fixed-window 10/2w tz=UTC", "2w"},
        {"token-bucket 10/d tz=UTC", "fixed-window only"},
        {"sliding-log 10/d tz=UTC", "fixed-window only"},
        {"fixed-window 10/month", "need tz="},
        {"fixed-window 10/w", "need tz="},
        {"fixed-window 10/y", "need tz="},
        {"fixed-window 10/h tz=UTC", "calendar period"},
        {"fixed-window 10/2d tz=UTC", "calendar period"},
        {"fixed-window 10/d anchor=3", "anchor="},
        {"fixed-window 10/d tz=UTC anchor=3", "anchor="},
        {"fixed-window 10/d tz=UTC clock=coarse", "clock="},
        {"fixed-window 10/d tz=UTC tz=UTC", "duplicate"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        sluice_limiter *l = sluice_limiter_new(bad[i][0], err, sizeof err);
        if (l) fail_msg("accepted: %s", bad[i][0]);
        if (!strstr(err, bad[i][1])) fail_msg("%s: message \"%s\" lacks \"%s\"", bad[i][0], err, bad[i][1]);
        assert_null(strchr(err, '\n'));
    }
    /* a plain d keeps its meaning: 86400 s windows from 0 */
    sluice_spec_info info;
    assert_int_equal(sluice_spec_parse("fixed-window 1/d", &info, err, sizeof err), 0);
    assert_int_equal(info.period_ns, D);
    assert_int_equal(info.clock, SLUICE_CLOCK_MONOTONIC);
    assert_int_equal(sluice_spec_parse("fixed-window 1/d tz=UTC", &info, err, sizeof err), 0);
    assert_int_equal(info.clock, SLUICE_CLOCK_REALTIME);
}

/* Two admissions fill the window; the third is refused until exactly the
 * end; one ns before the end it is still refused. */
static void check_window(const char *spec, uint64_t t, uint64_t end)
{
    char err[256];
    sluice_limiter *l = sluice_limiter_new(spec, err, sizeof err);
    if (!l) fail_msg("%s: %s", spec, err);
    sluice_result r;
    assert_true(sluice_try_acquire_at(l, 2, t, &r));
    assert_false(sluice_try_acquire_at(l, 1, t, &r));
    if (r.retry_after_ns != (int64_t)(end - t))
        fail_msg("%s at %llu: retry %lld, expected %llu", spec, (unsigned long long)t,
                 (long long)r.retry_after_ns, (unsigned long long)(end - t));
    assert_false(sluice_try_acquire_at(l, 1, end - 1, &r));
    assert_int_equal(r.retry_after_ns, 1);
    assert_true(sluice_try_acquire_at(l, 2, end, &r));
    assert_int_equal(r.remaining, 0);
    assert_false(sluice_try_acquire_at(l, 3, end, &r));
    assert_int_equal(r.retry_after_ns, -1);
    sluice_limiter_free(l);
}

static void test_windows(void **state)
{
    (void)state;
    /* 2024-03-31 (Paris: CET -> CEST at 01:00 UTC): 23 hours, from
     * 2024-03-30 23:00 UTC to 2024-03-31 22:00 UTC; 2024-10-27: 25 hours,
     * from 10-26 22:00 UTC to 10-27 23:00 UTC. */
    const uint64_t mar31 = DAY_OF(JAN1_2024 + 31 + 29 + 30);
    check_window("fixed-window 2/d tz=Europe/Paris", mar31 + 5 * H, mar31 + 22 * H);
    assert_int_equal(mar31 + 22 * H - (mar31 - 1 * H), 23 * H);
    const uint64_t oct27 = DAY_OF(JAN1_2024 + 300); /* day 301 of a leap year */
    check_window("fixed-window 2/d tz=Europe/Paris", oct27 + 12 * H, oct27 + 23 * H);
    check_window("fixed-window 2/d tz=UTC", oct27 + 12 * H, oct27 + D);
    /* Havana, 2024-03-10: 00:00 CST never happens (clocks go to 01:00
     * CDT at 05:00 UTC), so the day starts at the end of the gap, 05:00
     * UTC, and lasts 23 hours, to 2024-03-11 04:00 UTC; the day before
     * ends there too (24 hours, from 2024-03-09 05:00 UTC) */
    const uint64_t mar10 = DAY_OF(JAN1_2024 + 31 + 29 + 9);
    check_window("fixed-window 2/d tz=America/Havana", mar10 + 5 * H, mar10 + D + 4 * H);
    check_window("fixed-window 2/d tz=America/Havana", mar10 + 5 * H - 1, mar10 + 5 * H);
    check_window("fixed-window 2/d tz=America/Havana", mar10 - D + 5 * H, mar10 + 5 * H);
    /* 2024-01-01 was a Monday: a week from it in UTC */
    check_window("fixed-window 2/w tz=UTC", DAY_OF(JAN1_2024 + 3), DAY_OF(JAN1_2024 + 7));
    /* anchor=31: 2024-01-31 .. 2024-02-29 .. 2024-03-31 */
    const uint64_t jan31 = DAY_OF(JAN1_2024 + 30), feb29 = DAY_OF(JAN1_2024 + 59);
    check_window("fixed-window 2/month tz=UTC anchor=31", jan31 + H, feb29);
    check_window("fixed-window 2/month tz=UTC anchor=31", feb29, DAY_OF(JAN1_2024 + 90));
    /* a year in Tokyo (UTC+9): from 2023-12-31 15:00 UTC */
    check_window("fixed-window 2/y tz=Asia/Tokyo", DAY_OF(JAN1_2024 + 100),
                 DAY_OF(JAN1_2024 + 366) - 9 * H);
}

/* Times near 2^63 and idle gaps of years: no overflow, exact ends. */
static void test_extremes(void **state)
{
    (void)state;
    char err[256];
    sluice_limiter *l = sluice_limiter_new("fixed-window 1/y tz=America/New_York", err, sizeof err);
    assert_non_null(l);
    sluice_result r;
    assert_true(sluice_try_acquire_at(l, 1, 0, &r));
    assert_false(sluice_try_acquire_at(l, 1, 1, &r));
    assert_true(r.retry_after_ns > 0);
    const uint64_t far = (1ULL << 63) - 1;
    assert_true(sluice_try_acquire_at(l, 1, far, &r)); /* 292 years idle */
    assert_false(sluice_try_acquire_at(l, 1, far, &r));
    assert_true(r.retry_after_ns >= 1);
    sluice_limiter_free(l);
    uint64_t s, e;
    sluice__profile pf;
    assert_int_equal(sluice__spec_parse("fixed-window 1/d tz=Pacific/Kiritimati", &pf, err, sizeof err), 0);
    sluice__cal_window(&pf, far, &s, &e);
    assert_true(s <= far && far < e && e <= 1ULL << 63);
    sluice__cal_window(&pf, 0, &s, &e);
    assert_true(s == 0 && e > 0 && e <= D);
}

static void test_http(void **state)
{
    (void)state;
    const char *spec = "fixed-window 2/d tz=Europe/Paris";
    const uint64_t oct27 = DAY_OF(JAN1_2024 + 300), t = oct27 + 12 * H + 1, end = oct27 + 23 * H;
    char err[256];
    sluice_http_policy p, q;
    assert_int_equal(sluice_http_policy_init(&p, "daily", spec, err, sizeof err), 0);
    sluice_limiter *l = sluice_limiter_new(spec, err, sizeof err);
    assert_int_equal(sluice_http_policy_from_limiter(&q, "daily", l), 0);
    sluice_result r;
    sluice_http_state hs;
    assert_true(sluice_try_acquire_at(l, 1, t, &r));
    assert_int_equal(sluice_http_state_get(&p, &r, t, &hs), 0);
    assert_int_equal(hs.reset_s, (end - t + S - 1) / S); /* 11 h, rounded up: 39600 */
    assert_int_equal(hs.reset_s, 39600);
    assert_int_equal(sluice_http_state_get(&q, &r, t, &hs), 0);
    assert_int_equal(hs.reset_s, 39600);
    assert_true(sluice_try_acquire_at(l, 1, t, &r));
    assert_false(sluice_try_acquire_at(l, 1, t, &r));
    assert_int_equal(sluice_http_state_get(&p, &r, t, &hs), 0);
    assert_int_equal(hs.retry_after_s, 39600);
    sluice_limiter_free(l);
}

#define NPTS 400
static sluice__profile g_pf[3];
static uint64_t g_t[NPTS], g_s[3][NPTS], g_e[3][NPTS];

static void *cache_worker(void *arg)
{
    uint64_t x = (uint64_t)(uintptr_t)arg * 7919 + 1;
    for (int i = 0; i < 20000; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        const unsigned k = (unsigned)(x >> 60) % 3, j = (unsigned)(x >> 20) % NPTS;
        uint64_t s, e;
        sluice__cal_window(&g_pf[k], g_t[j], &s, &e);
        if (s != g_s[k][j] || e != g_e[k][j]) return (void *)1;
    }
    return NULL;
}

static void test_cache_threads(void **state)
{
    (void)state;
    static const char *const specs[3] = {"fixed-window 1/d tz=America/Havana",
                                         "fixed-window 1/w tz=America/Havana",
                                         "fixed-window 1/2month tz=America/Havana anchor=30"};
    char err[256];
    for (int k = 0; k < 3; k++) assert_int_equal(sluice__spec_parse(specs[k], &g_pf[k], err, sizeof err), 0);
    for (int j = 0; j < NPTS; j++) g_t[j] = DAY_OF(JAN1_2024) + (uint64_t)j * 7 * H + (uint64_t)j;
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < NPTS; j++) {
            sluice__cal_window(&g_pf[k], g_t[j], &g_s[k][j], &g_e[k][j]);
            assert_true(g_s[k][j] <= g_t[j] && g_t[j] < g_e[k][j]);
        }
    pthread_t th[4];
    for (uintptr_t i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, cache_worker, (void *)i), 0);
    for (int i = 0; i < 4; i++) {
        void *rv;
        pthread_join(th[i], &rv);
        assert_null(rv);
    }
}

/* A change of spec keeps the window's count (3.8) between calendar
 * quotas, and is refused between time axes. */
static void test_reconfigure(void **state)
{
    (void)state;
    char err[256];
    sluice_result r;
    const uint64_t t = DAY_OF(JAN1_2024 + 10) + H, end = DAY_OF(JAN1_2024 + 11);
    sluice_limiter *l = sluice_limiter_new("fixed-window 3/d tz=UTC", err, sizeof err);
    assert_non_null(l);
    assert_true(sluice_try_acquire_at(l, 2, t, &r));
    assert_int_equal(sluice_limiter_reconfigure_at(l, "fixed-window 4/d tz=UTC", t, err, sizeof err), 0);
    assert_true(sluice_try_acquire_at(l, 2, t, &r));
    assert_false(sluice_try_acquire_at(l, 1, t, &r));
    assert_int_equal(r.retry_after_ns, end - t);
    assert_true(sluice_limiter_reconfigure_at(l, "fixed-window 4/d", t, err, sizeof err) < 0);
    assert_non_null(strstr(err, "time axes"));
    assert_true(sluice_limiter_set_limit_at(l, 5, H, t, err, sizeof err) < 0);
    assert_non_null(strstr(err, "calendar quota"));
    assert_int_equal(sluice_limiter_set_limit_at(l, 5, D, t, err, sizeof err), 0);
    assert_true(sluice_try_acquire_at(l, 1, t, &r));
    sluice_limiter_free(l);
    l = sluice_limiter_new("fixed-window 3/d", err, sizeof err);
    assert_true(sluice_limiter_reconfigure_at(l, "fixed-window 3/d tz=UTC", 0, err, sizeof err) < 0);
    sluice_limiter_free(l);
}

/* Settling a reservation on a calendar quota (docs/decisions.md 3.10), on
 * the quota's own windows: an overdraft counts in the day of the settle,
 * so nothing more passes in it; a give-back in the same day frees exactly
 * that many permits; a settle in the next day gives nothing back (the
 * permits were used in a day that has ended) and an excess then counts in
 * the new day.  Counted by hand against the day's limit: before the fix,
 * settle numbered windows by t / W while the calendar rows number them by
 * their start, so a settle dropped the day's count and a 3/d quota
 * admitted 5 in a day.  For a limiter and for a table key; a 1-month
 * quota too (its window is no multiple of a fixed period). */
static void test_settle(void **state)
{
    (void)state;
    char err[256];
    const uint64_t day = DAY_OF(JAN1_2024 + 10), t = day + H, next = day + D;
    const char *specs[] = {"fixed-window 3/d tz=UTC", "fixed-window 3/1month tz=UTC"};
    for (size_t si = 0; si < 2; si++) {
        /* the ends of t's window and of the three after it: UTC midnights,
         * or the firsts of February, March, April and May 2024 */
        const uint64_t w[4] = {
            si == 0 ? next : DAY_OF(JAN1_2024 + 31), si == 0 ? next + D : DAY_OF(JAN1_2024 + 60),
            si == 0 ? next + 2 * D : DAY_OF(JAN1_2024 + 91), si == 0 ? next + 3 * D : DAY_OF(JAN1_2024 + 121)};
        sluice_limiter *l = sluice_limiter_new(specs[si], err, sizeof err);
        sluice_table *tb = sluice_table_new(specs[si], 16, err, sizeof err);
        assert_non_null(l);
        assert_non_null(tb);
        for (int use_table = 0; use_table < 2; use_table++) {
            sluice_reservation rv;
            sluice_table_reservation tv;
            sluice_result r;
#define RESERVE(p, at) (use_table ? sluice_table_reserve_at(tb, "k", 1, (p), (at), 0, &tv, &r) \
                                  : sluice_reserve_at(l, (p), (at), 0, &rv, &r))
#define SETTLE(a, at) (use_table ? sluice_table_reservation_settle_at(&tv, (a), (at)) \
                                 : sluice_reservation_settle_at(&rv, (a), (at)))
#define TRY(p, at) (use_table ? sluice_table_try_acquire_at(tb, "k", 1, (p), (at), &r) \
                              : sluice_try_acquire_at(l, (p), (at), &r))
            /* overdraft: 2 reserved, 3 used: the window is full */
            assert_true(RESERVE(2, t));
            assert_int_equal(SETTLE(3, t + 1), 0);
            assert_false(TRY(1, t + 2));
            assert_int_equal(r.retry_after_ns, (int64_t)(w[0] - t - 2));
            /* the next window: the whole limit again */
            assert_true(TRY(3, w[0]));
            assert_false(TRY(1, w[0] + 1));
            /* give-back in the same window: 3 reserved, 1 used: 2 pass */
            const uint64_t t2 = w[1] + H;
            assert_true(RESERVE(3, t2));
            assert_false(TRY(1, t2 + 1));
            assert_int_equal(SETTLE(1, t2 + 2), 0);
            assert_true(TRY(2, t2 + 3));
            assert_false(TRY(1, t2 + 4));
            assert_int_equal(r.retry_after_ns, (int64_t)(w[2] - t2 - 4));
            /* a settle after the window's end gives nothing back; its
             * excess counts in the new window */
            assert_true(RESERVE(1, w[2] + H));
            assert_int_equal(SETTLE(3, w[3] + H), 0);
            assert_true(TRY(1, w[3] + H + 1));
            assert_false(TRY(1, w[3] + H + 2));
#undef RESERVE
#undef TRY
#undef SETTLE
        }
        sluice_table_free(tb);
        sluice_limiter_free(l);
    }
}

/* Europe/Paris, 2024-10-27 (25 hours: 10-26 22:00 UTC to 10-27 23:00 UTC). */
static void test_tables(void **state)
{
    (void)state;
    const char *spec = "fixed-window 2/d tz=Europe/Paris";
    const uint64_t oct27 = DAY_OF(JAN1_2024 + 300), t = oct27 + 12 * H, end = oct27 + 23 * H;
    char err[256];
    sluice_result r;
    sluice_table *tb = sluice_table_new(spec, 16, err, sizeof err);
    assert_non_null(tb);
    assert_true(sluice_table_try_acquire_at(tb, "a", 1, 2, t, &r));
    assert_false(sluice_table_try_acquire_at(tb, "a", 1, 1, t, &r));
    assert_int_equal(r.retry_after_ns, end - t);
    assert_true(sluice_table_try_acquire_at(tb, "b", 1, 2, t, &r));
    assert_true(sluice_table_try_acquire_at(tb, "a", 1, 2, end, &r));
    sluice_table_free(tb);

    const size_t size = sluice_table_region_size(spec, 16, 32, err, sizeof err);
    assert_true(size > 0);
    void *region = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(region != MAP_FAILED);
    tb = sluice_table_attach(region, size, spec, 16, 32, 0, err, sizeof err);
    if (!tb) fail_msg("%s", err);
    assert_true(sluice_table_try_acquire_at(tb, "k", 1, 1, t, &r));
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sluice_table *c = sluice_table_attach(region, size, spec, 16, 32, 0, NULL, 0);
        int bad = !c || !sluice_table_try_acquire_at(c, "k", 1, 1, t + 1, &r) ||
                  sluice_table_try_acquire_at(c, "k", 1, 1, t + 2, &r) ||
                  r.retry_after_ns != (int64_t)(end - t - 2);
        sluice_table_free(c);
        _exit(bad);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_false(sluice_table_try_acquire_at(tb, "k", 1, 1, t + 3, &r));
    assert_int_equal(r.retry_after_ns, end - t - 3);
    assert_true(sluice_table_try_acquire_at(tb, "k", 1, 2, end, &r));
    sluice_table_free(tb);
    munmap(region, size);
}

/* clock_gettime(id) in ns, independent of the library's reader */
static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * S + (uint64_t)ts.tv_nsec;
}

/* sluice_limiter_now_ns / sluice_table_now_ns: a calendar quota's "now" is
 * CLOCK_REALTIME's, a monotonic spec's CLOCK_MONOTONIC's (bracketed by
 * reads of the clock before and after); for an in-process table and a
 * shared region; NULL gives 0.  Then the point of it: a day quota decided
 * at the table's now refuses the 3rd of 2, and its retry is the time to
 * the next UTC midnight computed here from the wall clock, where the
 * monotonic clock (the wrong axis: seconds since boot) would put the
 * window's end in 1970. */
static void test_now_ns(void **state)
{
    (void)state;
    char err[256];
    sluice_limiter *cal = sluice_limiter_new("fixed-window 2/d tz=UTC", err, sizeof err);
    sluice_limiter *mono = sluice_limiter_new("fixed-window 2/s", err, sizeof err);
    sluice_table *tc = sluice_table_new("fixed-window 2/d tz=UTC", 4, err, sizeof err);
    sluice_table *tm = sluice_table_new("token-bucket 2/s clock=coarse", 4, err, sizeof err);
    assert_true(cal && mono && tc && tm);
    uint64_t a = clock_ns(CLOCK_REALTIME), n1 = sluice_limiter_now_ns(cal),
             n2 = sluice_table_now_ns(tc), b = clock_ns(CLOCK_REALTIME);
    assert_true(a <= n1 && n1 <= n2 && n2 <= b);
    a = clock_ns(CLOCK_MONOTONIC);
    n1 = sluice_limiter_now_ns(mono);
    b = clock_ns(CLOCK_MONOTONIC);
    assert_true(a <= n1 && n1 <= b);
    /* coarse: the same axis, up to a tick (allow 1 s) behind */
    a = clock_ns(CLOCK_MONOTONIC);
    n2 = sluice_table_now_ns(tm);
    b = clock_ns(CLOCK_MONOTONIC);
    assert_true(n2 <= b && n2 + S >= a);
    assert_int_equal(sluice_limiter_now_ns(NULL), 0);
    assert_int_equal(sluice_table_now_ns(NULL), 0);

    sluice_result r;
    uint64_t now = sluice_table_now_ns(tc);
    if (now % D > D - 10 * S) now += 10 * S; /* not across midnight below */
    assert_true(sluice_table_try_acquire_at(tc, "k", 1, 2, now, &r));
    assert_false(sluice_table_try_acquire_at(tc, "k", 1, 1, now, &r));
    assert_int_equal(r.retry_after_ns, D - now % D);

    const char *spec = "fixed-window 1/d tz=Pacific/Kiritimati";
    const size_t size = sluice_table_region_size(spec, 4, 8, err, sizeof err);
    assert_true(size > 0);
    void *region = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(region != MAP_FAILED);
    sluice_table *tr = sluice_table_attach(region, size, spec, 4, 8, 0, err, sizeof err);
    if (!tr) fail_msg("%s", err);
    a = clock_ns(CLOCK_REALTIME);
    now = sluice_table_now_ns(tr);
    b = clock_ns(CLOCK_REALTIME);
    assert_true(a <= now && now <= b);
    if ((now + 14 * H) % D > D - 10 * S) now += 10 * S;
    assert_true(sluice_table_try_acquire_at(tr, "k", 1, 1, now, &r));
    assert_false(sluice_table_try_acquire_at(tr, "k", 1, 1, now, &r));
    assert_int_equal(r.retry_after_ns, D - (now + 14 * H) % D); /* UTC+14, no DST */
    sluice_table_free(tr);
    munmap(region, size);
    sluice_table_free(tc);
    sluice_table_free(tm);
    sluice_limiter_free(cal);
    sluice_limiter_free(mono);
}

static int windows_tool(void)
{
    char line[512], err[256];
    sluice__profile pf;
    char last[512] = "";
    for (long n = 1; fgets(line, sizeof line, stdin); n++) {
        char *bar = strchr(line, '|');
        if (!bar) {
            fprintf(stderr, "line %ld: expected SPEC|T\n", n);
            return 2;
        }
        *bar = '\0';
        if (strcmp(line, last) != 0) {
            if (sluice__spec_parse(line, &pf, err, sizeof err) != 0) {
                printf("error %s\n", err);
                last[0] = '\0';
                continue;
            }
            snprintf(last, sizeof last, "%s", line);
        }
        uint64_t s, e;
        sluice__cal_window(&pf, strtoull(bar + 1, NULL, 10), &s, &e);
        printf("%llu %llu\n", (unsigned long long)s, (unsigned long long)e);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--windows") == 0) return windows_tool();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_specs),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_extremes),
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_cache_threads),
        cmocka_unit_test(test_http),
        cmocka_unit_test(test_reconfigure),
        cmocka_unit_test(test_settle),
        cmocka_unit_test(test_now_ns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
