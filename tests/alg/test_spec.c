/* test_spec.c -- the limit-spec grammar (docs/decisions.md section 2) through the
 * public API: sluice_spec_check(), sluice_limiter_new(), sluice_table_new(),
 * sluice_limiter_spec_format() and sluice_strerror().
 *
 *  - good specs: each is accepted, its canonical form is the one in the
 *    table (period in its largest whole unit, count omitted when 1, options
 *    only when not default, in the order burst, capacity, slots, nodelay),
 *    and parse -> format -> parse -> format is the identity; the limiter
 *    made from the canonical form decides exactly as the original one;
 *  - bad specs: each is refused (NULL, negative code) with a one-line
 *    message that names the offending token;
 *  - the error buffer: NUL-terminated whatever errlen (1, 2, 5), never
 *    written beyond errlen, errlen 0 with err NULL is fine;
 *  - sluice_limiter_spec_format() with a buffer too small: SLUICE_ENOSPC and a
 *    NUL-terminated prefix, nothing written beyond buflen;
 *  - sluice_strerror() for every code and for unknown ones;
 *  - the parsed view (sluice_spec_parse(), sluice_limiter_spec_get()): for
 *    every algorithm and option, the values written out by hand in a table
 *    (defaults filled in), the same from a limiter and from the canonical
 *    form; a bad spec is refused with the same code and message as
 *    sluice_spec_check() and a zeroed view; sluice_algorithm_name() for
 *    every algorithm and for values that are none.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "sluice.h"
#include "testutil.h"

#define CANARY 'Z'

/* ------------------------------------------------------------------------ */
/* Tables                                                                    */

struct good_spec {
    const char *spec;
    const char *canon;
};

static const struct good_spec good_specs[] = {
    /* each algorithm, plain */
    {"fixed-window 10/s", "fixed-window 10/s"},
    {"sliding-log 10/s", "sliding-log 10/s"},
    {"sliding-wheel 10/s", "sliding-wheel 10/s"},
    {"sliding-approx 10/s", "sliding-approx 10/s"},
    {"token-bucket 10/s", "token-bucket 10/s"},
    {"leaky-bucket 10/s", "leaky-bucket 10/s"},
    /* the contract's examples */
    {"fixed-window 100/s", "fixed-window 100/s"},
    {"fixed-window 100/10s", "fixed-window 100/10s"},
    {"sliding-log 5/250ms", "sliding-log 5/250ms"},
    {"token-bucket 1/d", "token-bucket 1/d"},
    /* a count of 1 is omitted */
    {"token-bucket 1/1d", "token-bucket 1/d"},
    {"fixed-window 7/1s", "fixed-window 7/s"},
    {"fixed-window 1/1ns", "fixed-window 1/ns"},
    /* every unit, and the largest whole unit */
    {"fixed-window 1/ns", "fixed-window 1/ns"},
    {"fixed-window 1/1000ns", "fixed-window 1/us"},
    {"fixed-window 1/2500ns", "fixed-window 1/2500ns"},
    {"fixed-window 10/2500000ns", "fixed-window 10/2500us"},
    {"fixed-window 10/us", "fixed-window 10/us"},
    {"fixed-window 10/1000us", "fixed-window 10/ms"},
    {"fixed-window 10/1000000us", "fixed-window 10/s"},
    {"fixed-window 10/1500us", "fixed-window 10/1500us"},
    {"fixed-window 10/1000ms", "fixed-window 10/s"},
    {"fixed-window 10/1001ms", "fixed-window 10/1001ms"},
    {"fixed-window 10/1000000ns", "fixed-window 10/ms"},
    {"fixed-window 10/60s", "fixed-window 10/min"},
    {"fixed-window 10/61s", "fixed-window 10/61s"},
    {"fixed-window 10/90s", "fixed-window 10/90s"},
    {"fixed-window 10/m", "fixed-window 10/min"},
    {"fixed-window 10/1m", "fixed-window 10/min"},
    {"fixed-window 10/2m", "fixed-window 10/2min"},
    {"fixed-window 10/90m", "fixed-window 10/90min"},
    {"fixed-window 10/min", "fixed-window 10/min"},
    {"fixed-window 10/120min", "fixed-window 10/2h"},
    {"fixed-window 10/5400s", "fixed-window 10/90min"},
    {"fixed-window 10/3600s", "fixed-window 10/h"},
    {"fixed-window 10/7200s", "fixed-window 10/2h"},
    {"fixed-window 10/25h", "fixed-window 10/25h"},
    {"fixed-window 10/24h", "fixed-window 10/d"},
    {"fixed-window 10/48h", "fixed-window 10/2d"},
    {"fixed-window 10/1440min", "fixed-window 10/d"},
    {"fixed-window 10/1441min", "fixed-window 10/1441min"},
    {"fixed-window 10/86400000ms", "fixed-window 10/d"},
    {"fixed-window 10/7d", "fixed-window 10/7d"},
    /* the extremes of LIMIT and PERIOD */
    {"fixed-window 1/36500d", "fixed-window 1/36500d"},
    {"fixed-window 1/876000h", "fixed-window 1/36500d"},
    {"fixed-window 1/3153600000000000000ns", "fixed-window 1/36500d"},
    {"fixed-window 1000000000000/d", "fixed-window 1000000000000/d"},
    {"fixed-window 1000000000/s", "fixed-window 1000000000/s"},
    {"fixed-window 1000000000000/1000s", "fixed-window 1000000000000/1000s"},
    {"sliding-approx 7/3s", "sliding-approx 7/3s"},
    {"sliding-log 3/7ms", "sliding-log 3/7ms"},
    {"sliding-log 1/ns", "sliding-log 1/ns"},
    {"sliding-log 1000000000000/36500d", "sliding-log 1000000000000/36500d"},
    /* token-bucket burst */
    {"token-bucket 10/s burst=10", "token-bucket 10/s"},
    {"token-bucket 10/s burst=5", "token-bucket 10/s burst=5"},
    {"token-bucket 10/s burst=1", "token-bucket 10/s burst=1"},
    {"token-bucket 10/s burst=11", "token-bucket 10/s burst=11"},
    /* the time to fill, burst * PERIOD / LIMIT, is at most 2^63-1 ns (sluice.h) */
    {"token-bucket 1/d burst=36500", "token-bucket 1/d burst=36500"},
    {"token-bucket 1/d burst=106751", "token-bucket 1/d burst=106751"},
    {"token-bucket 10/s burst=92233720368", "token-bucket 10/s burst=92233720368"},
    /* leaky-bucket capacity and nodelay, in that order */
    {"leaky-bucket 10/s capacity=10", "leaky-bucket 10/s"},
    {"leaky-bucket 10/s capacity=5", "leaky-bucket 10/s capacity=5"},
    {"leaky-bucket 10/s nodelay", "leaky-bucket 10/s nodelay"},
    {"leaky-bucket 10/s capacity=10 nodelay", "leaky-bucket 10/s nodelay"},
    {"leaky-bucket 10/s nodelay capacity=5", "leaky-bucket 10/s capacity=5 nodelay"},
    {"leaky-bucket 1/d capacity=36500", "leaky-bucket 1/d capacity=36500"},
    {"leaky-bucket 1/d capacity=106751", "leaky-bucket 1/d capacity=106751"},
    /* sliding-wheel slots: default 1-ms slots, else 1-us, else 1-ns */
    {"sliding-wheel 10/s slots=1000", "sliding-wheel 10/s"},
    {"sliding-wheel 10/s slots=10", "sliding-wheel 10/s slots=10"},
    {"sliding-wheel 10/s slots=100", "sliding-wheel 10/s slots=100"},
    {"sliding-wheel 10/s slots=1000000000", "sliding-wheel 10/s slots=1000000000"},
    {"sliding-wheel 10/s slots=1", "sliding-wheel 10/s slots=1"},
    {"sliding-wheel 5/250ms slots=250", "sliding-wheel 5/250ms"},
    {"sliding-wheel 1/ms slots=1", "sliding-wheel 1/ms"},
    {"sliding-wheel 10/1500us slots=1500", "sliding-wheel 10/1500us"},
    {"sliding-wheel 10/1500us slots=3", "sliding-wheel 10/1500us slots=3"},
    {"sliding-wheel 1/1001ns slots=1001", "sliding-wheel 1/1001ns"},
    {"sliding-wheel 1/1001ns slots=7", "sliding-wheel 1/1001ns slots=7"},
    {"sliding-wheel 1/d", "sliding-wheel 1/d"},
    {"sliding-wheel 1/d slots=86400000", "sliding-wheel 1/d"},
    {"sliding-wheel 1/d slots=24", "sliding-wheel 1/d slots=24"},
    {"sliding-wheel 1/36500d", "sliding-wheel 1/36500d"},
    /* spacing: options separated by more than one space */
    {"token-bucket  10/s   burst=5", "token-bucket 10/s burst=5"},
};

/* A bad spec and the tokens its message may name: a plain entry must appear
 * in quotes ("tok" or 'tok'); an entry starting with '~' is a substring. */
struct bad_spec {
    const char *spec;
    const char *tokens[4];
};

static const struct bad_spec bad_specs[] = {
    {"foo 10/s", {"foo"}},
    {"token_bucket 10/s", {"token_bucket"}},
    {"FIXED-WINDOW 10/s", {"FIXED-WINDOW"}},
    {"token-bucket 10/s burts=5", {"burts=5", "burts"}},
    {"fixed-window 10/s fast", {"fast"}},
    {"leaky-bucket 10/s burst=5", {"burst=5", "burst"}},
    {"token-bucket 10/s capacity=5", {"capacity=5", "capacity"}},
    {"token-bucket 10/s nodelay", {"nodelay"}},
    {"fixed-window 10/s slots=10", {"slots=10", "slots"}},
    {"fixed-window 10/s burst=5", {"burst=5", "burst"}},
    {"sliding-log 10/s slots=10", {"slots=10", "slots"}},
    {"sliding-approx 10/s capacity=5", {"capacity=5", "capacity"}},
    {"sliding-wheel 10/s nodelay", {"nodelay"}},
    {"leaky-bucket 10/s nodelay=1", {"nodelay=1", "nodelay"}},
    {"fixed-window 0/s", {"0", "0/s"}},
    {"fixed-window -5/s", {"-5", "-5/s"}},
    {"fixed-window +5/s", {"+5", "+5/s"}},
    {"fixed-window 1e3/s", {"1e3", "1e3/s"}},
    {"fixed-window 1000000000001/d", {"1000000000001", "1000000000001/d"}},
    {"fixed-window 18446744073709551616/d", {"18446744073709551616", "18446744073709551616/d"}},
    {"fixed-window /s", {"", "/s"}},
    {"fixed-window 10/0s", {"0s", "10/0s"}},
    {"fixed-window 10/0ns", {"0ns", "10/0ns"}},
    {"fixed-window 10/-1s", {"-1s", "10/-1s"}},
    {"fixed-window 10/x", {"x", "10/x"}},
    {"fixed-window 10/", {"", "10/", "~missing"}},
    {"fixed-window 10/1.5s", {"1.5s", "10/1.5s"}},
    {"fixed-window 10/S", {"S", "10/S"}},
    {"fixed-window 10/5w", {"5w", "10/5w"}},
    {"fixed-window 10/sx", {"sx", "10/sx"}},
    {"fixed-window 10/s,", {"s,", "10/s,", ","}},
    {"fixed-window 10/36501d", {"36501d", "10/36501d"}},
    {"fixed-window 10/3153600000000000001ns", {"3153600000000000001ns", "10/3153600000000000001ns"}},
    {"fixed-window 10/99999999999999999999s", {"99999999999999999999s", "10/99999999999999999999s"}},
    {"fixed-window 10", {"10", "~missing"}},
    {"fixed-window", {"fixed-window", "~missing"}},
    {"fixed-window 10/s 10/s", {"10/s"}},
    {"token-bucket 10/s burst=0", {"burst=0", "0"}},
    {"token-bucket 10/s burst=", {"burst=", ""}},
    {"token-bucket 10/s burst", {"burst"}},
    {"token-bucket 10/s burst=abc", {"burst=abc", "abc"}},
    {"token-bucket 10/s burst=-1", {"burst=-1", "-1"}},
    {"token-bucket 10/s burst=5x", {"burst=5x", "5x"}},
    {"token-bucket 10/s burst=18446744073709551616", {"burst=18446744073709551616", "18446744073709551616"}},
    {"token-bucket 1/d burst=106752", {"burst=106752", "106752", "~burst=106752"}},
    {"token-bucket 10/s burst=92233720369", {"burst=92233720369", "92233720369", "~burst=92233720369"}},
    {"leaky-bucket 10/s capacity=0", {"capacity=0", "0"}},
    {"leaky-bucket 10/s capacity=abc", {"capacity=abc", "abc"}},
    {"leaky-bucket 1/d capacity=106752", {"capacity=106752", "106752", "~capacity=106752"}},
    {"sliding-wheel 10/s slots=0", {"slots=0", "0"}},
    {"sliding-wheel 10/s slots=3", {"slots=3", "3"}},
    {"sliding-wheel 10/s slots=abc", {"slots=abc", "abc"}},
    {"sliding-wheel 1/ms slots=2000000", {"slots=2000000", "2000000"}},
    {"sliding-wheel 10/s slots=1000000001", {"slots=1000000001", "1000000001"}},
    {"token-bucket 10/s burst=5 burst=6", {"burst=6", "burst=5", "burst"}},
    {"leaky-bucket 10/s nodelay nodelay", {"nodelay"}},
    {"sliding-wheel 10/s slots=10 slots=10", {"slots=10", "slots"}},
    {"", {"", "~empty", "~missing"}},
    {"   ", {"", "   ", "~empty", "~missing"}},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

static bool names_token(const char *msg, const char *tok)
{
    char q[160];
    if (tok[0] == '~') return strstr(msg, tok + 1) != NULL;
    snprintf(q, sizeof q, "\"%s\"", tok);
    if (strstr(msg, q)) return true;
    snprintf(q, sizeof q, "'%s'", tok);
    return strstr(msg, q) != NULL;
}

static void check_names_one(const char *spec, const char *msg,
                            const char *const tokens[4])
{
    for (int i = 0; i < 4 && tokens[i]; i++)
        if (names_token(msg, tokens[i])) return;
    fail_msg("spec \"%s\": message \"%s\" names none of the expected tokens "
             "(first: \"%s\")", spec, msg, tokens[0]);
}

static void check_one_line(const char *spec, const char *msg)
{
    if (msg[0] == '\0') fail_msg("spec \"%s\": empty message", spec);
    if (strchr(msg, '\n')) fail_msg("spec \"%s\": message is not one line: \"%s\"", spec, msg);
}

/* Drive two limiters with the same requests and compare every decision. */
static void check_same_decisions(const char *a_spec, sluice_limiter *a,
                                 sluice_limiter *b)
{
    static const uint64_t steps[] = {0, 1, 999, 1000000, 250000000, 1000000000,
                                     3600000000000ULL, 86400000000000ULL,
                                     10000000000000000ULL};
    uint64_t s = 0x9e3779b97f4a7c15ULL, t = 1000;
    for (int i = 0; i < 300; i++) {
        uint64_t r = tu_xorshift64(&s);
        t += steps[r % COUNT(steps)] * ((r >> 8) % 3);
        uint64_t p = (r >> 16) % 4;
        if ((r >> 24) % 50 == 0) p = 1000000; /* sometimes more than fits */
        sluice_result ra, rb;
        memset(&ra, 0x5a, sizeof ra);
        memset(&rb, 0xa5, sizeof rb);
        bool da = sluice_try_acquire_at(a, p, t, &ra);
        bool db = sluice_try_acquire_at(b, p, t, &rb);
        if (da != db || ra.allowed != rb.allowed || ra.wait_ns != rb.wait_ns ||
            ra.remaining != rb.remaining || ra.retry_after_ns != rb.retry_after_ns)
            fail_msg("spec \"%s\" and its canonical form decide differently at "
                     "request %d (t=%llu, p=%llu)", a_spec, i,
                     (unsigned long long)t, (unsigned long long)p);
        assert_true(da == ra.allowed);
    }
}

/* ------------------------------------------------------------------------ */
/* Good specs                                                                */

static void test_good_specs_check(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(good_specs); i++) {
        const struct good_spec *g = &good_specs[i];
        char canon[64], err[256];
        memset(canon, CANARY, sizeof canon);
        err[0] = '\0';
        int rc = sluice_spec_check(g->spec, canon, sizeof canon, err, sizeof err);
        if (rc != 0) fail_msg("spec \"%s\" refused (%d): %s", g->spec, rc, err);
        if (strcmp(canon, g->canon) != 0)
            fail_msg("spec \"%s\": canonical \"%s\", want \"%s\"", g->spec, canon, g->canon);
        /* canon NULL is allowed */
        assert_int_equal(sluice_spec_check(g->spec, NULL, 0, NULL, 0), 0);
    }
}

static void test_good_specs_roundtrip(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(good_specs); i++) {
        const struct good_spec *g = &good_specs[i];
        char err[256] = "", f1[64], f2[64], c2[64];
        sluice_limiter *a = sluice_limiter_new(g->spec, err, sizeof err);
        if (!a) fail_msg("sluice_limiter_new(\"%s\") failed: %s", g->spec, err);
        int n1 = sluice_limiter_spec_format(a, f1, sizeof f1);
        if (n1 < 0) fail_msg("sluice_limiter_spec_format for \"%s\" failed: %d", g->spec, n1);
        assert_int_equal((size_t)n1, strlen(f1));
        if (strcmp(f1, g->canon) != 0)
            fail_msg("spec \"%s\": formatted \"%s\", want \"%s\"", g->spec, f1, g->canon);

        sluice_limiter *b = sluice_limiter_new(f1, err, sizeof err);
        if (!b) fail_msg("canonical spec \"%s\" refused: %s", f1, err);
        int n2 = sluice_limiter_spec_format(b, f2, sizeof f2);
        assert_int_equal(n2, n1);
        assert_string_equal(f2, f1);
        assert_int_equal(sluice_spec_check(f1, c2, sizeof c2, err, sizeof err), 0);
        assert_string_equal(c2, f1);

        /* the same limiter: identical decisions */
        check_same_decisions(g->spec, a, b);
        sluice_limiter_free(a);
        sluice_limiter_free(b);
    }
}

static void test_good_specs_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(good_specs); i++) {
        char err[256] = "";
        sluice_table *t = sluice_table_new(good_specs[i].spec, 64, err, sizeof err);
        if (!t) fail_msg("sluice_table_new(\"%s\") failed: %s", good_specs[i].spec, err);
        sluice_result r;
        assert_true(sluice_table_try_acquire_at(t, "k", 1, 0, 5, &r));
        assert_true(r.allowed);
        sluice_table_free(t);
    }
}

/* ------------------------------------------------------------------------ */
/* Bad specs                                                                 */

static void test_bad_specs(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(bad_specs); i++) {
        const struct bad_spec *b = &bad_specs[i];
        char err[512], canon[64];

        memset(err, CANARY, sizeof err);
        memset(canon, CANARY, sizeof canon);
        int rc = sluice_spec_check(b->spec, canon, sizeof canon, err, sizeof err);
        if (rc >= 0) fail_msg("spec \"%s\" accepted by sluice_spec_check (%d)", b->spec, rc);
        if (rc != SLUICE_EINVAL && rc != SLUICE_ERANGE)
            fail_msg("spec \"%s\": code %d, want SLUICE_EINVAL or SLUICE_ERANGE", b->spec, rc);
        assert_non_null(memchr(err, '\0', sizeof err));
        check_one_line(b->spec, err);
        check_names_one(b->spec, err, b->tokens);

        memset(err, CANARY, sizeof err);
        sluice_limiter *lim = sluice_limiter_new(b->spec, err, sizeof err);
        if (lim) {
            sluice_limiter_free(lim);
            fail_msg("spec \"%s\" accepted by sluice_limiter_new", b->spec);
        }
        assert_non_null(memchr(err, '\0', sizeof err));
        check_one_line(b->spec, err);
        check_names_one(b->spec, err, b->tokens);

        memset(err, CANARY, sizeof err);
        sluice_table *t = sluice_table_new(b->spec, 16, err, sizeof err);
        if (t) {
            sluice_table_free(t);
            fail_msg("spec \"%s\" accepted by sluice_table_new", b->spec);
        }
        assert_non_null(memchr(err, '\0', sizeof err));
        check_one_line(b->spec, err);
        check_names_one(b->spec, err, b->tokens);
    }
}

static void test_table_bad_max_keys(void **state)
{
    (void)state;
    char err[256];
    memset(err, CANARY, sizeof err);
    assert_null(sluice_table_new("fixed-window 10/s", 0, err, sizeof err));
    assert_non_null(memchr(err, '\0', sizeof err));
    assert_true(err[0] != '\0');
#if SIZE_MAX > 0xffffffffu
    memset(err, CANARY, sizeof err);
    assert_null(sluice_table_new("fixed-window 10/s", (size_t)0x100000001ULL, err, sizeof err));
    assert_non_null(memchr(err, '\0', sizeof err));
    assert_true(err[0] != '\0');
#endif
}

/* ------------------------------------------------------------------------ */
/* The error buffer                                                          */

/* err of errlen bytes: a NUL-terminated prefix of `full`, nothing written
 * from errlen on. */
static void check_truncated(const char *what, const char *buf, size_t buflen,
                            size_t len, const char *full)
{
    const char *nul = memchr(buf, '\0', len);
    if (!nul) fail_msg("%s, %zu bytes: not NUL-terminated", what, len);
    size_t n = (size_t)(nul - buf);
    if (strncmp(buf, full, n) != 0)
        fail_msg("%s, %zu bytes: \"%s\" is not a prefix of \"%s\"", what, len, buf, full);
    for (size_t i = len; i < buflen; i++)
        if (buf[i] != CANARY) fail_msg("%s, %zu bytes: byte %zu written", what, len, i);
}

static void test_err_tiny_buffers(void **state)
{
    (void)state;
    static const char *const specs[] = {"foo 10/s", "token-bucket 10/s burts=5",
                                        "fixed-window 0/s", ""};
    static const size_t lens[] = {1, 2, 5};
    for (size_t s = 0; s < COUNT(specs); s++) {
        char full[512];
        assert_true(sluice_spec_check(specs[s], NULL, 0, full, sizeof full) < 0);
        assert_true(strlen(full) > 5);
        for (size_t l = 0; l < COUNT(lens); l++) {
            char err[32];
            memset(err, CANARY, sizeof err);
            assert_true(sluice_spec_check(specs[s], NULL, 0, err, lens[l]) < 0);
            check_truncated("sluice_spec_check", err, sizeof err, lens[l], full);

            memset(err, CANARY, sizeof err);
            assert_null(sluice_limiter_new(specs[s], err, lens[l]));
            check_truncated("sluice_limiter_new", err, sizeof err, lens[l], full);

            memset(err, CANARY, sizeof err);
            assert_null(sluice_table_new(specs[s], 8, err, lens[l]));
            check_truncated("sluice_table_new", err, sizeof err, lens[l], full);
        }
        /* errlen 0: nothing written, with err NULL or not */
        char err[8];
        memset(err, CANARY, sizeof err);
        assert_null(sluice_limiter_new(specs[s], err, 0));
        assert_true(sluice_spec_check(specs[s], NULL, 0, err, 0) < 0);
        assert_null(sluice_table_new(specs[s], 8, err, 0));
        for (size_t i = 0; i < sizeof err; i++) assert_int_equal(err[i], CANARY);
        assert_null(sluice_limiter_new(specs[s], NULL, 0));
        assert_true(sluice_spec_check(specs[s], NULL, 0, NULL, 0) < 0);
        assert_null(sluice_table_new(specs[s], 8, NULL, 0));
    }
}

/* ------------------------------------------------------------------------ */
/* sluice_limiter_spec_format with small buffers                                    */

static void test_format_small_buffers(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(good_specs); i++) {
        sluice_limiter *lim = sluice_limiter_new(good_specs[i].spec, NULL, 0);
        assert_non_null(lim);
        const char *canon = good_specs[i].canon;
        size_t len = strlen(canon);
        char buf[80];
        for (size_t bl = 0; bl <= len + 1; bl++) {
            memset(buf, CANARY, sizeof buf);
            int rc = sluice_limiter_spec_format(lim, buf, bl);
            if (bl <= len) {
                if (rc != SLUICE_ENOSPC)
                    fail_msg("sluice_limiter_spec_format(\"%s\", %zu bytes) = %d, want SLUICE_ENOSPC",
                             canon, bl, rc);
                if (bl > 0) check_truncated("sluice_limiter_spec_format", buf, sizeof buf, bl, canon);
                else assert_int_equal(buf[0], CANARY);
            } else {
                assert_int_equal(rc, (int)len);
                assert_string_equal(buf, canon);
                for (size_t k = bl; k < sizeof buf; k++) assert_int_equal(buf[k], CANARY);
            }
        }
        /* the canonical form through sluice_spec_check with a small buffer:
         * never written beyond canonlen, always NUL-terminated */
        for (size_t bl = 1; bl <= len; bl++) {
            memset(buf, CANARY, sizeof buf);
            int rc = sluice_spec_check(good_specs[i].spec, buf, bl, NULL, 0);
            if (rc != 0 && rc != SLUICE_ENOSPC)
                fail_msg("sluice_spec_check(\"%s\", canonlen %zu) = %d", canon, bl, rc);
            check_truncated("sluice_spec_check canon", buf, sizeof buf, bl, canon);
        }
        sluice_limiter_free(lim);
    }
}

/* SLUICE_SPEC_MAX bytes always suffice (sluice.h).  The longest canonical
 * forms: LIMIT 10^12 (13 digits), a PERIOD of 19 digits of ns, and a
 * non-default option as long as the bounds allow.  Every one of these is a
 * rate the contract requires (about 0.3 per second), so each must be
 * accepted and must format in SLUICE_SPEC_MAX. */
static void test_format_max_suffices(void **state)
{
    (void)state;
    static const char *const longest[] = {
        "sliding-approx 1000000000000/3153599999999999999ns",
        "sliding-wheel 1000000000000/3153599999999999998ns slots=1576799999999999999",
        "leaky-bucket 1000000000000/3153599999999999999ns capacity=999999999999 nodelay",
        "token-bucket 1000000000000/3153599999999999999ns burst=999999999999",
        "leaky-bucket 1000000000000/ns capacity=18446744073709551615 nodelay",
        "leaky-bucket 1000000000000/3153599999999999999ns capacity=2924712086775 nodelay",
    };
    int too_long = 0;
    for (size_t i = 0; i < COUNT(longest); i++) {
        char buf[SLUICE_SPEC_MAX], big[256], canon[256], err[256] = "";
        sluice_limiter *lim = sluice_limiter_new(longest[i], err, sizeof err);
        if (!lim) fail_msg("\"%s\" refused: %s", longest[i], err);
        int n = sluice_limiter_spec_format(lim, big, sizeof big);
        assert_true(n > 0);
        assert_string_equal(big, longest[i]);
        assert_int_equal(sluice_spec_check(longest[i], canon, sizeof canon, err, sizeof err), 0);
        assert_string_equal(canon, longest[i]);
        int rc = sluice_limiter_spec_format(lim, buf, sizeof buf);
        sluice_limiter_free(lim);
        if (rc < 0) {
            print_message("\"%s\" (%d bytes): SLUICE_SPEC_MAX bytes did not suffice (%d)\n", longest[i], n, rc);
            too_long++;
        }
    }
    if (too_long) fail_msg("%d canonical specs need more than the SLUICE_SPEC_MAX bytes sluice.h promises", too_long);
}

/* ------------------------------------------------------------------------ */
/* sluice_strerror, sluice_version                                           */

static void test_strerror(void **state)
{
    (void)state;
    static const int codes[] = {SLUICE_OK, SLUICE_EINVAL, SLUICE_ENOMEM,
                                SLUICE_ERANGE, SLUICE_EFULL, SLUICE_ENOSPC,
                                SLUICE_ENOENT, SLUICE_EBUSY, SLUICE_ETIMEDOUT,
                                SLUICE_EBACKEND, SLUICE_ECANCELED};
    for (size_t i = 0; i < COUNT(codes); i++) {
        const char *m = sluice_strerror(codes[i]);
        assert_non_null(m);
        assert_true(m[0] != '\0');
        assert_null(strchr(m, '\n'));
        if (strcmp(m, "unknown error") == 0)
            fail_msg("code %d reported as unknown", codes[i]);
        for (size_t j = 0; j < i; j++)
            if (strcmp(m, sluice_strerror(codes[j])) == 0)
                fail_msg("codes %d and %d share the message \"%s\"", codes[i], codes[j], m);
    }
    static const int unknown[] = {SLUICE_ECANCELED - 1, -99, 1, 42, INT_MIN, INT_MAX};
    for (size_t i = 0; i < COUNT(unknown); i++) {
        const char *m = sluice_strerror(unknown[i]);
        assert_non_null(m);
        assert_string_equal(m, "unknown error");
    }
    assert_string_equal(sluice_version(), SLUICE_VERSION_STRING);
}

/* Regression (issue 9, defect 10): a reason is always one printable line:
 * control bytes of the offending token are written as \xNN. */
static void test_err_control_bytes(void **state)
{
    (void)state;
    static const char *const specs[] = {"token-bucket 10/s\nburst=5", "token\r-bucket 1/s",
                                        "token-bucket 1/s burst=\x01\x7f", "fixed-window 1/\ts\x1b[2J"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        char err[256];
        assert_int_not_equal(sluice_spec_check(specs[i], NULL, 0, err, sizeof err), 0);
        assert_true(strlen(err) > 0);
        for (const char *p = err; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
                fail_msg("spec %zu: control byte 0x%02x in \"%s\"", i, (unsigned char)*p, err);
    }
    char err[256];
    assert_null(sluice_limiter_new("token-bucket 1/s\nburst=2", err, sizeof err));
    assert_string_equal(err, "bad period \"s\\x0aburst=2\" in \"1/s\\x0aburst=2\": expected [N]UNIT with N >= 1 and UNIT one of ns us ms s m min h d");
    /* truncation never splits an escape */
    char small[8];
    assert_null(sluice_limiter_new("\n\n\n\n", small, sizeof small));
    assert_true(strlen(small) < sizeof small);
}

/* ------------------------------------------------------------------------ */
/* The parsed view                                                           */

#define S_ 1000000000ULL
#define MS_ 1000000ULL

struct info_case {
    const char *spec;
    int algorithm, clock;
    uint64_t limit, period_ns, capacity, slots;
    bool nodelay;
};

/* The expected values, worked out by hand from the grammar (docs/spec.md):
 * capacity is burst=/capacity= or LIMIT; sliding-wheel's default slots are
 * 1 ms when PERIOD is whole ms, else 1 us when whole us, else 1 ns. */
static const struct info_case info_cases[] = {
    {"fixed-window 100/s", SLUICE_ALG_FIXED_WINDOW, SLUICE_CLOCK_MONOTONIC, 100, S_, 100, 0, false},
    {"fixed-window 1/36500d clock=coarse", SLUICE_ALG_FIXED_WINDOW, SLUICE_CLOCK_COARSE, 1,
     36500ULL * 86400 * S_, 1, 0, false},
    {"sliding-log 5/10ms", SLUICE_ALG_SLIDING_LOG, SLUICE_CLOCK_MONOTONIC, 5, 10 * MS_, 5, 0, false},
    {"sliding-log\t7/3us  clock=monotonic", SLUICE_ALG_SLIDING_LOG, SLUICE_CLOCK_MONOTONIC, 7, 3000,
     7, 0, false},
    {"sliding-wheel 100/s", SLUICE_ALG_SLIDING_WHEEL, SLUICE_CLOCK_MONOTONIC, 100, S_, 100, 1000, false},
    {"sliding-wheel 100/m slots=60", SLUICE_ALG_SLIDING_WHEEL, SLUICE_CLOCK_MONOTONIC, 100, 60 * S_,
     100, 60, false},
    {"sliding-wheel 3/1500us", SLUICE_ALG_SLIDING_WHEEL, SLUICE_CLOCK_MONOTONIC, 3, 1500000, 3, 1500,
     false},
    {"sliding-wheel 3/1501ns clock=coarse", SLUICE_ALG_SLIDING_WHEEL, SLUICE_CLOCK_COARSE, 3, 1501, 3,
     1501, false},
    {"sliding-wheel 10/h slots=3600", SLUICE_ALG_SLIDING_WHEEL, SLUICE_CLOCK_MONOTONIC, 10,
     3600 * S_, 10, 3600, false},
    {"sliding-approx 1000000000000/min", SLUICE_ALG_SLIDING_APPROX, SLUICE_CLOCK_MONOTONIC,
     1000000000000ULL, 60 * S_, 1000000000000ULL, 0, false},
    {"token-bucket 10/s", SLUICE_ALG_TOKEN_BUCKET, SLUICE_CLOCK_MONOTONIC, 10, S_, 10, 0, false},
    {"token-bucket 10/s burst=1", SLUICE_ALG_TOKEN_BUCKET, SLUICE_CLOCK_MONOTONIC, 10, S_, 1, 0, false},
    {"token-bucket 1/d burst=365 clock=coarse", SLUICE_ALG_TOKEN_BUCKET, SLUICE_CLOCK_COARSE, 1,
     86400 * S_, 365, 0, false},
    {"leaky-bucket 50/2s", SLUICE_ALG_LEAKY_BUCKET, SLUICE_CLOCK_MONOTONIC, 50, 2 * S_, 50, 0, false},
    {"leaky-bucket 50/s capacity=5", SLUICE_ALG_LEAKY_BUCKET, SLUICE_CLOCK_MONOTONIC, 50, S_, 5, 0,
     false},
    {"leaky-bucket 50/s nodelay", SLUICE_ALG_LEAKY_BUCKET, SLUICE_CLOCK_MONOTONIC, 50, S_, 50, 0, true},
    {"leaky-bucket 50/s nodelay capacity=80 clock=coarse", SLUICE_ALG_LEAKY_BUCKET,
     SLUICE_CLOCK_COARSE, 50, S_, 80, 0, true},
};

static void check_info(const char *how, const struct info_case *c, const sluice_spec_info *in)
{
    if (in->algorithm != c->algorithm || in->clock != c->clock || in->limit != c->limit ||
        in->period_ns != c->period_ns || in->capacity != c->capacity || in->slots != c->slots ||
        in->nodelay != c->nodelay)
        fail_msg("%s \"%s\": got alg %d clock %d limit %llu period %llu capacity %llu slots "
                 "%llu nodelay %d; want %d %d %llu %llu %llu %llu %d", how, c->spec,
                 in->algorithm, in->clock, (unsigned long long)in->limit,
                 (unsigned long long)in->period_ns, (unsigned long long)in->capacity,
                 (unsigned long long)in->slots, in->nodelay, c->algorithm, c->clock,
                 (unsigned long long)c->limit, (unsigned long long)c->period_ns,
                 (unsigned long long)c->capacity, (unsigned long long)c->slots, c->nodelay);
    for (size_t i = 0; i < sizeof in->reserved / sizeof in->reserved[0]; i++)
        if (in->reserved[i]) fail_msg("%s \"%s\": reserved[%zu] = %llu", how, c->spec, i,
                                      (unsigned long long)in->reserved[i]);
}

static void test_spec_info(void **state)
{
    (void)state;
    bool seen_alg[6] = {false};
    for (size_t i = 0; i < sizeof info_cases / sizeof info_cases[0]; i++) {
        const struct info_case *c = &info_cases[i];
        sluice_spec_info in;
        char err[128];
        memset(&in, 0x5a, sizeof in);
        int rc = sluice_spec_parse(c->spec, &in, err, sizeof err);
        if (rc != 0) fail_msg("sluice_spec_parse(\"%s\") = %d: %s", c->spec, rc, err);
        check_info("sluice_spec_parse", c, &in);
        seen_alg[c->algorithm] = true;

        sluice_limiter *lim = sluice_limiter_new(c->spec, err, sizeof err);
        assert_non_null(lim);
        memset(&in, 0x5a, sizeof in);
        sluice_limiter_spec_get(lim, &in);
        check_info("sluice_limiter_spec_get", c, &in);

        /* the canonical form says the same */
        char canon[SLUICE_SPEC_MAX];
        assert_true(sluice_limiter_spec_format(lim, canon, sizeof canon) > 0);
        memset(&in, 0x5a, sizeof in);
        assert_int_equal(sluice_spec_parse(canon, &in, NULL, 0), 0);
        check_info("sluice_spec_parse(canonical form)", c, &in);
        assert_string_equal(sluice_algorithm_name(in.algorithm),
                            c->spec[0] == 'f' ? "fixed-window"
                            : c->spec[0] == 't' ? "token-bucket"
                            : c->spec[0] == 'l' ? "leaky-bucket"
                            : strncmp(c->spec, "sliding-log", 11) == 0 ? "sliding-log"
                            : strncmp(c->spec, "sliding-wheel", 13) == 0 ? "sliding-wheel"
                                                                          : "sliding-approx");
        sluice_limiter_free(lim);
    }
    for (int a = 0; a < 6; a++) assert_true(seen_alg[a]);
}

static void test_spec_info_bad(void **state)
{
    (void)state;
    static const char *const bad[] = {
        NULL, "", "token-bucket", "token-bucket 0/s", "token-bucket 10/s burst=0",
        "sliding-wheel 10/s slots=7", "fixed-window 10/s burst=3", "leaky-bucket 1/s nodelay=1",
        "token-bucket 10/s clock=fast", "token-bucket 10/s\nburst=2",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sluice_spec_info in, zero;
        memset(&in, 0x5a, sizeof in);
        memset(&zero, 0, sizeof zero);
        char err[128], err2[128];
        int rc = sluice_spec_parse(bad[i], &in, err, sizeof err);
        int rc2 = sluice_spec_check(bad[i], NULL, 0, err2, sizeof err2);
        if (rc >= 0) fail_msg("sluice_spec_parse(\"%s\") accepted", bad[i] ? bad[i] : "(null)");
        assert_int_equal(rc, rc2);
        assert_string_equal(err, err2);
        assert_true(err[0] != '\0');
        assert_memory_equal(&in, &zero, sizeof in);
    }
}

static void test_algorithm_name(void **state)
{
    (void)state;
    assert_string_equal(sluice_algorithm_name(SLUICE_ALG_FIXED_WINDOW), "fixed-window");
    assert_string_equal(sluice_algorithm_name(SLUICE_ALG_SLIDING_LOG), "sliding-log");
    assert_string_equal(sluice_algorithm_name(SLUICE_ALG_SLIDING_WHEEL), "sliding-wheel");
    assert_string_equal(sluice_algorithm_name(SLUICE_ALG_SLIDING_APPROX), "sliding-approx");
    assert_string_equal(sluice_algorithm_name(SLUICE_ALG_TOKEN_BUCKET), "token-bucket");
    assert_string_equal(sluice_algorithm_name(SLUICE_ALG_LEAKY_BUCKET), "leaky-bucket");
    assert_null(sluice_algorithm_name(-1));
    assert_null(sluice_algorithm_name(6));
    assert_null(sluice_algorithm_name(INT_MAX));
    assert_null(sluice_algorithm_name(INT_MIN));
    /* each name is a spec's first word */
    for (int a = 0; a < 6; a++) {
        char spec[64];
        snprintf(spec, sizeof spec, "%s 1/s", sluice_algorithm_name(a));
        sluice_spec_info in;
        assert_int_equal(sluice_spec_parse(spec, &in, NULL, 0), 0);
        assert_int_equal(in.algorithm, a);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_specs_check),
        cmocka_unit_test(test_good_specs_roundtrip),
        cmocka_unit_test(test_good_specs_table),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_table_bad_max_keys),
        cmocka_unit_test(test_err_tiny_buffers),
        cmocka_unit_test(test_format_small_buffers),
        cmocka_unit_test(test_format_max_suffices),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_err_control_bytes),
        cmocka_unit_test(test_spec_info),
        cmocka_unit_test(test_spec_info_bad),
        cmocka_unit_test(test_algorithm_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
