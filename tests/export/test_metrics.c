/* test_metrics.c -- sluice_metrics: the Prometheus text exposition.
 *
 *  - the exact text of a small registry (a limiter, a table, a wheel),
 *    whose decisions the test states first from the contract (so the
 *    expected numbers come from the rules, not from the counters); the
 *    gauges of asynchronous acquires queued and timers pending, rising and
 *    falling;
 *  - counter values equal to the decisions the test made: random traffic
 *    on limiters and tables, tallied by the test from each call's answer,
 *    read back from the exposition by a small parser written here;
 *  - a short buffer, at every length from 0 to the whole plus one: the
 *    length needed is reported, the buffer holds the longest prefix of
 *    whole lines that fits, NUL-terminated, and nothing is written past it;
 *  - names: escaping of backslash, double quote and newline; UTF-8 kept as
 *    is; every refused name (empty, too long, invalid UTF-8, control
 *    characters), duplicate names and objects, NULL arguments;
 *  - remove: the object leaves every family, its place is reused, an
 *    unknown object is SLUICE_ENOENT;
 *  - every allocation failure of _new and _add (nothing added, nothing
 *    leaked);
 *  - threads deciding, writing and adding/removing at once: every
 *    exposition parses, counters never go down, and the last one is exact;
 *  - which limit of a composite refused (denied / denied_elsewhere), for
 *    limiters, in-process table keys and keys of shared regions.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sluice.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define SEC 1000000000ULL

/* The whole exposition, in a buffer of the test's (freed by the caller). */
static char *render(const sluice_metrics *m)
{
    size_t need = 0;
    assert_int_equal(sluice_metrics_write(m, NULL, 0, &need), SLUICE_ENOSPC);
    char *buf = malloc(need + 1);
    assert_non_null(buf);
    size_t again = 0;
    assert_int_equal(sluice_metrics_write(m, buf, need + 1, &again), 0);
    assert_int_equal(again, need);
    assert_int_equal(strlen(buf), need);
    return buf;
}

/* ---- a reader for the exposition, independent of metrics.c ------------- */

/* The value of the sample line that starts with `prefix` followed by a
 * space (e.g. `sluice_probes_total{limit="a"}`); fails the test if there
 * is not exactly one such line or it is not a decimal integer. */
static uint64_t sample(const char *text, const char *prefix)
{
    size_t pl = strlen(prefix);
    const char *found = NULL;
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        assert_non_null(nl); /* every line ends in LF */
        if ((size_t)(nl - line) > pl && memcmp(line, prefix, pl) == 0 && line[pl] == ' ') {
            if (found) fail_msg("two lines for %s", prefix);
            found = line + pl + 1;
        }
        line = nl + 1;
    }
    if (!found) fail_msg("no line for %s in:\n%s", prefix, text);
    uint64_t v = 0;
    const char *p = found;
    do {
        if (*p < '0' || *p > '9') fail_msg("bad value for %s", prefix);
        v = v * 10 + (uint64_t)(*p - '0');
        p++;
    } while (*p != '\n');
    return v;
}

static uint64_t sample_l(const char *text, const char *metric, const char *limit,
                         const char *decision)
{
    char prefix[512];
    if (decision)
        snprintf(prefix, sizeof prefix, "%s{limit=\"%s\",decision=\"%s\"}", metric, limit, decision);
    else
        snprintf(prefix, sizeof prefix, "%s{limit=\"%s\"}", metric, limit);
    return sample(text, prefix);
}

static bool has_line_with(const char *text, const char *needle)
{
    return strstr(text, needle) != NULL;
}

/* The exposition's grammar, as the 0.0.4 format states it, for what we
 * write: comment lines `# HELP name text` / `# TYPE name
 * counter|gauge|histogram`, once per family and before its samples; sample
 * lines `name{label="value"[,label="value"]} integer`, with a family's
 * samples together, its name the family's (no samples of an undeclared
 * family); a histogram's samples are name_bucket (with an `le` label),
 * name_sum (a decimal number) and name_count. */
static void check_grammar(const char *text)
{
    char family[128] = "";
    char seen[64][128];
    size_t nseen = 0;
    bool typed = false, hist = false;
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        assert_non_null(nl);
        size_t n = (size_t)(nl - line);
        char l[1024];
        assert_true(n < sizeof l);
        memcpy(l, line, n);
        l[n] = '\0';
        if (strncmp(l, "# HELP ", 7) == 0) {
            const char *name = l + 7;
            const char *sp = strchr(name, ' ');
            assert_non_null(sp);
            assert_true(sp[1] != '\0');
            size_t nl2 = (size_t)(sp - name);
            for (size_t i = 0; i < nseen; i++)
                if (strlen(seen[i]) == nl2 && memcmp(seen[i], name, nl2) == 0)
                    fail_msg("family %.*s twice", (int)nl2, name);
            memcpy(family, name, nl2);
            family[nl2] = '\0';
            assert_true(nseen < 64);
            strcpy(seen[nseen++], family);
            typed = false;
        } else if (strncmp(l, "# TYPE ", 7) == 0) {
            char want_c[200], want_g[200], want_h[200];
            snprintf(want_c, sizeof want_c, "# TYPE %s counter", family);
            snprintf(want_g, sizeof want_g, "# TYPE %s gauge", family);
            snprintf(want_h, sizeof want_h, "# TYPE %s histogram", family);
            hist = strcmp(l, want_h) == 0;
            assert_true(strcmp(l, want_c) == 0 || strcmp(l, want_g) == 0 || hist);
            /* counters end in _total, gauges and histograms do not; the
             * histograms are in seconds */
            size_t fl = strlen(family);
            bool total = fl > 6 && strcmp(family + fl - 6, "_total") == 0;
            assert_int_equal(total, strcmp(l, want_c) == 0);
            if (hist) assert_string_equal(family + fl - 8, "_seconds");
            typed = true;
        } else {
            assert_true(typed);
            size_t fl = strlen(family);
            assert_memory_equal(l, family, fl);
            bool bucket = false, sum = false;
            if (hist) {
                bucket = strncmp(l + fl, "_bucket{", 8) == 0;
                sum = strncmp(l + fl, "_sum{", 5) == 0;
                if (bucket) fl += 7;
                else if (sum) fl += 4;
                else if (strncmp(l + fl, "_count{", 7) == 0) fl += 6;
                else fail_msg("a histogram's sample without a suffix: %s", l);
            }
            assert_int_equal(l[fl], '{');
            const char *p = l + fl + 1;
            bool le = false;
            for (;;) { /* label="value" */
                if (strncmp(p, "le=", 3) == 0) le = true;
                while ((*p >= 'a' && *p <= 'z') || *p == '_') p++;
                assert_int_equal(*p++, '=');
                assert_int_equal(*p++, '"');
                while (*p != '"') {
                    assert_true(*p != '\0');
                    if (*p == '\\') {
                        p++;
                        assert_true(*p == '\\' || *p == '"' || *p == 'n');
                    }
                    p++;
                }
                p++;
                if (*p == ',') {
                    p++;
                    continue;
                }
                assert_int_equal(*p++, '}');
                break;
            }
            assert_int_equal(le, bucket);
            assert_int_equal(*p++, ' ');
            assert_true(*p >= '0' && *p <= '9');
            while (*p >= '0' && *p <= '9') p++;
            if (sum && *p == '.') { /* seconds: digits after the point, no trailing 0 */
                p++;
                assert_true(*p >= '0' && *p <= '9');
                while (*p >= '0' && *p <= '9') p++;
                assert_true(p[-1] != '0');
            }
            assert_int_equal(*p, '\0');
        }
        line = nl + 1;
    }
}

/* ---- wait histograms, as docs/metrics.md states them ---------------------- */

/* The bucket bounds in seconds, as written in `le`, and in ns. */
static const char *const LE[17] = {"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005",
                                   "0.01",   "0.025",   "0.05",   "0.1",   "0.25",   "0.5",
                                   "1",      "2.5",     "5",      "10",    "+Inf"};

/* Append to `out` the lines of histogram `family` for object `name`
 * (label `label`) with `per[i]` waits in bucket i (not cumulative) and the
 * sum `sum` as written (decimal seconds); then its failure counter
 * `family`'s _failed_total with three reasons and values. */
static void want_hist(char *out, size_t cap, const char *family, const char *label,
                      const char *name, const uint64_t per[17], const char *sum)
{
    size_t n = strlen(out);
    uint64_t cum = 0;
    for (int i = 0; i < 17; i++) {
        cum += per ? per[i] : 0;
        n += (size_t)snprintf(out + n, cap - n, "%s_bucket{%s=\"%s\",le=\"%s\"} %" PRIu64 "\n",
                              family, label, name, LE[i], cum);
    }
    n += (size_t)snprintf(out + n, cap - n, "%s_sum{%s=\"%s\"} %s\n", family, label, name, sum);
    n += (size_t)snprintf(out + n, cap - n, "%s_count{%s=\"%s\"} %" PRIu64 "\n", family, label,
                          name, cum);
    assert_true(n < cap);
}

static void want_reasons(char *out, size_t cap, const char *family, const char *label,
                         const char *name, const char *const reasons[3], const uint64_t v[3])
{
    size_t n = strlen(out);
    for (int i = 0; i < 3; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s{%s=\"%s\",reason=\"%s\"} %" PRIu64 "\n",
                              family, label, name, reasons[i], v ? v[i] : 0);
    assert_true(n < cap);
}

static const char *const BLOCKING_REASONS[3] = {"timeout", "cancelled", "error"};
static const char *const ASYNC_REASONS[3] = {"cancelled", "refused", "dropped"};

#define HIST_HEAD_BLOCKING                                                                         \
    "# HELP sluice_acquire_wait_seconds Waits of the blocking acquires granted, from the call to " \
    "the grant.\n"                                                                                 \
    "# TYPE sluice_acquire_wait_seconds histogram\n"
#define FAILED_HEAD_BLOCKING                                                                       \
    "# HELP sluice_acquire_failed_total Blocking acquires that returned without their permits, "   \
    "by reason.\n"                                                                                 \
    "# TYPE sluice_acquire_failed_total counter\n"
#define HIST_HEAD_ASYNC                                                                            \
    "# HELP sluice_async_wait_seconds Waits of the asynchronous acquires called back, from the "   \
    "request to the callback.\n"                                                                   \
    "# TYPE sluice_async_wait_seconds histogram\n"
#define FAILED_HEAD_ASYNC                                                                          \
    "# HELP sluice_async_failed_total Asynchronous acquires that ended without their permits, by " \
    "reason.\n"                                                                                    \
    "# TYPE sluice_async_failed_total counter\n"

/* ---- exact text ---------------------------------------------------------- */

static void timer_cb(void *arg, sluice_timer_id id, uint64_t now_ns)
{
    (void)arg, (void)id, (void)now_ns;
}

static void test_exact_text(void **state)
{
    (void)state;
    char err[128];
    /* fixed-window 3/s: three single permits in [0, 1 s) pass, the fourth
     * and a request for 2 do not; a probe passes and counts apart */
    sluice_limiter *lim = sluice_limiter_new("fixed-window 3/s", err, sizeof err);
    assert_non_null(lim);
    assert_true(sluice_try_acquire_at(lim, 1, 0, NULL));
    assert_true(sluice_try_acquire_at(lim, 1, 1, NULL));
    assert_true(sluice_try_acquire_at(lim, 1, 2, NULL));
    assert_false(sluice_try_acquire_at(lim, 1, 3, NULL));
    assert_false(sluice_try_acquire_at(lim, 2, 4, NULL));
    assert_true(sluice_try_acquire_at(lim, 0, 5, NULL));
    /* token-bucket 1/s per key: "a" passes then is refused, "b" passes
     * with 1 permit; "c" asks 3 > burst 1: refused */
    sluice_table *t = sluice_table_new("token-bucket 1/s", 100, err, sizeof err);
    assert_non_null(t);
    assert_true(sluice_table_try_acquire_at(t, "a", 1, 1, 0, NULL));
    assert_false(sluice_table_try_acquire_at(t, "a", 1, 1, 1, NULL));
    assert_true(sluice_table_try_acquire_at(t, "b", 1, 1, 2, NULL));
    assert_false(sluice_table_try_acquire_at(t, "c", 1, 3, 3, NULL));
    /* a wheel with two timers pending */
    sluice_wheel *w = sluice_wheel_new(0, 16, 0, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(sluice_wheel_schedule(w, SEC, timer_cb, NULL, NULL), 0);
    assert_int_equal(sluice_wheel_schedule(w, 2 * SEC, timer_cb, NULL, NULL), 0);
    /* an empty queue of asynchronous acquires on the limiter */
    sluice_queue *q = sluice_queue_new(lim, w, 0, err, sizeof err);
    assert_non_null(q);

    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_limiter(m, "api", lim), 0);
    assert_int_equal(sluice_metrics_add_table(m, "per-ip", t), 0);
    assert_int_equal(sluice_metrics_add_wheel(m, "timers", w), 0);
    assert_int_equal(sluice_metrics_add_queue(m, "api", q), 0); /* a name space of its own */
    assert_int_equal(sluice_metrics_count(m), 4);

    static char want[16384];
    strcpy(want,
        "# HELP sluice_requests_total Requests decided, by limit and decision (probes count as allowed).\n"
        "# TYPE sluice_requests_total counter\n"
        "sluice_requests_total{limit=\"api\",decision=\"allowed\"} 4\n"
        "sluice_requests_total{limit=\"api\",decision=\"denied\"} 2\n"
        "sluice_requests_total{limit=\"api\",decision=\"denied_elsewhere\"} 0\n"
        "sluice_requests_total{limit=\"per-ip\",decision=\"allowed\"} 2\n"
        "sluice_requests_total{limit=\"per-ip\",decision=\"denied\"} 2\n"
        "sluice_requests_total{limit=\"per-ip\",decision=\"denied_elsewhere\"} 0\n"
        "# HELP sluice_permits_total Permits asked for by the requests decided, by limit and decision.\n"
        "# TYPE sluice_permits_total counter\n"
        "sluice_permits_total{limit=\"api\",decision=\"allowed\"} 3\n"
        "sluice_permits_total{limit=\"api\",decision=\"denied\"} 3\n"
        "sluice_permits_total{limit=\"api\",decision=\"denied_elsewhere\"} 0\n"
        "sluice_permits_total{limit=\"per-ip\",decision=\"allowed\"} 2\n"
        "sluice_permits_total{limit=\"per-ip\",decision=\"denied\"} 4\n"
        "sluice_permits_total{limit=\"per-ip\",decision=\"denied_elsewhere\"} 0\n"
        "# HELP sluice_probes_total Probes (requests for 0 permits, always allowed, changing nothing) among the requests.\n"
        "# TYPE sluice_probes_total counter\n"
        "sluice_probes_total{limit=\"api\"} 1\n"
        "sluice_probes_total{limit=\"per-ip\"} 0\n"
        HIST_HEAD_BLOCKING);
    want_hist(want, sizeof want, "sluice_acquire_wait_seconds", "limit", "api", NULL, "0");
    strcat(want, FAILED_HEAD_BLOCKING);
    want_reasons(want, sizeof want, "sluice_acquire_failed_total", "limit", "api", BLOCKING_REASONS, NULL);
    strcat(want,
        "# HELP sluice_async_queued Asynchronous acquires waiting in the queue for their permits.\n"
        "# TYPE sluice_async_queued gauge\n"
        "sluice_async_queued{queue=\"api\"} 0\n"
        HIST_HEAD_ASYNC);
    want_hist(want, sizeof want, "sluice_async_wait_seconds", "queue", "api", NULL, "0");
    strcat(want, FAILED_HEAD_ASYNC);
    want_reasons(want, sizeof want, "sluice_async_failed_total", "queue", "api", ASYNC_REASONS, NULL);
    strcat(want,
        "# HELP sluice_table_keys Keys the table holds now.\n"
        "# TYPE sluice_table_keys gauge\n"
        "sluice_table_keys{limit=\"per-ip\"} 2\n"
        "# HELP sluice_table_keys_reclaimed_total Keys dropped because their limiter was back at rest (no decision changes).\n"
        "# TYPE sluice_table_keys_reclaimed_total counter\n"
        "sluice_table_keys_reclaimed_total{limit=\"per-ip\"} 0\n"
        "# HELP sluice_table_keys_evicted_total Keys dropped while in use to make room (evict-lru tables only).\n"
        "# TYPE sluice_table_keys_evicted_total counter\n"
        "sluice_table_keys_evicted_total{limit=\"per-ip\"} 0\n"
        "# HELP sluice_table_keys_refused_total Requests for a new key refused because the table was full of keys in use (also counted as denied requests).\n"
        "# TYPE sluice_table_keys_refused_total counter\n"
        "sluice_table_keys_refused_total{limit=\"per-ip\"} 0\n"
        "# HELP sluice_wheel_timers_pending Timers scheduled and not yet fired or cancelled.\n"
        "# TYPE sluice_wheel_timers_pending gauge\n"
        "sluice_wheel_timers_pending{wheel=\"timers\"} 2\n");
    char *got = render(m);
    assert_string_equal(got, want);
    check_grammar(got);
    free(got);

    /* the wheel fires one timer: the gauge follows */
    assert_int_equal(sluice_wheel_advance(w, SEC), 1);
    got = render(m);
    assert_true(has_line_with(got, "sluice_wheel_timers_pending{wheel=\"timers\"} 1\n"));
    free(got);

    sluice_metrics_free(m);
    sluice_queue_free(q);
    sluice_wheel_free(w);
    sluice_table_free(t);
    sluice_limiter_free(lim);
}

/* Asynchronous acquires waiting on an exhausted window show in the queue
 * gauge, their timer in the wheel's; when the window turns they are granted
 * one a second and the gauges fall. */
static void grant_cb(void *arg, uint64_t id, uint64_t now_ns)
{
    (void)id, (void)now_ns;
    ++*(int *)arg;
}

static void test_async_gauges(void **state)
{
    (void)state;
    char err[128];
    sluice_limiter *lim = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
    sluice_wheel *w = sluice_wheel_new(0, 64, 0, err, sizeof err);
    assert_non_null(lim);
    assert_non_null(w);
    sluice_queue *q = sluice_queue_new(lim, w, 0, err, sizeof err);
    assert_non_null(q);
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_limiter(m, "one", lim), 0);
    assert_int_equal(sluice_metrics_add_wheel(m, "w", w), 0);
    assert_int_equal(sluice_metrics_add_queue(m, "one", q), 0);
    assert_true(sluice_try_acquire_at(lim, 1, 0, NULL));
    int granted = 0;
    for (int i = 0; i < 3; i++)
        assert_int_equal(sluice_queue_acquire_at(q, 1, 1, grant_cb, &granted, NULL), 0);
    char *text = render(m);
    assert_int_equal(sample(text, "sluice_async_queued{queue=\"one\"}"), 3);
    assert_true(sample(text, "sluice_wheel_timers_pending{wheel=\"w\"}") >= 1);
    free(text);
    for (uint64_t t = SEC; t <= 3 * SEC; t += SEC) sluice_wheel_advance(w, t);
    assert_int_equal(granted, 3);
    text = render(m);
    assert_int_equal(sample(text, "sluice_async_queued{queue=\"one\"}"), 0);
    assert_int_equal(sample(text, "sluice_wheel_timers_pending{wheel=\"w\"}"), 0);
    free(text);
    sluice_metrics_free(m);
    sluice_queue_free(q);
    sluice_wheel_free(w);
    sluice_limiter_free(lim);
}

/* An empty registry renders as the empty string; a wheel alone as its
 * family only; a limiter alone as no table family. */
static void test_empty_and_partial(void **state)
{
    (void)state;
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    size_t need = 99;
    assert_int_equal(sluice_metrics_write(m, NULL, 0, &need), SLUICE_ENOSPC);
    assert_int_equal(need, 0);
    char one[1] = {'x'};
    assert_int_equal(sluice_metrics_write(m, one, 1, &need), 0);
    assert_int_equal(one[0], '\0');
    assert_int_equal(sluice_metrics_write(m, one, 1, NULL), 0);

    char err[128];
    sluice_limiter *lim = sluice_limiter_new("token-bucket 5/s", err, sizeof err);
    assert_non_null(lim);
    assert_int_equal(sluice_metrics_add_limiter(m, "x", lim), 0);
    char *got = render(m);
    assert_null(strstr(got, "sluice_table"));
    assert_null(strstr(got, "sluice_wheel"));
    assert_int_equal(sample_l(got, "sluice_requests_total", "x", "allowed"), 0);
    check_grammar(got);
    free(got);
    sluice_metrics_free(m);
    sluice_limiter_free(lim);
}

/* ---- counters equal to the decisions ------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void) { return tu_xorshift64(&rng_state); }

typedef struct tally {
    uint64_t req_ok, req_no, perm_ok, perm_no, probes;
} tally;

static void count(tally *ty, uint64_t permits, bool ok)
{
    if (permits == 0) {
        assert_true(ok);
        ty->probes++;
        ty->req_ok++; /* a probe is an allowed request */
    } else if (ok) {
        ty->req_ok++;
        ty->perm_ok += permits;
    } else {
        ty->req_no++;
        ty->perm_no += permits;
    }
}

static void check_tally(const char *text, const char *name, const tally *ty)
{
    assert_int_equal(sample_l(text, "sluice_requests_total", name, "allowed"), ty->req_ok);
    assert_int_equal(sample_l(text, "sluice_requests_total", name, "denied"), ty->req_no);
    assert_int_equal(sample_l(text, "sluice_permits_total", name, "allowed"), ty->perm_ok);
    assert_int_equal(sample_l(text, "sluice_permits_total", name, "denied"), ty->perm_no);
    assert_int_equal(sample_l(text, "sluice_probes_total", name, NULL), ty->probes);
}

static void test_counts_match_decisions(void **state)
{
    (void)state;
    static const char *specs[] = {"fixed-window 10/s", "sliding-log 5/100ms",
                                  "sliding-wheel 20/s slots=10", "sliding-approx 7/s",
                                  "token-bucket 3/s burst=6", "leaky-bucket 4/s nodelay"};
    enum { NS = sizeof specs / sizeof specs[0] };
    char err[128];
    sluice_limiter *lims[NS];
    sluice_table *tabs[NS];
    tally tl[NS], tt[NS];
    uint64_t refused_full[NS];
    memset(tl, 0, sizeof tl);
    memset(tt, 0, sizeof tt);
    memset(refused_full, 0, sizeof refused_full);
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    char names[2 * NS][32];
    for (int i = 0; i < NS; i++) {
        lims[i] = sluice_limiter_new(specs[i], err, sizeof err);
        assert_non_null(lims[i]);
        tabs[i] = sluice_table_new(specs[i], 8, err, sizeof err); /* small: fills */
        assert_non_null(tabs[i]);
        snprintf(names[i], sizeof names[i], "lim%d", i);
        snprintf(names[NS + i], sizeof names[NS + i], "tab%d", i);
        assert_int_equal(sluice_metrics_add_limiter(m, names[i], lims[i]), 0);
        assert_int_equal(sluice_metrics_add_table(m, names[NS + i], tabs[i]), 0);
    }
    uint64_t now = 0;
    for (int step = 0; step < 20000; step++) {
        now += rnd() % (20 * 1000 * 1000); /* 0 .. 20 ms */
        int i = (int)(rnd() % NS);
        uint64_t permits = rnd() % 4; /* 0 (probe) .. 3 */
        if (rnd() % 50 == 0) permits = 100; /* beyond every capacity */
        bool ok = sluice_try_acquire_at(lims[i], permits, now, NULL);
        count(&tl[i], permits, ok);
        char key[8];
        int kl = snprintf(key, sizeof key, "k%u", (unsigned)(rnd() % 20));
        sluice_result res;
        ok = sluice_table_try_acquire_at(tabs[i], key, (size_t)kl, permits, now, &res);
        if (!ok && res.error == SLUICE_EFULL) refused_full[i]++;
        count(&tt[i], permits, ok);
    }
    char *text = render(m);
    check_grammar(text);
    uint64_t any_full = 0;
    for (int i = 0; i < NS; i++) {
        check_tally(text, names[i], &tl[i]);
        check_tally(text, names[NS + i], &tt[i]);
        assert_int_equal(sample_l(text, "sluice_table_keys_refused_total", names[NS + i], NULL),
                         refused_full[i]);
        assert_true(sample_l(text, "sluice_table_keys", names[NS + i], NULL) <= 8);
        sluice_table_stats st;
        sluice_table_stats_get(tabs[i], &st);
        assert_int_equal(sample_l(text, "sluice_table_keys", names[NS + i], NULL), st.keys);
        assert_int_equal(sample_l(text, "sluice_table_keys_reclaimed_total", names[NS + i], NULL),
                         st.reclaimed);
        assert_int_equal(sample_l(text, "sluice_table_keys_evicted_total", names[NS + i], NULL), 0);
        any_full += refused_full[i];
    }
    assert_true(any_full > 0); /* the traffic did fill some table */
    free(text);
    sluice_metrics_free(m);
    for (int i = 0; i < NS; i++) {
        sluice_limiter_free(lims[i]);
        sluice_table_free(tabs[i]);
    }
}

/* An evict-lru table counts its evictions. */
static void test_evictions(void **state)
{
    (void)state;
    char err[128];
    sluice_table *t = sluice_table_new_flags("token-bucket 1/h", 1, SLUICE_TABLE_EVICT_LRU, err,
                                          sizeof err);
    assert_non_null(t);
    /* one key held at a time, none ever at rest within the hour: every new
     * key evicts the previous one */
    for (unsigned i = 0; i < 5; i++) {
        char k = (char)('a' + i);
        assert_true(sluice_table_try_acquire_at(t, &k, 1, 1, i, NULL));
    }
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_table(m, "lru", t), 0);
    char *text = render(m);
    assert_int_equal(sample_l(text, "sluice_table_keys_evicted_total", "lru", NULL), 4);
    assert_int_equal(sample_l(text, "sluice_table_keys", "lru", NULL), 1);
    assert_int_equal(sample_l(text, "sluice_requests_total", "lru", "allowed"), 5);
    free(text);
    sluice_metrics_free(m);
    sluice_table_free(t);
}

/* ---- short buffers ------------------------------------------------------- */

static void test_short_buffer(void **state)
{
    (void)state;
    char err[128];
    sluice_limiter *a = sluice_limiter_new("token-bucket 2/s", err, sizeof err);
    sluice_table *t = sluice_table_new("fixed-window 1/s", 10, err, sizeof err);
    assert_non_null(a);
    assert_non_null(t);
    for (uint64_t i = 0; i < 5; i++) {
        sluice_try_acquire_at(a, 1, i, NULL);
        sluice_table_try_acquire_at(t, "k", 1, 1, i, NULL);
    }
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_limiter(m, "a \"quoted\" name", a), 0);
    assert_int_equal(sluice_metrics_add_table(m, "t", t), 0);
    char *full = render(m);
    size_t whole = strlen(full);
    assert_true(whole > 100);

    enum { GUARD = 16 };
    char *buf = malloc(whole + 1 + GUARD);
    assert_non_null(buf);
    for (size_t len = 0; len <= whole + 1; len++) {
        memset(buf, 'Z', whole + 1 + GUARD);
        size_t need = 0;
        int rc = sluice_metrics_write(m, len ? buf : NULL, len, &need);
        assert_int_equal(need, whole);
        for (size_t i = len; i < whole + 1 + GUARD; i++) assert_int_equal(buf[i], 'Z');
        if (len == whole + 1) {
            assert_int_equal(rc, 0);
            assert_string_equal(buf, full);
            continue;
        }
        assert_int_equal(rc, SLUICE_ENOSPC);
        if (len == 0) continue;
        /* the reference: the longest prefix of whole lines of at most
         * len - 1 bytes */
        size_t k = len - 1;
        while (k > 0 && full[k - 1] != '\n') k--;
        assert_int_equal(strlen(buf), k);
        assert_memory_equal(buf, full, k);
    }
    /* a NULL `needed` is fine */
    assert_int_equal(sluice_metrics_write(m, buf, 10, NULL), SLUICE_ENOSPC);
    assert_int_equal(buf[0], '\0'); /* the first line is longer than 9 bytes */
    free(buf);
    free(full);
    sluice_metrics_free(m);
    sluice_table_free(t);
    sluice_limiter_free(a);
}

/* ---- names ---------------------------------------------------------------- */

static void test_escaping(void **state)
{
    (void)state;
    char err[128];
    static const struct {
        const char *name, *escaped;
    } cases[] = {
        {"plain", "plain"},
        {"quo\"te", "quo\\\"te"},
        {"back\\slash", "back\\\\slash"},
        {"new\nline", "new\\nline"},
        {"\\n is not a newline", "\\\\n is not a newline"},
        {"\"\\\n", "\\\"\\\\\\n"},
        {"tab\there", "tab\there"},
        {"token-bucket 100/s burst=20", "token-bucket 100/s burst=20"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\xa6", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\xa6"},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    sluice_limiter *lims[N];
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    for (size_t i = 0; i < N; i++) {
        lims[i] = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
        assert_non_null(lims[i]);
        for (size_t j = 0; j <= i; j++) sluice_try_acquire_at(lims[i], 1, 0, NULL);
        assert_int_equal(sluice_metrics_add_limiter(m, cases[i].name, lims[i]), 0);
    }
    char *text = render(m);
    check_grammar(text);
    for (size_t i = 0; i < N; i++) {
        /* limiter i allowed 1 and denied i */
        assert_int_equal(sample_l(text, "sluice_requests_total", cases[i].escaped, "allowed"), 1);
        assert_int_equal(sample_l(text, "sluice_requests_total", cases[i].escaped, "denied"), i);
    }
    /* no raw newline inside a label: every line starts with '#' or 's' */
    for (const char *p = text; *p; p = strchr(p, '\n') + 1) assert_true(*p == '#' || *p == 's');
    free(text);
    sluice_metrics_free(m);
    for (size_t i = 0; i < N; i++) sluice_limiter_free(lims[i]);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    char err[128];
    sluice_limiter *lim = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
    sluice_limiter *lim2 = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
    sluice_table *t = sluice_table_new("fixed-window 1/s", 4, err, sizeof err);
    sluice_wheel *w = sluice_wheel_new(0, 4, 0, err, sizeof err);
    assert_non_null(lim);
    assert_non_null(lim2);
    assert_non_null(t);
    assert_non_null(w);
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);

    /* NULLs */
    assert_int_equal(sluice_metrics_add_limiter(NULL, "a", lim), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_limiter(m, NULL, lim), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_limiter(m, "a", NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_table(m, "a", NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_wheel(m, "a", NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_queue(m, "a", NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_remove(NULL, lim), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_remove(m, NULL), SLUICE_EINVAL);
    char buf[8];
    size_t need = 7;
    assert_int_equal(sluice_metrics_write(NULL, buf, sizeof buf, &need), SLUICE_EINVAL);
    assert_int_equal(need, 7); /* untouched */
    assert_int_equal(sluice_metrics_write(m, NULL, 1, &need), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_count(NULL), 0);
    sluice_metrics_free(NULL);

    /* names refused */
    char long_name[SLUICE_METRICS_NAME_MAX + 2];
    memset(long_name, 'n', sizeof long_name);
    long_name[SLUICE_METRICS_NAME_MAX + 1] = '\0'; /* 257 bytes */
    static const char *bad[] = {
        "",
        "cr\rhere",
        "ctl\x01",
        "esc\x1b[0m",
        "del\x7f",
        "\xff",                 /* never in UTF-8 */
        "\xc0\x80",             /* overlong NUL */
        "\xe0\x80\xaf",         /* overlong '/' */
        "\xed\xa0\x80",         /* a surrogate */
        "\xf4\x90\x80\x80",     /* past U+10FFFF */
        "\xe2\x82",             /* truncated */
        "\xc3 ",                /* a lead byte then ASCII */
        "\x80",                 /* a lone continuation byte */
        "nel\xc2\x85",         /* U+0085, a C1 control (next line) */
        "csi\xc2\x9b[0m",       /* U+009B, a C1 control (a terminal's CSI) */
        "c1\xc2\x80",          /* U+0080, the first C1 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(sluice_metrics_add_limiter(m, bad[i], lim), SLUICE_EINVAL);
        assert_int_equal(sluice_metrics_add_wheel(m, bad[i], w), SLUICE_EINVAL);
    }
    assert_int_equal(sluice_metrics_add_limiter(m, long_name, lim), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_count(m), 0);
    long_name[SLUICE_METRICS_NAME_MAX] = '\0'; /* 256 bytes: the longest */
    assert_int_equal(sluice_metrics_add_limiter(m, long_name, lim), 0);
    assert_int_equal(sluice_metrics_remove(m, lim), 0);

    /* duplicates: a name of the `limit` label once over limiters and
     * tables; an object once; wheels have their own names */
    assert_int_equal(sluice_metrics_add_limiter(m, "x", lim), 0);
    assert_int_equal(sluice_metrics_add_limiter(m, "x", lim2), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_table(m, "x", t), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_limiter(m, "y", lim), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_wheel(m, "x", w), 0);
    assert_int_equal(sluice_metrics_add_wheel(m, "z", w), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_table(m, "y", t), 0);
    /* names differing only in what escaping would merge are different */
    assert_int_equal(sluice_metrics_add_limiter(m, "a\\nb", lim2), 0);
    sluice_limiter *lim3 = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
    assert_non_null(lim3);
    assert_int_equal(sluice_metrics_add_limiter(m, "a\nb", lim3), 0);
    assert_int_equal(sluice_metrics_count(m), 5);

    /* remove: unknown objects, twice */
    int local;
    assert_int_equal(sluice_metrics_remove(m, &local), SLUICE_ENOENT);
    assert_int_equal(sluice_metrics_remove(m, lim), 0);
    assert_int_equal(sluice_metrics_remove(m, lim), SLUICE_ENOENT);
    assert_int_equal(sluice_metrics_count(m), 4);

    sluice_metrics_free(m);
    sluice_limiter_free(lim3);
    sluice_wheel_free(w);
    sluice_table_free(t);
    sluice_limiter_free(lim2);
    sluice_limiter_free(lim);
}

static void test_remove(void **state)
{
    (void)state;
    char err[128];
    sluice_limiter *a = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
    sluice_limiter *b = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
    sluice_table *c = sluice_table_new("fixed-window 1/s", 4, err, sizeof err);
    sluice_limiter *d = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_non_null(d);
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_limiter(m, "a", a), 0);
    assert_int_equal(sluice_metrics_add_limiter(m, "b", b), 0);
    assert_int_equal(sluice_metrics_add_table(m, "c", c), 0);
    assert_int_equal(sluice_metrics_remove(m, b), 0);
    sluice_limiter_free(b); /* the registry no longer refers to it */
    char *text = render(m);
    assert_null(strstr(text, "\"b\""));
    assert_non_null(strstr(text, "{limit=\"a\",decision=\"allowed\"} 0\n"
                                 "sluice_requests_total{limit=\"a\",decision=\"denied\"} 0\n"
                                 "sluice_requests_total{limit=\"a\",decision=\"denied_elsewhere\"} 0\n"
                                 "sluice_requests_total{limit=\"c\""));
    free(text);
    /* the name is free again, and the new object takes the emptied place */
    assert_int_equal(sluice_metrics_add_limiter(m, "b", d), 0);
    text = render(m);
    assert_non_null(strstr(text, "{limit=\"a\",decision=\"denied_elsewhere\"} 0\n"
                                 "sluice_requests_total{limit=\"b\",decision=\"allowed\"} 0\n"));
    check_grammar(text);
    free(text);
    /* removing the only table drops the table families */
    assert_int_equal(sluice_metrics_remove(m, c), 0);
    text = render(m);
    assert_null(strstr(text, "sluice_table"));
    free(text);
    sluice_metrics_free(m);
    sluice_limiter_free(d);
    sluice_table_free(c);
    sluice_limiter_free(a);
}

/* ---- allocation failures -------------------------------------------------- */

/* The test allocator (tests/testutil.h) fails the Nth call and counts the
 * live blocks. */
static void test_alloc_failures(void **state)
{
    (void)state;
    assert_int_equal(tu_alloc_install(), 0);
    /* _new then 20 adds (the array grows past 8 and 16): fail each
     * allocation in turn until the whole sequence passes */
    int fake[20];
    char name[8];
    bool done = false;
    for (long n = 0; !done; n++) {
        tu_alloc_arm(n, false);
        const long live0 = tu_alloc_live();
        sluice_metrics *m = sluice_metrics_new();
        if (!m) {
            assert_int_equal(tu_alloc_live() - live0, 0);
            continue;
        }
        int added = 0, rc = 0;
        for (int i = 0; i < 20; i++) {
            snprintf(name, sizeof name, "w%d", i);
            /* the registry never dereferences an object it is not asked to
             * write: any distinct pointers will do here */
            rc = sluice_metrics_add_wheel(m, name, (const sluice_wheel *)&fake[i]);
            if (rc == SLUICE_ENOMEM) continue;
            assert_int_equal(rc, 0);
            added++;
        }
        assert_int_equal(sluice_metrics_count(m), (size_t)added);
        done = added == 20 && tu_alloc_calls() <= n;
        /* a failed add left nothing behind: a retry succeeds */
        if (added < 20) {
            tu_alloc_disarm();
            for (int i = 0; i < 20; i++) {
                snprintf(name, sizeof name, "w%d", i);
                rc = sluice_metrics_add_wheel(m, name, (const sluice_wheel *)&fake[i]);
                assert_true(rc == 0 || rc == SLUICE_EINVAL);
            }
            assert_int_equal(sluice_metrics_count(m), 20);
        }
        sluice_metrics_free(m);
        assert_int_equal(tu_alloc_live() - live0, 0);
        assert_true(n < 1000);
    }
    assert_int_equal(tu_alloc_uninstall(), 0);
}

/* ---- concurrency ---------------------------------------------------------- */

typedef struct shared {
    sluice_limiter *lim;
    sluice_table *tab;
    sluice_metrics *m;
    atomic_bool stop;
    atomic_uint_fast64_t decided_ok, decided_no;
} shared;

static void *decider(void *arg)
{
    shared *s = arg;
    uint64_t ok = 0, no = 0;
    for (uint64_t i = 0; i < 200000; i++) {
        bool r = sluice_try_acquire_at(s->lim, 1, i * 1000, NULL);
        char k = (char)('a' + i % 7);
        bool r2 = sluice_table_try_acquire_at(s->tab, &k, 1, 1, i * 1000, NULL);
        ok += r + r2;
        no += !r + !r2;
    }
    atomic_fetch_add(&s->decided_ok, ok);
    atomic_fetch_add(&s->decided_no, no);
    return NULL;
}

static void *churner(void *arg)
{
    shared *s = arg;
    char err[64];
    while (!atomic_load(&s->stop)) {
        sluice_limiter *l = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
        assert_non_null(l);
        assert_int_equal(sluice_metrics_add_limiter(s->m, "churn", l), 0);
        assert_int_equal(sluice_metrics_remove(s->m, l), 0);
        sluice_limiter_free(l); /* safe: remove waited for any writer */
    }
    return NULL;
}

/* ---- wait histograms ------------------------------------------------------ */

/* The bucket bounds in ns, from docs/metrics.md (1-2.5-5 from 100 us). */
static const uint64_t LE_NS[16] = {100000,    250000,    500000,     1000000,    2500000,
                                   5000000,   10000000,  25000000,   50000000,   100000000,
                                   250000000, 500000000, 1000000000, 2500000000, 5000000000,
                                   10000000000};

/* The bucket of a wait, by a linear walk (the library searches). */
static int bucket_of(uint64_t ns)
{
    int i = 0;
    while (i < 16 && ns > LE_NS[i]) i++;
    return i;
}

/* ns as decimal seconds, without trailing zeros (the test's own format) */
static void check_tools(const char *text);

/* Which limit of a composite refused: a refused request counts `denied`
 * only in the limits that refused it, `denied_elsewhere` in those that
 * would have admitted it -- on every path a composite takes: lock-free
 * limiters with and without details (the refusing limit first or last),
 * keys of tables, and a limiter with a table key (the general path).  The
 * oracle is written out by hand from each limit's own rule. */
static void test_which_limit(void **state)
{
    (void)state;
    char err[128];
    /* tight: 1 per hour; loose: 100 per second */
    sluice_limiter *tight = sluice_limiter_new("token-bucket 1/h", err, sizeof err);
    sluice_limiter *loose = sluice_limiter_new("token-bucket 100/s", err, sizeof err);
    sluice_table *tt = sluice_table_new("fixed-window 1/h", 16, err, sizeof err);
    sluice_table *tl = sluice_table_new("fixed-window 100/s", 16, err, sizeof err);
    assert_non_null(tight);
    assert_non_null(loose);
    assert_non_null(tt);
    assert_non_null(tl);
    sluice_limit_ref ab[2] = {sluice_ref_limiter(tight), sluice_ref_limiter(loose)};
    sluice_limit_ref ba[2] = {sluice_ref_limiter(loose), sluice_ref_limiter(tight)};
    sluice_limit_ref keys[2] = {sluice_ref_key(tt, "k", 1), sluice_ref_key(tl, "k", 1)};
    sluice_limit_ref mixed[2] = {sluice_ref_key(tl, "m", 1), sluice_ref_limiter(tight)};
    sluice_result r;
    /* 1 admitted by both, then 5 refused by tight alone: res NULL (tight
     * first, then last), then with details */
    assert_true(sluice_composite_try_acquire_at(ab, 2, 1, 0, NULL, NULL));
    assert_false(sluice_composite_try_acquire_at(ab, 2, 1, 1, NULL, NULL));
    assert_false(sluice_composite_try_acquire_at(ba, 2, 1, 2, NULL, NULL));
    assert_false(sluice_composite_try_acquire_at(ab, 2, 2, 3, &r, NULL));
    assert_false(sluice_composite_try_acquire_at(ba, 2, 1, 4, &r, NULL));
    /* loose refuses too: 200 permits > its burst of 100: both deny */
    assert_false(sluice_composite_try_acquire_at(ab, 2, 200, 5, NULL, NULL));
    assert_false(sluice_composite_try_acquire_at(ba, 2, 200, 6, NULL, NULL));
    /* a probe is allowed everywhere: not a refusal */
    assert_true(sluice_composite_try_acquire_at(ab, 2, 0, 7, NULL, NULL));
    sluice_stats st;
    sluice_limiter_stats_get(tight, &st);
    assert_int_equal(st.requests_allowed, 1);
    assert_int_equal(st.requests_denied, 6);
    assert_int_equal(st.requests_denied_elsewhere, 0);
    sluice_limiter_stats_get(loose, &st);
    assert_int_equal(st.requests_allowed, 1);
    assert_int_equal(st.requests_denied, 6);
    assert_int_equal(st.requests_denied_elsewhere, 4); /* the 4 only tight refused */
    assert_int_equal(st.permits_denied_elsewhere, 5);  /* 1 + 1 + 2 + 1 */
    /* keys of tables: 1 admitted, 3 refused by tt's key alone */
    assert_true(sluice_composite_try_acquire_at(keys, 2, 1, 0, NULL, NULL));
    for (int i = 1; i <= 3; i++)
        assert_false(sluice_composite_try_acquire_at(keys, 2, 1, (uint64_t)i, i == 2 ? &r : NULL, NULL));
    sluice_table_stats ts;
    sluice_table_stats_get(tl, &ts);
    assert_int_equal(ts.decisions.requests_denied, 3);
    assert_int_equal(ts.decisions.requests_denied_elsewhere, 3);
    sluice_table_stats_get(tt, &ts);
    assert_int_equal(ts.decisions.requests_denied_elsewhere, 0);
    /* a key with a limiter: tight (empty since t=0) refuses, tl's key "m"
     * would admit */
    assert_false(sluice_composite_try_acquire_at(mixed, 2, 1, 10, NULL, NULL));
    assert_false(sluice_composite_try_acquire_at(mixed, 2, 1, 11, &r, NULL));
    sluice_table_stats_get(tl, &ts);
    assert_int_equal(ts.decisions.requests_denied_elsewhere, 5);
    sluice_limiter_stats_get(tight, &st);
    assert_int_equal(st.requests_denied_elsewhere, 0);
    /* the metrics: denied and denied_elsewhere apart, adding up */
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_limiter(m, "tight", tight), 0);
    assert_int_equal(sluice_metrics_add_limiter(m, "loose", loose), 0);
    assert_int_equal(sluice_metrics_add_table(m, "per-key", tl), 0);
    char *text = render(m);
    check_grammar(text);
    assert_int_equal(sample_l(text, "sluice_requests_total", "tight", "denied"), 8);
    assert_int_equal(sample_l(text, "sluice_requests_total", "tight", "denied_elsewhere"), 0);
    assert_int_equal(sample_l(text, "sluice_requests_total", "loose", "denied"), 2);
    assert_int_equal(sample_l(text, "sluice_requests_total", "loose", "denied_elsewhere"), 4);
    assert_int_equal(sample_l(text, "sluice_permits_total", "loose", "denied"), 400);
    assert_int_equal(sample_l(text, "sluice_permits_total", "loose", "denied_elsewhere"), 5);
    assert_int_equal(sample_l(text, "sluice_requests_total", "per-key", "denied"), 0);
    assert_int_equal(sample_l(text, "sluice_requests_total", "per-key", "denied_elsewhere"), 5);
    check_tools(text);
    free(text);
    sluice_metrics_free(m);
    sluice_limiter_free(tight);
    sluice_limiter_free(loose);
    sluice_table_free(tt);
    sluice_table_free(tl);
}

/* Which limit refused, for keys of tables in a shared region (the general
 * path, which counts a region key under its shard lock in the calling
 * thread's counter stripe): a limiter with a region key, and two region
 * keys of two regions, the tight one first, and a refusal made by a
 * forked process.  The expected counts are tallied by hand from each
 * limit's own rule, step by step below. */
static void test_which_limit_region(void **state)
{
    (void)state;
    char err[256] = "";
    const char *tspec = "fixed-window 1/h", *lspec = "fixed-window 100/s";
    const size_t nt = sluice_table_region_size(tspec, 16, 16, err, sizeof err);
    const size_t nl = sluice_table_region_size(lspec, 16, 16, err, sizeof err);
    assert_true(nt > 0 && nl > 0);
    /* zeroed anonymous mappings: what attach initialises */
    void *regt = mmap(NULL, nt, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    void *regl = mmap(NULL, nl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(regt != MAP_FAILED && regl != MAP_FAILED);
    sluice_table *rt = sluice_table_attach(regt, nt, tspec, 16, 16, 0, err, sizeof err);
    sluice_table *rl = sluice_table_attach(regl, nl, lspec, 16, 16, 0, err, sizeof err);
    sluice_limiter *tight = sluice_limiter_new("token-bucket 1/h", err, sizeof err);
    if (!rt || !rl || !tight) fail_msg("%s", err);
    sluice_limit_ref mixed[2] = {sluice_ref_limiter(tight), sluice_ref_key(rl, "a", 1)};
    sluice_limit_ref keys[2] = {sluice_ref_key(rt, "k", 1), sluice_ref_key(rl, "k", 1)};
    sluice_result r;
    /* the limiter and rl's key "a": admitted at 0; then refused by the
     * limiter (empty for an hour) while "a" (1 of 100 this second) would
     * admit: 1 permit, then 3 with details */
    assert_true(sluice_composite_try_acquire_at(mixed, 2, 1, 0, NULL, NULL));
    assert_false(sluice_composite_try_acquire_at(mixed, 2, 1, 1, NULL, NULL));
    assert_false(sluice_composite_try_acquire_at(mixed, 2, 3, 2, &r, NULL));
    assert_int_equal(r.retry_after_ns, -1); /* 3 permits > the limiter's burst of 1 */
    /* two region keys: admitted at 0; refused by rt's "k" (1 per hour)
     * while rl's "k" would admit: 1 permit, then 2 with details; then 200
     * permits, more than either admits: refused by both; a probe */
    assert_true(sluice_composite_try_acquire_at(keys, 2, 1, 0, NULL, NULL));
    assert_false(sluice_composite_try_acquire_at(keys, 2, 1, 1, NULL, NULL));
    assert_false(sluice_composite_try_acquire_at(keys, 2, 2, 2, &r, NULL));
    assert_false(sluice_composite_try_acquire_at(keys, 2, 200, 3, NULL, NULL));
    assert_true(sluice_composite_try_acquire_at(keys, 2, 0, 4, NULL, NULL));
    /* rt: 1 admitted; refused 3 (1 + 2 + 200 permits), all by itself */
    sluice_table_stats ts;
    sluice_table_stats_get(rt, &ts);
    assert_int_equal(ts.decisions.requests_allowed, 1);
    assert_int_equal(ts.decisions.requests_denied, 3);
    assert_int_equal(ts.decisions.permits_denied, 203);
    assert_int_equal(ts.decisions.requests_denied_elsewhere, 0);
    assert_int_equal(ts.decisions.permits_denied_elsewhere, 0);
    assert_int_equal(ts.decisions.probes, 1);
    /* rl: 2 admitted ("a", "k"); refused 5: 4 by another limit (1 + 3 + 1
     * + 2 = 7 permits), 1 by itself (200) */
    sluice_table_stats_get(rl, &ts);
    assert_int_equal(ts.decisions.requests_allowed, 2);
    assert_int_equal(ts.decisions.requests_denied, 5);
    assert_int_equal(ts.decisions.permits_denied, 207);
    assert_int_equal(ts.decisions.requests_denied_elsewhere, 4);
    assert_int_equal(ts.decisions.permits_denied_elsewhere, 7);
    assert_int_equal(ts.decisions.probes, 1);
    /* the limiter refused both of its refusals itself */
    sluice_stats st;
    sluice_limiter_stats_get(tight, &st);
    assert_int_equal(st.requests_denied, 2);
    assert_int_equal(st.requests_denied_elsewhere, 0);
    /* a second handle of rl's region reads the same counts (they live in
     * the region, not the handle) */
    sluice_table *rl2 = sluice_table_attach(regl, nl, lspec, 16, 16, 0, err, sizeof err);
    if (!rl2) fail_msg("%s", err);
    sluice_table_stats_get(rl2, &ts);
    assert_int_equal(ts.decisions.requests_denied_elsewhere, 4);
    assert_int_equal(ts.decisions.permits_denied_elsewhere, 7);
    sluice_table_free(rl2);
    /* another process (a child using the handles it inherited) makes one
     * more refusal by rt's key, of 1 permit: counted in the region, so
     * this process sees it */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(sluice_composite_try_acquire_at(keys, 2, 1, 5, NULL, NULL) ? 1 : 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sluice_table_stats_get(rl, &ts);
    assert_int_equal(ts.decisions.requests_denied, 6);
    assert_int_equal(ts.decisions.requests_denied_elsewhere, 5);
    assert_int_equal(ts.decisions.permits_denied_elsewhere, 8);
    sluice_table_stats_get(rt, &ts);
    assert_int_equal(ts.decisions.requests_denied, 4);
    assert_int_equal(ts.decisions.requests_denied_elsewhere, 0);
    /* the metrics: denied and denied_elsewhere apart */
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_table(m, "tight-shared", rt), 0);
    assert_int_equal(sluice_metrics_add_table(m, "loose-shared", rl), 0);
    char *text = render(m);
    check_grammar(text);
    assert_int_equal(sample_l(text, "sluice_requests_total", "tight-shared", "denied"), 4);
    assert_int_equal(sample_l(text, "sluice_requests_total", "tight-shared", "denied_elsewhere"), 0);
    assert_int_equal(sample_l(text, "sluice_permits_total", "tight-shared", "denied"), 204);
    /* allowed: 2 admitted and the probe (docs/metrics.md) */
    assert_int_equal(sample_l(text, "sluice_requests_total", "loose-shared", "allowed"), 3);
    assert_int_equal(sample_l(text, "sluice_requests_total", "loose-shared", "denied"), 1);
    assert_int_equal(sample_l(text, "sluice_requests_total", "loose-shared", "denied_elsewhere"), 5);
    assert_int_equal(sample_l(text, "sluice_permits_total", "loose-shared", "denied"), 200);
    assert_int_equal(sample_l(text, "sluice_permits_total", "loose-shared", "denied_elsewhere"), 8);
    check_tools(text);
    free(text);
    sluice_metrics_free(m);
    sluice_limiter_free(tight);
    sluice_table_free(rt);
    sluice_table_free(rl);
    munmap(regt, nt);
    munmap(regl, nl);
}

static void seconds_text(char *out, size_t cap, uint64_t ns)
{
    int n = snprintf(out, cap, "%" PRIu64 ".%09" PRIu64, (uint64_t)(ns / SEC), (uint64_t)(ns % SEC));
    while (n > 0 && out[n - 1] == '0') out[--n] = '\0';
    if (n > 0 && out[n - 1] == '.') out[--n] = '\0';
}

static void check_tools(const char *text)
{
    char msg[512];
    int rc = tu_check_exposition(text, msg, sizeof msg);
    if (rc == 2) fprintf(stderr, "# not checked with the Prometheus tools: %s\n", msg);
    else if (rc != 0) fail_msg("%s\n%s", msg, text);
}

/* A concurrency limit's gauges: exactly its held permits, N and waiters,
 * the exposition valid for the Prometheus tools; its name shares the
 * `limit` label's names with limiters. */
static void test_concurrency_gauges(void **state)
{
    (void)state;
    char err[128];
    sluice_concurrency *c = sluice_concurrency_new("concurrency 5 lease=10s", err, sizeof err);
    sluice_limiter *l = sluice_limiter_new("token-bucket 1/s", err, sizeof err);
    assert_non_null(c);
    assert_non_null(l);
    sluice_metrics *m = sluice_metrics_new();
    assert_int_equal(sluice_metrics_add_limiter(m, "api", l), 0);
    assert_int_equal(sluice_metrics_add_concurrency(m, "api", c), SLUICE_EINVAL); /* name taken */
    assert_int_equal(sluice_metrics_add_concurrency(m, "inflight", c), 0);
    assert_int_equal(sluice_metrics_add_concurrency(m, "again", c), SLUICE_EINVAL); /* added */
    sluice_permit a, b;
    assert_true(sluice_acquire_permit_at(c, 2, 0, &a, NULL));
    assert_true(sluice_acquire_permit_at(c, 1, 5 * SEC, &b, NULL));
    char buf[8192];
    assert_int_equal(sluice_metrics_write(m, buf, sizeof buf, NULL), 0);
    assert_non_null(strstr(buf, "# TYPE sluice_concurrency_held gauge\nsluice_concurrency_held{limit=\"inflight\"} 3\n"));
    assert_non_null(strstr(buf, "sluice_concurrency_limit{limit=\"inflight\"} 5\n"));
    assert_non_null(strstr(buf, "sluice_concurrency_waiting{limit=\"inflight\"} 0\n"));
    assert_null(strstr(buf, "sluice_concurrency_held{limit=\"api\"}"));
    check_tools(buf);
    /* a's lease ends at 10 s: the gauge follows the limit's next call */
    assert_int_equal(sluice_permit_release_at(&b, 10 * SEC), 0);
    assert_int_equal(sluice_metrics_write(m, buf, sizeof buf, NULL), 0);
    assert_non_null(strstr(buf, "sluice_concurrency_held{limit=\"inflight\"} 0\n"));
    assert_int_equal(sluice_metrics_remove(m, c), 0);
    assert_int_equal(sluice_metrics_write(m, buf, sizeof buf, NULL), 0);
    assert_null(strstr(buf, "sluice_concurrency"));
    sluice_metrics_free(m);
    sluice_concurrency_free(c);
    sluice_limiter_free(l);
}

static int grants;
static uint64_t last_grant_ns;
static void count_grant(void *arg, uint64_t id, uint64_t now_ns)
{
    (void)arg, (void)id;
    grants++;
    last_grant_ns = now_ns;
}

/* Asynchronous acquires on an injected clock: each wait is exactly the
 * wheel's time of the advance that calls back minus the request's now_ns,
 * so the test chooses them, on both sides of every bucket bound; then the
 * booked waits of a bucket, a window's parked requests, cancellations,
 * refusals and drops. */
static void test_async_wait_histogram(void **state)
{
    (void)state;
    char err[128];
    /* grants at once: the wait is the advance's time minus the request's */
    sluice_limiter *lim = sluice_limiter_new("token-bucket 1000000/s burst=1000000", err, sizeof err);
    sluice_wheel *w = sluice_wheel_new(1, 64, 0, err, sizeof err);
    assert_non_null(lim);
    assert_non_null(w);
    sluice_queue *q = sluice_queue_new(lim, w, 2, err, sizeof err);
    assert_non_null(q);
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_queue(m, "q", q), 0);
    assert_int_equal(sluice_metrics_add_limiter(m, "lim", lim), 0);

    static const uint64_t waits[] = {0,          1,           99999,       100000,     100001,
                                     250000,     250001,      999999,      1000000,    7000000,
                                     99999999,   100000000,   1000000000,  2500000001, 9999999999,
                                     10000000000, 10000000001, 3600 * SEC, 0};
    const size_t nw = sizeof waits / sizeof waits[0];
    uint64_t per[17] = {0}, sum = 0, t = 5 * SEC;
    assert_int_equal(sluice_wheel_advance(w, t), 0);
    grants = 0;
    for (size_t i = 0; i < nw; i++) {
        assert_int_equal(sluice_queue_acquire_at(q, 1, t, count_grant, NULL, NULL), 0);
        t += waits[i];
        assert_int_equal(sluice_wheel_advance(w, t), 1);
        assert_int_equal(last_grant_ns, t);
        per[bucket_of(waits[i])]++;
        sum += waits[i];
    }
    assert_int_equal(grants, (int)nw);

    /* a bucket books: three requests at t for 1 permit each on a bucket of
     * 10/s, burst 1: due at t, t + 100 ms, t + 200 ms; advanced at t + 50
     * ms (the first, waited 50 ms) and t + 300 ms (the others, 300 ms) */
    sluice_limiter *tb = sluice_limiter_new("token-bucket 10/s burst=1", err, sizeof err);
    assert_non_null(tb);
    sluice_queue *qb = sluice_queue_new(tb, w, 0, err, sizeof err);
    assert_non_null(qb);
    assert_int_equal(sluice_metrics_add_queue(m, "booked", qb), 0);
    uint64_t tb0 = t;
    for (int i = 0; i < 3; i++)
        assert_int_equal(sluice_queue_acquire_at(qb, 1, tb0, count_grant, NULL, NULL), 0);
    assert_int_equal(sluice_wheel_advance(w, tb0 + 50000000), 1);
    assert_int_equal(sluice_wheel_advance(w, tb0 + 300000000), 2);
    t = tb0 + 300000000;
    uint64_t per_b[17] = {0};
    per_b[bucket_of(50000000)]++;
    per_b[bucket_of(300000000)] += 2;
    uint64_t sum_b = 50000000 + 2 * 300000000ull;

    /* refusals, a cancellation and drops on q (bound 2) */
    uint64_t id1, id2;
    assert_int_equal(sluice_queue_acquire_at(q, 2000000, t, count_grant, NULL, NULL), SLUICE_ERANGE);
    assert_int_equal(sluice_queue_acquire_at(q, 1, t, count_grant, NULL, &id1), 0);
    assert_int_equal(sluice_queue_acquire_at(q, 1, t, count_grant, NULL, &id2), 0);
    assert_int_equal(sluice_queue_acquire_at(q, 1, t, count_grant, NULL, NULL), SLUICE_EFULL);
    assert_int_equal(sluice_queue_acquire_at(NULL, 1, t, count_grant, NULL, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_queue_acquire_at(q, 1, t, NULL, NULL, NULL), SLUICE_EINVAL); /* not counted */
    assert_int_equal(sluice_queue_cancel_at(q, id1, t), 0);
    assert_int_equal(sluice_queue_cancel_at(q, id1, t), SLUICE_ENOENT); /* once */

    char sumtext[64], sumtext_b[64];
    seconds_text(sumtext, sizeof sumtext, sum);
    seconds_text(sumtext_b, sizeof sumtext_b, sum_b);
    static char want[8192];
    static const uint64_t reasons_q[3] = {1, 2, 0}, reasons_b[3] = {0, 0, 0};
    want[0] = '\0';
    strcat(want, HIST_HEAD_ASYNC);
    want_hist(want, sizeof want, "sluice_async_wait_seconds", "queue", "q", per, sumtext);
    want_hist(want, sizeof want, "sluice_async_wait_seconds", "queue", "booked", per_b, sumtext_b);
    strcat(want, FAILED_HEAD_ASYNC);
    want_reasons(want, sizeof want, "sluice_async_failed_total", "queue", "q", ASYNC_REASONS, reasons_q);
    want_reasons(want, sizeof want, "sluice_async_failed_total", "queue", "booked", ASYNC_REASONS,
                 reasons_b);
    char *got = render(m);
    check_grammar(got);
    const char *from = strstr(got, "# HELP sluice_async_wait_seconds");
    const char *to = strstr(got, "# HELP sluice_table"); /* none: the wheel's then */
    if (!to) to = strstr(got, "# HELP sluice_wheel");
    assert_non_null(from);
    if (to) assert_int_equal((size_t)(to - from), strlen(want));
    assert_memory_equal(from, want, strlen(want));
    /* the limiter's blocking histogram is there, empty */
    assert_int_equal(sample(got, "sluice_acquire_wait_seconds_count{limit=\"lim\"}"), 0);
    assert_true(has_line_with(got, "sluice_acquire_wait_seconds_sum{limit=\"lim\"} 0\n"));
    check_tools(got);
    free(got);

    /* the public getter agrees */
    sluice_wait_stats ws;
    sluice_queue_wait_stats_get(q, &ws);
    assert_int_equal(ws.count, nw);
    assert_int_equal(ws.sum_ns, sum);
    for (int i = 0; i < 17; i++) assert_int_equal(ws.buckets[i], per[i]);
    assert_int_equal(ws.cancelled, 1);
    assert_int_equal(ws.failed, 2);
    assert_int_equal(ws.dropped, 0);
    assert_int_equal(ws.timed_out, 0);
    sluice_queue_wait_stats_get(NULL, &ws);
    assert_int_equal(ws.count, 0);
    for (unsigned i = 0; i < 16; i++) assert_int_equal(sluice_wait_bucket_bound_ns(i), LE_NS[i]);
    assert_int_equal(sluice_wait_bucket_bound_ns(16), UINT64_MAX);

    /* the wheel goes first: q's pending request (id2) is dropped */
    (void)id2;
    assert_int_equal(sluice_metrics_remove(m, qb), 0);
    sluice_queue_free(qb);
    sluice_wheel_free(w);
    sluice_queue_wait_stats_get(q, &ws);
    assert_int_equal(ws.dropped, 1);
    got = render(m);
    assert_int_equal(sample(got, "sluice_async_failed_total{queue=\"q\",reason=\"dropped\"}"), 1);
    assert_int_equal(sample(got, "sluice_async_failed_total{queue=\"q\",reason=\"refused\"}"), 2);
    assert_int_equal(sluice_queue_acquire_at(q, 1, t, count_grant, NULL, NULL), SLUICE_ECANCELED);
    free(got);
    got = render(m);
    assert_int_equal(sample(got, "sluice_async_failed_total{queue=\"q\",reason=\"refused\"}"), 3);
    free(got);

    sluice_metrics_free(m);
    sluice_queue_free(q);
    sluice_limiter_free(tb);
    sluice_limiter_free(lim);
}

/* A window's parked requests: the head asks at each refusal's retry time,
 * the others wait behind it; each wait runs to the advance that grants it. */
static void test_async_wait_window(void **state)
{
    (void)state;
    char err[128];
    sluice_limiter *lim = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
    sluice_wheel *w = sluice_wheel_new(1, 64, 0, err, sizeof err);
    assert_non_null(lim);
    assert_non_null(w);
    sluice_queue *q = sluice_queue_new(lim, w, 0, err, sizeof err);
    assert_non_null(q);
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_queue(m, "win", q), 0);
    /* the window [0, 1 s) is used; three requests at 400 ms */
    assert_true(sluice_try_acquire_at(lim, 1, 0, NULL));
    grants = 0;
    for (int i = 0; i < 3; i++)
        assert_int_equal(sluice_queue_acquire_at(q, 1, 400000000, count_grant, NULL, NULL), 0);
    /* 1 s: the head is granted (waited 600 ms); 2 s, 3 s: the others
     * (1.6 s, 2.6 s), each window granting one */
    for (uint64_t s2 = 1; s2 <= 3; s2++) {
        sluice_wheel_advance(w, s2 * SEC);
        sluice_wheel_advance(w, s2 * SEC); /* the new head asks at the next advance */
    }
    assert_int_equal(grants, 3);
    uint64_t per[17] = {0};
    per[bucket_of(600000000)]++;
    per[bucket_of(1600000000)]++;
    per[bucket_of(2600000000)]++;
    static char want[4096];
    want[0] = '\0';
    strcat(want, HIST_HEAD_ASYNC);
    want_hist(want, sizeof want, "sluice_async_wait_seconds", "queue", "win", per, "4.8");
    char *got = render(m);
    check_grammar(got);
    assert_non_null(strstr(got, want));
    check_tools(got);
    free(got);
    sluice_metrics_free(m);
    sluice_queue_free(q);
    sluice_wheel_free(w);
    sluice_limiter_free(lim);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

/* Blocking acquires sleep for real (there is no _at form): short waits,
 * placed with generous bounds.  token-bucket 1 per 150 ms, burst 1: the
 * first acquire is granted at once, the second after about 150 ms (never
 * less than 100 ms, since both calls follow each other within 50 ms on any
 * sane machine; under 250 ms unless the sleep overruns by 100 ms); a third
 * with a 1 ms timeout cannot be had (timeout); a cancelled canceller
 * (cancelled). */
static void test_blocking_wait_histogram(void **state)
{
    (void)state;
    char err[128];
    sluice_limiter *lim = sluice_limiter_new("token-bucket 1/150ms", err, sizeof err);
    assert_non_null(lim);
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    assert_int_equal(sluice_metrics_add_limiter(m, "blk", lim), 0);
    uint64_t t0 = mono_ns();
    assert_true(sluice_acquire(lim, 1, UINT64_MAX));
    uint64_t t1 = mono_ns();
    assert_true(sluice_acquire(lim, 1, UINT64_MAX));
    uint64_t t2 = mono_ns();
    assert_false(sluice_acquire(lim, 1, 1000000)); /* 1 ms: not enough */
    sluice_canceller *c = sluice_canceller_new();
    assert_non_null(c);
    sluice_canceller_cancel(c);
    assert_int_equal(sluice_acquire_cancellable(lim, 1, UINT64_MAX, c), SLUICE_ECANCELED);
    sluice_canceller_free(c);
    /* more than the burst: never, at once */
    assert_int_equal(sluice_acquire_cancellable(lim, 2, UINT64_MAX, NULL), SLUICE_ETIMEDOUT);

    char *got = render(m);
    check_grammar(got);
    uint64_t first = t1 - t0, second = t2 - t1; /* what each call took, at least its wait */
    assert_int_equal(sample(got, "sluice_acquire_wait_seconds_count{limit=\"blk\"}"), 2);
    assert_int_equal(sample(got, "sluice_acquire_wait_seconds_bucket{limit=\"blk\",le=\"+Inf\"}"), 2);
    /* the first in a bucket at or below what the call took, and at most 10
     * ms; the second in (0.1, 0.25] */
    uint64_t b_first = sample(got, "sluice_acquire_wait_seconds_bucket{limit=\"blk\",le=\"0.01\"}");
    uint64_t b_01 = sample(got, "sluice_acquire_wait_seconds_bucket{limit=\"blk\",le=\"0.1\"}");
    uint64_t b_025 = sample(got, "sluice_acquire_wait_seconds_bucket{limit=\"blk\",le=\"0.25\"}");
    if (first < 10000000) assert_int_equal(b_first, 1);
    if (second < 250000000) {
        assert_int_equal(b_01, 1);
        assert_int_equal(b_025, 2);
    }
    sluice_wait_stats ws;
    sluice_limiter_wait_stats_get(lim, &ws);
    assert_true(ws.sum_ns >= 100000000 && ws.sum_ns <= first + second);
    assert_int_equal(sample(got, "sluice_acquire_failed_total{limit=\"blk\",reason=\"timeout\"}"), 2);
    assert_int_equal(sample(got, "sluice_acquire_failed_total{limit=\"blk\",reason=\"cancelled\"}"), 1);
    assert_int_equal(sample(got, "sluice_acquire_failed_total{limit=\"blk\",reason=\"error\"}"), 0);
    assert_int_equal(ws.timed_out, 2);
    assert_int_equal(ws.cancelled, 1);
    assert_int_equal(ws.count, 2);
    check_tools(got);
    free(got);
    sluice_metrics_free(m);
    sluice_limiter_free(lim);
}

/* Blocking acquires from several threads: every granted one counted once,
 * whichever stripe it went to. */
typedef struct blk_arg {
    sluice_limiter *lim;
    int n;
} blk_arg;

static void *blk_thread(void *p)
{
    blk_arg *a = p;
    for (int i = 0; i < a->n; i++) sluice_acquire(a->lim, 1, UINT64_MAX);
    return NULL;
}

static void test_blocking_wait_threads(void **state)
{
    (void)state;
    char err[128];
    /* a bucket that never runs dry: every wait is (about) 0 */
    sluice_limiter *lim = sluice_limiter_new("token-bucket 1000000000/s burst=1000000000", err, sizeof err);
    assert_non_null(lim);
    pthread_t th[20];
    blk_arg a = {lim, 2000};
    for (int i = 0; i < 20; i++) assert_int_equal(pthread_create(&th[i], NULL, blk_thread, &a), 0);
    for (int i = 0; i < 20; i++) pthread_join(th[i], NULL);
    sluice_wait_stats ws;
    sluice_limiter_wait_stats_get(lim, &ws);
    assert_int_equal(ws.count, 20 * 2000);
    uint64_t sum = 0;
    for (int i = 0; i < 17; i++) sum += ws.buckets[i];
    assert_int_equal(sum, 20 * 2000);
    sluice_limiter_free(lim);
}

/* ---- sources --------------------------------------------------------------- */

/* A source of the test's: an object is an array of three counters. */
static const sluice_metrics_family src_fams[] = {
    {"sluice_test_things_total", "counter", "Things, by colour."},
    {"sluice_test_level", "gauge", "A level."},
    {"sluice_test_never_total", "counter", "A family with no sample: left out."},
};

static void src_write(const void *obj, size_t family, sluice_metrics_out *out)
{
    const uint64_t *v = obj;
    if (family == 0) {
        sluice_metrics_sample(out, "colour", "red", v[0]);
        sluice_metrics_sample(out, "colour", "a\"b\\c\nd", v[1]); /* escaped */
        sluice_metrics_sample(out, "colour", "\xff", 7);          /* not UTF-8: left out */
        sluice_metrics_sample(out, "le", "x", 7);                 /* reserved: left out */
        sluice_metrics_sample(out, "thing", "x", 7);              /* the object's label */
        sluice_metrics_sample(out, "9x", "x", 7);                 /* not a label name */
        sluice_metrics_sample(out, "colour", NULL, 7);            /* no value */
    } else if (family == 1) {
        sluice_metrics_sample(out, NULL, NULL, v[2]);
    }
    sluice_metrics_sample(NULL, NULL, NULL, 1); /* ignored */
}

static const sluice_metrics_source test_src = {"thing", src_fams, 3, src_write};

static void test_sources(void **state)
{
    (void)state;
    char err[128];
    sluice_limiter *lim = sluice_limiter_new("fixed-window 1/s", err, sizeof err);
    assert_non_null(lim);
    sluice_metrics *m = sluice_metrics_new();
    assert_non_null(m);
    uint64_t a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
    assert_int_equal(sluice_metrics_add_source(m, "a", a, &test_src), 0);
    assert_int_equal(sluice_metrics_add_limiter(m, "a", lim), 0); /* another name space */
    assert_int_equal(sluice_metrics_add_source(m, "a", b, &test_src), SLUICE_EINVAL); /* used */
    assert_int_equal(sluice_metrics_add_source(m, "b", a, &test_src), SLUICE_EINVAL); /* added */
    assert_int_equal(sluice_metrics_add_source(m, "b", b, &test_src), 0);
    assert_int_equal(sluice_metrics_add_source(NULL, "c", b + 1, &test_src), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_source(m, NULL, b + 1, &test_src), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_source(m, "c", NULL, &test_src), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_source(m, "c", b + 1, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_count(m), 3);

    char *got = render(m);
    check_grammar(got);
    const char *from = strstr(got, "# HELP sluice_test_things_total");
    assert_non_null(from);
    assert_non_null(strstr(got, "sluice_requests_total{limit=\"a\""));
    assert_true(strstr(got, "sluice_requests_total{limit=\"a\"") < from); /* the core's first */
    assert_string_equal(from,
                        "# HELP sluice_test_things_total Things, by colour.\n"
                        "# TYPE sluice_test_things_total counter\n"
                        "sluice_test_things_total{thing=\"a\",colour=\"red\"} 1\n"
                        "sluice_test_things_total{thing=\"a\",colour=\"a\\\"b\\\\c\\nd\"} 2\n"
                        "sluice_test_things_total{thing=\"b\",colour=\"red\"} 10\n"
                        "sluice_test_things_total{thing=\"b\",colour=\"a\\\"b\\\\c\\nd\"} 20\n"
                        "# HELP sluice_test_level A level.\n"
                        "# TYPE sluice_test_level gauge\n"
                        "sluice_test_level{thing=\"a\"} 3\n"
                        "sluice_test_level{thing=\"b\"} 30\n");
    check_tools(got);
    free(got);

    /* a short buffer cuts the sources' lines whole too */
    size_t need;
    assert_int_equal(sluice_metrics_write(m, NULL, 0, &need), SLUICE_ENOSPC);
    char *small = malloc(need);
    assert_non_null(small);
    assert_int_equal(sluice_metrics_write(m, small, need, NULL), SLUICE_ENOSPC);
    size_t sl = strlen(small);
    assert_true(sl > 0 && sl < need && small[sl - 1] == '\n');
    assert_non_null(strstr(small, "sluice_test_level{thing=\"a\"} 3\n"));
    assert_null(strstr(small, "sluice_test_level{thing=\"b\"}"));
    free(small);

    /* removed: its lines go; the other's stay */
    assert_int_equal(sluice_metrics_remove(m, a), 0);
    got = render(m);
    assert_null(strstr(got, "thing=\"a\""));
    assert_non_null(strstr(got, "sluice_test_level{thing=\"b\"} 30\n"));
    free(got);
    assert_int_equal(sluice_metrics_remove(m, b), 0);
    got = render(m);
    assert_null(strstr(got, "sluice_test_"));
    free(got);

    /* bad sources: each refused, nothing added */
    sluice_metrics_family f[2];
    sluice_metrics_source bad;
    static const struct {
        const char *label, *name, *type, *help;
    } cases[] = {
        {"thing", "sluice_requests_total", "counter", "a core family"},
        {"thing", "sluice_acquire_wait_seconds_bucket", "counter", "a core family's line"},
        {"thing", "other_total", "counter", "no sluice_ prefix"},
        {"thing", "sluice_", "counter", "no name after the prefix"},
        {"thing", "sluice_Things_total", "counter", "upper case"},
        {"thing", "sluice_x-y_total", "counter", "a dash"},
        {"thing", "sluice_things", "counter", "a counter without _total"},
        {"thing", "sluice_things_total", "histogram", "a type we do not write"},
        {"thing", "sluice_things_total", "counter", "a \\ backslash"},
        {"thing", "sluice_things_total", "counter", "a\nnewline"},
        {"thing", "sluice_things_total", "counter", ""},
        {"le", "sluice_things_total", "counter", "the histograms' label"},
        {"__x", "sluice_things_total", "counter", "a reserved label"},
        {"1x", "sluice_things_total", "counter", "a label starting with a digit"},
        {"", "sluice_things_total", "counter", "an empty label"},
        {"a b", "sluice_things_total", "counter", "a space in the label"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        f[0] = (sluice_metrics_family){cases[i].name, cases[i].type, cases[i].help};
        bad = (sluice_metrics_source){cases[i].label, f, 1, src_write};
        if (sluice_metrics_add_source(m, "x", a, &bad) != SLUICE_EINVAL)
            fail_msg("case %zu (%s) accepted", i, cases[i].help);
    }
    f[0] = (sluice_metrics_family){"sluice_x_total", "counter", "x"};
    f[1] = f[0];
    bad = (sluice_metrics_source){"thing", f, 2, src_write}; /* twice the same family */
    assert_int_equal(sluice_metrics_add_source(m, "x", a, &bad), SLUICE_EINVAL);
    bad = (sluice_metrics_source){"thing", f, 0, src_write}; /* no family */
    assert_int_equal(sluice_metrics_add_source(m, "x", a, &bad), SLUICE_EINVAL);
    bad = (sluice_metrics_source){"thing", f, 1, NULL}; /* no write */
    assert_int_equal(sluice_metrics_add_source(m, "x", a, &bad), SLUICE_EINVAL);
    bad = (sluice_metrics_source){"thing", NULL, 1, src_write};
    assert_int_equal(sluice_metrics_add_source(m, "x", a, &bad), SLUICE_EINVAL);
    /* another source may not reuse test_src's families */
    bad = (sluice_metrics_source){"thing", src_fams + 1, 1, src_write};
    assert_int_equal(sluice_metrics_add_source(m, "x", a, &bad), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_count(m), 1);

    /* at most SLUICE_METRICS_SOURCES_MAX distinct sources (test_src is one) */
    static sluice_metrics_family many_f[SLUICE_METRICS_SOURCES_MAX + 1];
    static sluice_metrics_source many[SLUICE_METRICS_SOURCES_MAX + 1];
    static char names[SLUICE_METRICS_SOURCES_MAX + 1][32];
    static uint64_t objs[SLUICE_METRICS_SOURCES_MAX + 1][3];
    for (int i = 0; i <= SLUICE_METRICS_SOURCES_MAX; i++) {
        snprintf(names[i], sizeof names[i], "sluice_many%d_total", i);
        many_f[i] = (sluice_metrics_family){names[i], "counter", "many"};
        many[i] = (sluice_metrics_source){"thing", &many_f[i], 1, src_write};
        int rc = sluice_metrics_add_source(m, "o", objs[i], &many[i]);
        assert_int_equal(rc, i < SLUICE_METRICS_SOURCES_MAX - 1 ? 0 : SLUICE_EFULL);
    }
    /* a source already known still takes objects */
    assert_int_equal(sluice_metrics_add_source(m, "c", a, &test_src), 0);
    got = render(m);
    check_grammar(got);
    free(got);

    sluice_metrics_free(m);
    sluice_limiter_free(lim);
}

static void test_concurrent(void **state)
{
    (void)state;
    char err[128];
    shared s;
    memset(&s, 0, sizeof s);
    s.lim = sluice_limiter_new("token-bucket 1000/s", err, sizeof err);
    s.tab = sluice_table_new("fixed-window 100/s", 64, err, sizeof err);
    s.m = sluice_metrics_new();
    assert_non_null(s.lim);
    assert_non_null(s.tab);
    assert_non_null(s.m);
    assert_int_equal(sluice_metrics_add_limiter(s.m, "lim", s.lim), 0);
    assert_int_equal(sluice_metrics_add_table(s.m, "tab", s.tab), 0);
    pthread_t d[2], c;
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&d[i], NULL, decider, &s), 0);
    assert_int_equal(pthread_create(&c, NULL, churner, &s), 0);
    static char buf[1 << 16];
    uint64_t last = 0;
    for (int i = 0; i < 300; i++) {
        size_t need;
        assert_int_equal(sluice_metrics_write(s.m, buf, sizeof buf, &need), 0);
        check_grammar(buf);
        uint64_t v = sample_l(buf, "sluice_requests_total", "lim", "allowed") +
                     sample_l(buf, "sluice_requests_total", "lim", "denied");
        assert_true(v >= last); /* a counter never goes down */
        last = v;
    }
    for (int i = 0; i < 2; i++) pthread_join(d[i], NULL);
    atomic_store(&s.stop, true);
    pthread_join(c, NULL);
    char *text = render(s.m);
    uint64_t ok = sample_l(text, "sluice_requests_total", "lim", "allowed") +
                  sample_l(text, "sluice_requests_total", "tab", "allowed");
    uint64_t no = sample_l(text, "sluice_requests_total", "lim", "denied") +
                  sample_l(text, "sluice_requests_total", "tab", "denied");
    assert_int_equal(ok, atomic_load(&s.decided_ok));
    assert_int_equal(no, atomic_load(&s.decided_no));
    assert_int_equal(ok + no, 2 * 2 * 200000);
    free(text);
    sluice_metrics_free(s.m);
    sluice_table_free(s.tab);
    sluice_limiter_free(s.lim);
}

/* A table of concurrency limits' gauges: the permits all its keys hold,
 * its N (after a change in place too) and its keys; valid for the tools. */
static void test_concurrency_table_gauges(void **state)
{
    (void)state;
    char err[128];
    sluice_concurrency_table *t = sluice_concurrency_table_new("concurrency 3", 8, err, sizeof err);
    sluice_limiter *l = sluice_limiter_new("token-bucket 1/s", err, sizeof err);
    assert_non_null(t);
    assert_non_null(l);
    sluice_metrics *m = sluice_metrics_new();
    assert_int_equal(sluice_metrics_add_limiter(m, "api", l), 0);
    assert_int_equal(sluice_metrics_add_concurrency_table(m, "api", t), SLUICE_EINVAL); /* name taken */
    assert_int_equal(sluice_metrics_add_concurrency_table(m, "perclient", t), 0);
    sluice_permit a, b;
    assert_true(sluice_concurrency_table_acquire_at(t, "x", 1, 2, 0, &a, NULL));
    assert_true(sluice_concurrency_table_acquire_at(t, "y", 1, 3, 0, &b, NULL));
    char buf[8192];
    assert_int_equal(sluice_metrics_write(m, buf, sizeof buf, NULL), 0);
    assert_non_null(strstr(buf, "sluice_concurrency_held{limit=\"perclient\"} 5\n"));
    assert_non_null(strstr(buf, "sluice_concurrency_limit{limit=\"perclient\"} 3\n"));
    assert_non_null(strstr(buf, "sluice_table_keys{limit=\"perclient\"} 2\n"));
    assert_null(strstr(buf, "sluice_concurrency_waiting{limit=\"perclient\"}"));
    check_tools(buf);
    assert_int_equal(sluice_concurrency_table_reconfigure_at(t, "concurrency 1", 1, err, sizeof err), 0);
    assert_int_equal(sluice_permit_release_at(&b, 2), 0);
    assert_int_equal(sluice_metrics_write(m, buf, sizeof buf, NULL), 0);
    assert_non_null(strstr(buf, "sluice_concurrency_held{limit=\"perclient\"} 2\n"));
    assert_non_null(strstr(buf, "sluice_concurrency_limit{limit=\"perclient\"} 1\n"));
    assert_int_equal(sluice_metrics_remove(m, t), 0);
    assert_int_equal(sluice_metrics_write(m, buf, sizeof buf, NULL), 0);
    assert_null(strstr(buf, "perclient"));
    assert_int_equal(sluice_permit_release_at(&a, 3), 0);
    sluice_metrics_free(m);
    sluice_concurrency_table_free(t);
    sluice_limiter_free(l);
}

/* A shared region of concurrency limits: its gauges are the permits every
 * process holds over all keys (a child's that died among them, until a
 * sweep gives them back), N, the keys and the blocked acquirers; its
 * counter the permits recovered from the dead child -- all against the
 * test's own tally; promtool and the Python client accept the text; a
 * second handle of the region, in another registry, writes the same. */
static void test_concurrency_region_gauges(void **state)
{
    (void)state;
    char err[256] = "";
    const size_t n = sluice_concurrency_region_size("concurrency 3", 16, err, sizeof err);
    assert_true(n > 0);
    void *mem = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(mem != MAP_FAILED);
    sluice_concurrency_region *r =
        sluice_concurrency_region_attach(mem, n, "concurrency 3", 16, err, sizeof err);
    sluice_concurrency_region *r2 =
        sluice_concurrency_region_attach(mem, n, "concurrency 3", 16, err, sizeof err);
    sluice_limiter *lim = sluice_limiter_new("token-bucket 1/s", err, sizeof err);
    if (!r || !r2 || !lim) fail_msg("%s", err);
    sluice_metrics *m = sluice_metrics_new(), *m2 = sluice_metrics_new();
    assert_non_null(m);
    assert_non_null(m2);
    assert_int_equal(sluice_metrics_add_limiter(m, "api", lim), 0);
    assert_int_equal(sluice_metrics_add_concurrency_region(m, "api", r), SLUICE_EINVAL); /* name taken */
    assert_int_equal(sluice_metrics_add_concurrency_region(NULL, "edge", r), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_concurrency_region(m, NULL, r), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_concurrency_region(m, "edge", NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_metrics_add_concurrency_region(m, "edge", r), 0);
    assert_int_equal(sluice_metrics_add_concurrency_region(m, "again", r), SLUICE_EINVAL); /* added */
    assert_int_equal(sluice_metrics_remove(m, lim), 0);
    assert_int_equal(sluice_metrics_add_concurrency_region(m2, "edge", r2), 0);

    sluice_region_permit x, y, z;
    assert_true(sluice_concurrency_region_acquire_at(r, "x", 1, 2, 1, &x, NULL));
    assert_true(sluice_concurrency_region_acquire_at(r, "y", 1, 3, 1, &y, NULL));
    int fds[2], ws;
    assert_int_equal(pipe(fds), 0);
    pid_t c = fork(); /* holds 1 of z, then exits without releasing it */
    assert_true(c >= 0);
    if (c == 0) {
        sluice_region_permit pm;
        const bool ok = sluice_concurrency_region_acquire_at(r, "z", 1, 1, 1, &pm, NULL);
        _exit(ok && write(fds[1], "h", 1) == 1 ? 0 : 1);
    }
    assert_int_equal(waitpid(c, &ws, 0), c);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    char *buf = render(m);
    static const char *const held[] = {
        "# TYPE sluice_table_keys gauge\nsluice_table_keys{limit=\"edge\"} 3\n",
        "# TYPE sluice_concurrency_held gauge\nsluice_concurrency_held{limit=\"edge\"} 6\n",
        "sluice_concurrency_limit{limit=\"edge\"} 3\n",
        "sluice_concurrency_waiting{limit=\"edge\"} 0\n",
        ("# TYPE sluice_concurrency_recovered_permits_total counter\n"
         "sluice_concurrency_recovered_permits_total{limit=\"edge\"} 0\n"),
    };
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++)
        if (!strstr(buf, held[i])) fail_msg("no %s in:\n%s", held[i], buf);
    free(buf);
    /* z is full for 3: the sweep gives the dead child's 1 back */
    assert_true(sluice_concurrency_region_acquire_at(r2, "z", 1, 3, 2, &z, NULL));
    buf = render(m);
    static const char *const swept[] = {
        "sluice_table_keys{limit=\"edge\"} 3\n",
        "sluice_concurrency_held{limit=\"edge\"} 8\n",
        "sluice_concurrency_recovered_permits_total{limit=\"edge\"} 1\n",
    };
    for (size_t i = 0; i < sizeof swept / sizeof swept[0]; i++)
        if (!strstr(buf, swept[i])) fail_msg("no %s in:\n%s", swept[i], buf);
    char msg[256];
    const int crc = tu_check_exposition(buf, msg, sizeof msg);
    if (crc == 1) fail_msg("exposition refused: %s\n%s", msg, buf);
    if (crc == 2) print_message("promtool or the Python client missing (%s): not checked\n", msg);
    char *buf2 = render(m2); /* the other handle: the same numbers */
    assert_string_equal(buf, buf2);
    free(buf2);
    free(buf);
    assert_int_equal(sluice_region_permit_release_at(&x, 3), 0);
    assert_int_equal(sluice_region_permit_release_at(&y, 3), 0);
    assert_int_equal(sluice_region_permit_release_at(&z, 3), 0);
    buf = render(m2);
    assert_non_null(strstr(buf, "sluice_concurrency_held{limit=\"edge\"} 0\n"));
    assert_non_null(strstr(buf, "sluice_table_keys{limit=\"edge\"} 3\n")); /* held, holding nothing */
    assert_non_null(strstr(buf, "sluice_concurrency_recovered_permits_total{limit=\"edge\"} 1\n"));
    free(buf);
    assert_int_equal(sluice_metrics_remove(m, r), 0);
    buf = render(m);
    assert_string_equal(buf, "");
    free(buf);
    close(fds[0]);
    close(fds[1]);
    sluice_metrics_free(m);
    sluice_metrics_free(m2);
    sluice_limiter_free(lim);
    sluice_concurrency_region_free(r);
    sluice_concurrency_region_free(r2);
    munmap(mem, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_text),
        cmocka_unit_test(test_empty_and_partial),
        cmocka_unit_test(test_async_gauges),
        cmocka_unit_test(test_counts_match_decisions),
        cmocka_unit_test(test_evictions),
        cmocka_unit_test(test_short_buffer),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_which_limit),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_remove),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_concurrent),
        cmocka_unit_test(test_async_wait_histogram),
        cmocka_unit_test(test_async_wait_window),
        cmocka_unit_test(test_blocking_wait_histogram),
        cmocka_unit_test(test_blocking_wait_threads),
        cmocka_unit_test(test_sources),
        cmocka_unit_test(test_concurrency_gauges),
        cmocka_unit_test(test_concurrency_table_gauges),
        cmocka_unit_test(test_which_limit_region),
        cmocka_unit_test(test_concurrency_region_gauges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
