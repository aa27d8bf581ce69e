/* test_attempt.c -- the composite's all-or-nothing protocol, written once
 * (src/alg/attempt.h, SLUICE__ATTEMPT), driven by a scripted path whose
 * steps write what they were asked into a log.
 *
 *   test_cases       each outcome of each step, the log and the result
 *                    worked out by hand from the protocol's text (the
 *                    header's comment): who is held, in what order, what
 *                    is stored, confirmed, settled and let go.
 *   test_random      10^5 random scripts against the rule, stated apart
 *                    from the code: each limit held is let go once, in
 *                    reverse order, after the settle; nothing is stored
 *                    unless every limit allowed, permits were asked and
 *                    prepare and take succeeded, and then every limit is,
 *                    before the settle; the result is 1 iff that, or a
 *                    confirmed probe that every limit allowed; AGAIN and
 *                    HANDOVER settle nothing.
 *
 * The composite's real paths (composite.c, limiter/hold.c,
 * table/table_hold.c) are tested against the reference model in
 * tests/composite/test_composite.c; this file checks the skeleton they
 * share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "alg/attempt.h"
#include "testutil.h"

enum { MAXN = 8 };

typedef struct script {
    size_t n;
    int hold[MAXN]; /* what hold(k) returns; after a negative one, nothing */
    bool prepare, take, confirm;
    char log[512];
} script;

static void say(script *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(script *s, const char *fmt, ...)
{
    char w[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w, sizeof w, fmt, ap);
    va_end(ap);
    if (s->log[0]) strncat(s->log, " ", sizeof s->log - strlen(s->log) - 1);
    strncat(s->log, w, sizeof s->log - strlen(s->log) - 1);
}

static int t_hold(script *s, size_t k)
{
    say(s, "h%zu", k);
    return s->hold[k];
}
static bool t_prepare(script *s)
{
    say(s, "p");
    return s->prepare;
}
static bool t_take(script *s)
{
    say(s, "t");
    return s->take;
}
static void t_store(script *s, size_t k) { say(s, "s%zu", k); }
static bool t_confirm(script *s)
{
    say(s, "c");
    return s->confirm;
}
static void t_settle(script *s, bool ok) { say(s, "S%d", ok); }
static void t_release(script *s, size_t k, bool stored) { say(s, "r%zu%s", k, stored ? "*" : ""); }

SLUICE__ATTEMPT(scripted, script, t)

static int run(script *s, uint64_t permits)
{
    s->log[0] = 0;
    return scripted(s, s->n, permits);
}

static void test_cases(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        size_t n;
        int hold[3];
        bool prepare, take, confirm;
        uint64_t permits;
        int rc;
        const char *log;
    } C[] = {
        /* every limit allows: prepared, taken, every one stored, settled
         * admitted, let go in reverse with its new state */
        {"admitted", 3, {1, 1, 1}, true, true, true, 1, 1,
         "h0 h1 h2 p t s0 s1 s2 S1 r2* r1* r0*"},
        /* one refuses: nothing prepared, taken or stored; the answers
         * confirmed together, settled refused, let go unchanged */
        {"refused", 3, {1, 0, 1}, true, true, true, 1, 0, "h0 h1 h2 c S0 r2 r1 r0"},
        {"all refuse", 3, {0, 0, 0}, true, true, true, 5, 0, "h0 h1 h2 c S0 r2 r1 r0"},
        /* a probe: nothing taken even when all allow */
        {"probe allowed", 3, {1, 1, 1}, true, true, true, 0, 1, "h0 h1 h2 c S1 r2 r1 r0"},
        {"probe refused", 3, {1, 1, 0}, true, true, true, 0, 0, "h0 h1 h2 c S0 r2 r1 r0"},
        /* a refusal that decides alone: the rest are not held, nothing
         * settled, those held let go */
        {"stop", 3, {1, SLUICE__STOP, 1}, true, true, true, 1, 0, "h0 h1 r0"},
        {"stop first", 3, {SLUICE__STOP, 1, 1}, true, true, true, 1, 0, "h0"},
        /* not a call for the path: nothing decided */
        {"handover", 3, {1, 1, SLUICE__HANDOVER}, true, true, true, 1, SLUICE__HANDOVER,
         "h0 h1 h2 r1 r0"},
        /* a hold not to be had: start over, nothing settled */
        {"again at hold", 3, {1, SLUICE__AGAIN, 1}, true, true, true, 1, SLUICE__AGAIN, "h0 h1 r0"},
        /* prepare fails: refused, nothing taken or stored, confirmed */
        {"prepare fails", 3, {1, 1, 1}, false, true, true, 1, 0, "h0 h1 h2 p c S0 r2 r1 r0"},
        /* take fails: nothing stored, nothing settled, start over */
        {"take fails", 3, {1, 1, 1}, true, false, true, 1, SLUICE__AGAIN, "h0 h1 h2 p t r2 r1 r0"},
        /* a refusal whose answers do not hold together: start over */
        {"confirm fails", 3, {1, 0, 1}, true, true, false, 1, SLUICE__AGAIN, "h0 h1 h2 c r2 r1 r0"},
        /* an admission needs no confirm: the take proves the holds */
        {"admitted, confirm would fail", 2, {1, 1}, true, true, false, 1, 1,
         "h0 h1 p t s0 s1 S1 r1* r0*"},
        {"one limit", 1, {1}, true, true, true, 2, 1, "h0 p t s0 S1 r0*"},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        script s = {.n = C[i].n, .prepare = C[i].prepare, .take = C[i].take,
                    .confirm = C[i].confirm};
        memcpy(s.hold, C[i].hold, sizeof C[i].hold);
        const int rc = run(&s, C[i].permits);
        if (rc != C[i].rc || strcmp(s.log, C[i].log) != 0)
            fail_msg("%s: got %d \"%s\", want %d \"%s\"", C[i].what, rc, s.log, C[i].rc,
                     C[i].log);
    }
}

/* The rule, checked over the log of a random script. */
static void check_log(const script *s, uint64_t permits, int rc)
{
    size_t held = 0;          /* holds asked */
    bool all = true;          /* every hold asked said 1 */
    int neg = 0;              /* a hold's negative answer */
    for (; held < s->n; held++) {
        const int v = s->hold[held];
        if (v < 0) {
            neg = v;
            break;
        }
        all &= v == 1;
    }
    const size_t asked = neg ? held + 1 : held; /* holds in the log */
    /* parse the log */
    char buf[sizeof s->log];
    memcpy(buf, s->log, sizeof buf);
    size_t nh = 0, ns = 0, nr = 0;
    int settled = -1;
    bool prepared = false, taken = false, confirmed = false, stored_all = true;
    size_t next_release = neg ? held : s->n; /* releases count down from here */
    for (char *w = strtok(buf, " "); w; w = strtok(NULL, " ")) {
        size_t k;
        switch (w[0]) {
        case 'h':
            assert_true(sscanf(w + 1, "%zu", &k) == 1 && k == nh); /* in order */
            nh++;
            break;
        case 'p': prepared = true; break;
        case 't': taken = true; break;
        case 'c': confirmed = true; break;
        case 's':
            assert_true(sscanf(w + 1, "%zu", &k) == 1 && k == ns);
            assert_int_equal(nr, 0);
            assert_int_equal(settled, -1);
            ns++;
            break;
        case 'S':
            assert_int_equal(settled, -1);
            assert_int_equal(nr, 0); /* before any release */
            settled = w[1] - '0';
            break;
        case 'r':
            assert_true(sscanf(w + 1, "%zu", &k) == 1);
            assert_true(next_release > 0 && k == next_release - 1); /* reverse, once */
            next_release--;
            nr++;
            stored_all &= (strchr(w, '*') != NULL) == (ns == s->n);
            break;
        default: fail_msg("unknown step %s", w);
        }
    }
    assert_int_equal(nh, asked);
    const bool stop = neg == SLUICE__STOP;
    /* let go: every hold that succeeded, once */
    assert_int_equal(nr, neg ? held : s->n);
    assert_true(stored_all);
    /* a negative hold: nothing else happens */
    if (neg) {
        assert_false(prepared || taken || confirmed || ns || settled != -1);
        assert_int_equal(rc, stop ? 0 : neg);
        return;
    }
    const bool commit_wanted = all && permits > 0;
    assert_int_equal(prepared, commit_wanted);
    assert_int_equal(taken, commit_wanted && s->prepare);
    const bool stores = commit_wanted && s->prepare && s->take;
    assert_int_equal(ns, stores ? s->n : 0);
    assert_int_equal(confirmed, !stores && !(commit_wanted && s->prepare && !s->take));
    if (commit_wanted && s->prepare && !s->take) {
        assert_int_equal(rc, SLUICE__AGAIN);
        assert_int_equal(settled, -1);
        return;
    }
    if (!stores && !s->confirm) {
        assert_int_equal(rc, SLUICE__AGAIN);
        assert_int_equal(settled, -1);
        return;
    }
    const int want = stores || (all && permits == 0);
    assert_int_equal(rc, want);
    assert_int_equal(settled, want);
}

static void test_random(void **state)
{
    (void)state;
    uint64_t seed = tu_env_seed();
    static const int verdicts[] = {1, 1, 1, 0, SLUICE__STOP, SLUICE__AGAIN, SLUICE__HANDOVER};
    for (int it = 0; it < 100000; it++) {
        script s = {.n = 1 + tu_splitmix64_below(&seed, MAXN)};
        for (size_t k = 0; k < s.n; k++) s.hold[k] = verdicts[tu_splitmix64_below(&seed, 7)];
        if (tu_splitmix64_below(&seed, 2))
            for (size_t k = 0; k < s.n; k++) s.hold[k] = 1; /* often all allow */
        s.prepare = tu_splitmix64_below(&seed, 4) != 0;
        s.take = tu_splitmix64_below(&seed, 4) != 0;
        s.confirm = tu_splitmix64_below(&seed, 4) != 0;
        const uint64_t permits = tu_splitmix64_below(&seed, 3);
        const int rc = run(&s, permits);
        check_log(&s, permits, rc);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
