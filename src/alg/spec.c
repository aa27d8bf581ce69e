/* spec.c -- the limit-spec grammar (docs/decisions.md section 2), parsed once.
 *
 *     ALGORITHM LIMIT/PERIOD [OPTION ...]
 *     PERIOD  = [N]UNIT, UNIT in ns us ms s m min h d   (m = min = minute)
 *     OPTION  = burst=B | capacity=C | slots=N | nodelay
 *             | clock=monotonic | clock=coarse   (any algorithm)
 *             | tz=ZONE [anchor=D]   (fixed-window: calendar windows)
 *     with tz=, PERIOD = d | w | Nmonth (N divides 12) | y; without it
 *     the calendar units w, month, y are refused (d is 86400 s)
 *
 * Tokens are separated by spaces or tabs.  Every number is plain decimal
 * digits (no sign, no exponent), checked for overflow while it is read.
 * Every refusal names the offending token, as nginx's limit_req does
 * (`invalid rate "..."`), so the hot path never parses or validates.
 *
 * Range: LIMIT 1 .. 10^12; PERIOD 1 ns .. SLUICE_MAX_PERIOD_NS (36500 d).
 * Any rate in that range is exact (the algorithms keep (LIMIT, PERIOD) as
 * integers), so no rate is refused for being too fast or too slow; the
 * buckets also refuse a burst or capacity that would take longer than
 * SLUICE_MAX_PERIOD_NS to refill or drain, which keeps every wait within
 * an int64 (time to fill at most 2^63-1 ns, about 292 years).
 *
 * Default sliding-wheel slots: 1-ms slots when PERIOD is a whole number of
 * milliseconds, else 1-µs slots when a whole number of microseconds, else
 * 1-ns slots.  Memory follows the traffic, not N (window_log.c).
 *
 * Sections and entry points:
 *   the grammar   sluice__spec_parse (rate, period, options; numbers through
 *                 sluice_parse_u64, base/text.c), sluice__spec_format,
 *                 sluice__format_no_options
 *   the view      sluice__spec_info, sluice_spec_parse, sluice_algorithm_name
 */
#include "alg/alg.h"
#include "base/text.h"
#include "base/tzif.h"
#include "alg/concurrency.h"

#include <stdio.h>
#include <string.h>

/* The algorithms, one row each (indexed by sluice__alg). */
static const sluice__alg_ops *const algs[SLUICE__ALG_COUNT] = {
    [SLUICE__FIXED_WINDOW] = &sluice__fixed_window_ops,
    [SLUICE__SLIDING_LOG] = &sluice__sliding_log_ops,
    [SLUICE__SLIDING_WHEEL] = &sluice__sliding_wheel_ops,
    [SLUICE__SLIDING_APPROX] = &sluice__sliding_approx_ops,
    [SLUICE__TOKEN_BUCKET] = &sluice__token_bucket_ops,
    [SLUICE__LEAKY_BUCKET] = &sluice__leaky_bucket_ops,
};

static const struct unit {
    const char *name;
    uint64_t ns;
} units[] = { /* largest first: the formatter picks the first that divides */
    {"d", 86400000000000ULL}, {"h", 3600000000000ULL}, {"min", 60000000000ULL},
    {"s", 1000000000ULL},     {"ms", 1000000ULL},      {"us", 1000ULL},
    {"ns", 1ULL},             {"m", 60000000000ULL}, /* parse-only alias */
};
#define N_UNITS (sizeof units / sizeof units[0])
#define N_FORMAT_UNITS 7

static bool is_digit(char c) { return c >= '0' && c <= '9'; }


/* A DURATION, [N]UNIT as a PERIOD (the concurrency limit's lease=,
 * alg/concurrency.c): 0 and *ns, SLUICE_EINVAL (malformed, or N = 0) or
 * SLUICE_ERANGE (beyond SLUICE_MAX_PERIOD_NS). */
int sluice__parse_duration(const char *p, size_t pn, uint64_t *ns)
{
    size_t dn = 0;
    while (dn < pn && is_digit(p[dn])) dn++;
    uint64_t count = 1;
    if (dn && sluice_parse_u64(p, dn, UINT64_MAX, &count) != 0) count = UINT64_MAX;
    const struct unit *u = NULL;
    for (size_t i = 0; i < N_UNITS; i++)
        if (sluice__word_is(p + dn, pn - dn, units[i].name)) u = &units[i];
    if (!u || (dn && count == 0)) return SLUICE_EINVAL;
    if (count > SLUICE_MAX_PERIOD_NS / u->ns) return SLUICE_ERANGE;
    *ns = count * u->ns;
    return 0;
}

/* ns (>= 1) as [N]UNIT in its largest whole unit; snprintf's count. */
int sluice__format_duration(uint64_t ns, char *buf, size_t buflen)
{
    const struct unit *u = &units[N_FORMAT_UNITS - 1];
    for (size_t i = 0; i < N_FORMAT_UNITS; i++)
        if (ns % units[i].ns == 0) {
            u = &units[i];
            break;
        }
    uint64_t c = ns / u->ns;
    return c == 1 ? snprintf(buf, buflen, "%s", u->name)
                  : snprintf(buf, buflen, "%llu%s", (unsigned long long)c, u->name);
}

static int parse_rate(const char *s, size_t n, sluice__profile *pf, char *err,
                      size_t errlen)
{
    const char *slash = memchr(s, '/', n);
    if (!slash) {
        sluice__errf(err, errlen, "bad rate \"%.*s\": expected LIMIT/PERIOD, e.g. 100/s", SLUICE__TOK(s, n));
        return SLUICE_EINVAL;
    }
    size_t ln = (size_t)(slash - s);
    uint64_t limit = 0;
    int prc = sluice_parse_u64(s, ln, SLUICE_MAX_LIMIT, &limit);
    if (prc != 0 || limit < 1) {
        sluice__errf(err, errlen, "bad limit \"%.*s\" in \"%.*s\": expected a whole number from 1 to 10^12",
                     SLUICE__TOK(s, ln), SLUICE__TOK(s, n));
        return prc == SLUICE_EINVAL ? SLUICE_EINVAL : SLUICE_ERANGE;
    }
    const char *p = slash + 1;
    size_t pn = n - ln - 1, dn = 0;
    while (dn < pn && is_digit(p[dn])) dn++;
    uint64_t count = 1;
    if (dn && sluice_parse_u64(p, dn, UINT64_MAX, &count) != 0) count = UINT64_MAX; /* too long */
    const struct unit *u = NULL;
    for (size_t i = 0; i < N_UNITS; i++)
        if (sluice__word_is(p + dn, pn - dn, units[i].name)) u = &units[i];
    /* the calendar units (valid with tz= only: checked after the options);
     * period_ns is then the longest such window, nominally */
    static const struct unit cal[] = {{"w", 7 * 86400000000000ULL},
                                      {"month", 31 * 86400000000000ULL},
                                      {"y", 366 * 86400000000000ULL}};
    for (size_t i = 0; !u && i < 3; i++)
        if (sluice__word_is(p + dn, pn - dn, cal[i].name)) {
            u = &cal[i];
            pf->cal_unit = (uint8_t)(SLUICE__CAL_WEEK + i);
            if (i == 1 ? count == 0 || 12 % count != 0 : count != 1) {
                sluice__errf(err, errlen, i == 1 ? "bad period \"%.*s\" in \"%.*s\": N in Nmonth must divide 12 (1 2 3 4 6 12)"
                                                 : "bad period \"%.*s\" in \"%.*s\": a calendar week or year takes no count",
                             SLUICE__TOK(p, pn), SLUICE__TOK(s, n));
                return SLUICE_EINVAL;
            }
            pf->cal_n = (uint8_t)count;
        }
    if (u && u->ns == 86400000000000ULL && count == 1 && !pf->cal_unit) pf->cal_unit = SLUICE__CAL_DAY;
    if (!u || (dn && count == 0)) {
        sluice__errf(err, errlen, "bad period \"%.*s\" in \"%.*s\": expected [N]UNIT with N >= 1 and UNIT one of ns us ms s m min h d",
                     SLUICE__TOK(p, pn), SLUICE__TOK(s, n));
        return SLUICE_EINVAL;
    }
    if (count > SLUICE_MAX_PERIOD_NS / u->ns) {
        sluice__errf(err, errlen, "bad period \"%.*s\": longer than 36500d", SLUICE__TOK(p, pn));
        return SLUICE_ERANGE;
    }
    pf->limit = limit;
    pf->period_ns = count * u->ns;
    return 0;
}

static const char *const opt_names[SLUICE__OPT_COUNT] = {
    [SLUICE__OPT_BURST] = "burst",     [SLUICE__OPT_CAPACITY] = "capacity",
    [SLUICE__OPT_SLOTS] = "slots",     [SLUICE__OPT_NODELAY] = "nodelay",
    [SLUICE__OPT_CLOCK] = "clock",     [SLUICE__OPT_TZ] = "tz",
    [SLUICE__OPT_ANCHOR] = "anchor",
};

/* The calendar's rules, once the whole spec is read: tz= makes the period
 * a calendar one (d w Nmonth y), anchor= needs months, and the calendar
 * units need tz=. */
static int calendar(sluice__profile *pf, const bool *seen, char *err, size_t errlen)
{
    if (!pf->tz) {
        if (pf->cal_unit > SLUICE__CAL_DAY) {
            sluice__errf(err, errlen, "bad period: w, Nmonth and y are calendar periods and need tz=ZONE (e.g. tz=UTC)");
            return SLUICE_EINVAL;
        }
        if (seen[SLUICE__OPT_ANCHOR]) {
            sluice__errf(err, errlen, "option anchor= needs tz=ZONE and a period of Nmonth");
            return SLUICE_EINVAL;
        }
        pf->cal_unit = SLUICE__CAL_NONE;
        pf->cal_n = 0;
        return 0;
    }
    if (pf->cal_unit == SLUICE__CAL_NONE) {
        sluice__errf(err, errlen, "option tz= needs a calendar period: d, w, Nmonth or y (e.g. 1000/d tz=UTC)");
        return SLUICE_EINVAL;
    }
    if (seen[SLUICE__OPT_ANCHOR] && pf->cal_unit != SLUICE__CAL_MONTH) {
        sluice__errf(err, errlen, "option anchor= needs a period of Nmonth");
        return SLUICE_EINVAL;
    }
    if (seen[SLUICE__OPT_CLOCK]) {
        sluice__errf(err, errlen, "option clock= does not combine with tz=: a calendar quota reads CLOCK_REALTIME");
        return SLUICE_EINVAL;
    }
    if (pf->cal_n == 0) pf->cal_n = 1;
    if (pf->anchor == 0) pf->anchor = 1;
    pf->clock = SLUICE__CLOCK_REALTIME;
    return 0;
}

int sluice__spec_parse(const char *spec, sluice__profile *pf, char *err,
                       size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!spec) {
        sluice__errf(err, errlen, "no spec (NULL)");
        return SLUICE_EINVAL;
    }
    memset(pf, 0, sizeof *pf);
    const char *s = spec;
    int ntok = 0, rc;
    sluice__opts opts = {{false}, {0}};
    bool *const seen = opts.seen;
    uint64_t *const optval = opts.val;
    sluice__word w;
    for (; sluice__next_word(&s, &w); ntok++) {
        const char *tok = w.p;
        const size_t n = w.n;
        if (ntok == 0) {
            int a = -1;
            for (int i = 0; i < SLUICE__ALG_COUNT; i++)
                if (sluice__word_is(tok, n, algs[i]->name)) a = i;
            if (a < 0 && sluice__word_is(tok, n, "concurrency")) {
                sluice__errf(err, errlen, "\"concurrency\" is not a rate limit: make it with sluice_concurrency_new (docs/spec.md)");
                return SLUICE_EINVAL;
            }
            if (a < 0) {
                sluice__errf(err, errlen, "unknown algorithm \"%.*s\": expected fixed-window, sliding-log, sliding-wheel, sliding-approx, token-bucket or leaky-bucket",
                             SLUICE__TOK(tok, n));
                return SLUICE_EINVAL;
            }
            pf->alg = (sluice__alg)a;
            pf->ops = algs[a];
        } else if (ntok == 1) {
            if ((rc = parse_rate(tok, n, pf, err, errlen)) != 0) return rc;
        } else {
            const char *eq = w.val ? w.val - 1 : NULL;
            const size_t nn = w.nname;
            int o = -1;
            for (int i = 0; i < SLUICE__OPT_COUNT; i++)
                if (sluice__word_is(tok, nn, opt_names[i])) o = i;
            if (o < 0) {
                sluice__errf(err, errlen, "unknown option \"%.*s\"", SLUICE__TOK(tok, n));
                return SLUICE_EINVAL;
            }
            if (!(pf->ops->options & SLUICE__OPT(o))) {
                sluice__errf(err, errlen, "option \"%.*s\" does not belong to %s%s", SLUICE__TOK(tok, n), pf->ops->name,
                             o == SLUICE__OPT_TZ || o == SLUICE__OPT_ANCHOR ? ": tz= and anchor= apply to fixed-window only" : "");
                return SLUICE_EINVAL;
            }
            if (seen[o]) {
                sluice__errf(err, errlen, "duplicate option \"%.*s\"", SLUICE__TOK(tok, n));
                return SLUICE_EINVAL;
            }
            seen[o] = true;
            if (o == SLUICE__OPT_NODELAY) {
                if (eq) {
                    sluice__errf(err, errlen, "option \"%.*s\" takes no value: write nodelay", SLUICE__TOK(tok, n));
                    return SLUICE_EINVAL;
                }
            } else if (o == SLUICE__OPT_CLOCK) {
                size_t vn = eq ? n - nn - 1 : 0;
                if (eq && sluice__word_is(eq + 1, vn, "coarse")) {
                    pf->clock = SLUICE__CLOCK_COARSE;
                } else if (!eq || !sluice__word_is(eq + 1, vn, "monotonic")) {
                    sluice__errf(err, errlen, "bad option \"%.*s\": expected clock=monotonic or clock=coarse",
                                 SLUICE__TOK(tok, n));
                    return SLUICE_EINVAL;
                }
            } else if (o == SLUICE__OPT_TZ) {
                if (!eq || n - nn - 1 == 0) {
                    sluice__errf(err, errlen, "bad option \"%.*s\": expected tz=ZONE, e.g. tz=Europe/Paris", SLUICE__TOK(tok, n));
                    return SLUICE_EINVAL;
                }
                if (!(pf->tz = sluice__tz_load(eq + 1, n - nn - 1, err, errlen))) return SLUICE_EINVAL;
            } else if (o == SLUICE__OPT_ANCHOR &&
                       (!eq || sluice_parse_u64(eq + 1, n - nn - 1, 31, &optval[o]) != 0 || optval[o] == 0)) {
                sluice__errf(err, errlen, "bad option \"%.*s\": expected anchor=D with D a day of the month, 1 to 31",
                             SLUICE__TOK(tok, n));
                return SLUICE_EINVAL;
            } else if (o == SLUICE__OPT_ANCHOR) {
                pf->anchor = (uint8_t)optval[o];
            } else if (!eq || sluice_parse_u64(eq + 1, n - nn - 1, UINT64_MAX, &optval[o]) != 0 || optval[o] == 0) {
                sluice__errf(err, errlen, "bad option \"%.*s\": expected %s=N with N a whole number >= 1",
                             SLUICE__TOK(tok, n), opt_names[o]);
                return SLUICE_EINVAL;
            }
        }
    }
    if (ntok == 0) {
        sluice__errf(err, errlen, "empty spec: expected ALGORITHM LIMIT/PERIOD [OPTION ...]");
        return SLUICE_EINVAL;
    }
    if (ntok == 1) {
        sluice__errf(err, errlen, "missing LIMIT/PERIOD after \"%s\"", pf->ops->name);
        return SLUICE_EINVAL;
    }

    if ((rc = calendar(pf, seen, err, errlen)) != 0) return rc;
    pf->capacity = pf->limit;
    pf->div_w = sluice__div_make(pf->period_ns);
    return pf->ops->setup(pf, &opts, err, errlen);
}

int sluice__format_no_options(const sluice__profile *pf, char *buf, size_t buflen)
{
    (void)pf;
    if (buflen) buf[0] = '\0';
    return 0;
}

int sluice__spec_format(const sluice__profile *pf, char *buf, size_t buflen)
{
    const struct unit *u = &units[N_FORMAT_UNITS - 1];
    for (size_t i = 0; i < N_FORMAT_UNITS; i++)
        if (pf->period_ns % units[i].ns == 0) {
            u = &units[i];
            break;
        }
    char count[24] = "";
    uint64_t c = pf->period_ns / u->ns;
    if (c != 1) snprintf(count, sizeof count, "%llu", (unsigned long long)c);
    char opts[64];
    if (pf->ops->format(pf, opts, sizeof opts) < 0) return SLUICE_EINVAL;
    if (pf->tz) { /* a calendar period, named as written */
        static const char *const cal[] = {"", "d", "w", "month", "y"};
        int n = snprintf(buf, buflen, "%s %llu/%.0u%s tz=%s", pf->ops->name, (unsigned long long)pf->limit,
                         pf->cal_n == 1 ? 0 : pf->cal_n, cal[pf->cal_unit], sluice__tz_name(pf->tz));
        if (n >= 0 && pf->anchor != 1 && (size_t)n < buflen)
            n += snprintf(buf + n, buflen - (size_t)n, " anchor=%u", pf->anchor);
        if (n < 0) return SLUICE_EINVAL;
        if ((size_t)n >= buflen) return SLUICE_ENOSPC;
        return n;
    }
    int n = snprintf(buf, buflen, "%s %llu/%s%s%s%s", pf->ops->name,
                     (unsigned long long)pf->limit, count, u->name, opts,
                     pf->clock == SLUICE__CLOCK_COARSE ? " clock=coarse" : "");
    if (n < 0) return SLUICE_EINVAL;
    if ((size_t)n >= buflen) return SLUICE_ENOSPC;
    return n;
}

/* ---- the read-only view of a parsed spec (sluice_spec_info) ------------- */

_Static_assert(SLUICE_ALG_FIXED_WINDOW == (int)SLUICE__FIXED_WINDOW &&
                   SLUICE_ALG_SLIDING_LOG == (int)SLUICE__SLIDING_LOG &&
                   SLUICE_ALG_SLIDING_WHEEL == (int)SLUICE__SLIDING_WHEEL &&
                   SLUICE_ALG_SLIDING_APPROX == (int)SLUICE__SLIDING_APPROX &&
                   SLUICE_ALG_TOKEN_BUCKET == (int)SLUICE__TOKEN_BUCKET &&
                   SLUICE_ALG_LEAKY_BUCKET == (int)SLUICE__LEAKY_BUCKET &&
                   SLUICE__ALG_COUNT == 6,
               "the public algorithm numbers are the profile's");

/* The profile's fields as the public view names them: only what the spec
 * says (or defaults), none of the derived hot-path values; sliding-log's
 * internal slots (1-ns ticks) are not a spec option, so it reports 0. */
void sluice__spec_info(const sluice__profile *pf, sluice_spec_info *out)
{
    memset(out, 0, sizeof *out);
    out->algorithm = (int)pf->alg;
    out->clock = pf->clock == SLUICE__CLOCK_COARSE     ? SLUICE_CLOCK_COARSE
                 : pf->clock == SLUICE__CLOCK_REALTIME ? SLUICE_CLOCK_REALTIME
                                                       : SLUICE_CLOCK_MONOTONIC;
    out->limit = pf->limit;
    out->period_ns = pf->period_ns;
    out->capacity = pf->capacity;
    out->slots = pf->alg == SLUICE__SLIDING_WHEEL ? pf->slots : 0;
    out->nodelay = pf->alg == SLUICE__LEAKY_BUCKET && pf->nodelay;
}

int sluice_spec_parse(const char *spec, sluice_spec_info *out, char *err, size_t errlen)
{
    sluice__profile pf;
    int rc = sluice__spec_parse(spec, &pf, err, errlen);
    if (rc != 0) {
        memset(out, 0, sizeof *out);
        return rc;
    }
    sluice__spec_info(&pf, out);
    return 0;
}

const char *sluice_algorithm_name(int alg)
{
    return alg >= 0 && alg < SLUICE__ALG_COUNT ? algs[alg]->name : NULL;
}
