/* fuzz_spec.c -- fuzz the spec parser through the public API.
 *
 * The input (up to 1 KiB, cut at its first NUL) is a spec string.  For
 * every input:
 *  - sluice_spec_check() and sluice_limiter_new() agree: both accept it, or
 *    both refuse it with the same message;
 *  - a refusal's message is non-empty, NUL-terminated inside the buffer and
 *    one line (no control byte: a spec with a newline or an escape must not
 *    carry it into the message); with short buffers (1 .. 40 bytes, from
 *    malloc, so ASan sees an overrun) it is a NUL-terminated prefix that
 *    fills the buffer or stops short of an escape (\xNN) that does not fit;
 *  - an accepted spec's canonical form is shorter than SLUICE_SPEC_MAX, one
 *    line, equal to sluice_limiter_spec_format() of the limiter, and a fixed point:
 *    parsing it gives the same canonical form (format -> parse -> format);
 *  - sluice_limiter_spec_format() into every short buffer returns SLUICE_ENOSPC with
 *    a NUL-terminated prefix, and into length + 1 bytes succeeds;
 *  - sluice_spec_parse() agrees with sluice_spec_check() (same result, same
 *    message, a zeroed output on refusal), and the structured view is the
 *    same from the spec, from its canonical form and from the limiter
 *    (sluice_limiter_spec_get), with every field inside the grammar's
 *    bounds and the reserved words zero;
 *  - the limiter answers a probe (permits 0: allowed, retry 0) and one
 *    request at time 0 (allowed with retry 0, or refused with retry -1 or
 *    > 0);
 *  - concurrency specs (`concurrency N [lease=D]`): never accepted by both
 *    grammars; sluice_concurrency_spec_check() and sluice_concurrency_new()
 *    agree (same message), the message is one line, an accepted spec's
 *    canonical form is a fixed point and the limit's own, N and the lease
 *    within bounds, and the limit admits a probe, N permits, then refuses
 *    one more until a release;
 *  - the decimal reader the grammar uses, sluice_parse_u64(), on the input
 *    and its prefixes, under four bounds, agrees with a reference that reads
 *    the digits into 128 bits (code and value; *out untouched on error).
 */
#include <sluice.h>
#include <string.h>

#include "fuzz.h"

#define MAXSPEC 1024

static void check_message(const char *what, const char *spec, const char *err,
                          size_t errlen)
{
    size_t n = fuzz_strnlen(err, errlen);
    FUZZ_CHECK(n < errlen, "%s: message not NUL-terminated (spec \"%s\")", what, spec);
    FUZZ_CHECK(n > 0, "%s: empty message for a refused spec \"%s\"", what, spec);
    FUZZ_CHECK(fuzz_one_line(err, n), "%s: message has a control byte: \"%s\"", what, err);
}

/* The message into a malloc'd buffer of exactly errlen bytes. */
static void short_messages(const char *spec, const char *full)
{
    static const size_t lens[] = {1, 2, 7, 16, 40};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        size_t len = lens[i];
        char *e = malloc(len);
        FUZZ_CHECK(e != NULL, "out of memory");
        memset(e, 'X', len);
        int rc = sluice_spec_check(spec, NULL, 0, e, len);
        FUZZ_CHECK(rc < 0, "refused spec accepted with a short message buffer");
        size_t n = fuzz_strnlen(e, len);
        FUZZ_CHECK(n < len, "message overruns a %zu-byte buffer", len);
        /* a prefix, which may stop short of an escape (\xNN) that does
         * not fit whole */
        FUZZ_CHECK(strncmp(e, full, n) == 0 &&
                       (n == len - 1 || full[n] == '\0' || (full[n] == '\\' && n + 4 > len - 1)),
                   "short message \"%s\" is not a prefix of \"%s\"", e, full);
        free(e);
    }
}

static void check_format(const sluice_limiter *lim, const char *canon)
{
    size_t len = strlen(canon);
    for (size_t k = 0; k <= len + 1; k++) {
        char *b = k ? malloc(k) : NULL;
        FUZZ_CHECK(k == 0 || b != NULL, "out of memory");
        int rc = sluice_limiter_spec_format(lim, b, k);
        if (k <= len) {
            FUZZ_CHECK(rc == SLUICE_ENOSPC, "format into %zu bytes for \"%s\": %d", k, canon, rc);
            if (k) FUZZ_CHECK(fuzz_strnlen(b, k) == k - 1 && strncmp(b, canon, k - 1) == 0,
                              "truncated format is not a prefix of \"%s\"", canon);
        } else {
            FUZZ_CHECK(rc >= 0 && (size_t)rc == len && strcmp(b, canon) == 0,
                       "format into %zu bytes: %d \"%s\", expected \"%s\"", k, rc, b, canon);
        }
        free(b);
    }
}

static bool same_info(const sluice_spec_info *a, const sluice_spec_info *b)
{
    return a->algorithm == b->algorithm && a->clock == b->clock && a->limit == b->limit &&
           a->period_ns == b->period_ns && a->capacity == b->capacity && a->slots == b->slots &&
           a->nodelay == b->nodelay &&
           memcmp(a->reserved, b->reserved, sizeof a->reserved) == 0;
}

static void check_info(const sluice_spec_info *i, const char *canon)
{
    bool bucket = i->algorithm == SLUICE_ALG_TOKEN_BUCKET || i->algorithm == SLUICE_ALG_LEAKY_BUCKET;
    FUZZ_CHECK(i->algorithm >= SLUICE_ALG_FIXED_WINDOW && i->algorithm <= SLUICE_ALG_LEAKY_BUCKET &&
                   (i->clock == SLUICE_CLOCK_MONOTONIC || i->clock == SLUICE_CLOCK_COARSE ||
                    (i->clock == SLUICE_CLOCK_REALTIME && i->algorithm == SLUICE_ALG_FIXED_WINDOW)),
               "\"%s\": algorithm %d clock %d", canon, i->algorithm, i->clock);
    FUZZ_CHECK(i->limit >= 1 && i->limit <= SLUICE_MAX_LIMIT && i->period_ns >= 1 &&
                   i->period_ns <= SLUICE_MAX_PERIOD_NS,
               "\"%s\": limit %llu period %llu outside the grammar", canon,
               (unsigned long long)i->limit, (unsigned long long)i->period_ns);
    FUZZ_CHECK(i->capacity >= 1 && (bucket || i->capacity == i->limit),
               "\"%s\": capacity %llu", canon, (unsigned long long)i->capacity);
    FUZZ_CHECK(i->algorithm == SLUICE_ALG_SLIDING_WHEEL
                   ? i->slots >= 1 && i->period_ns % i->slots == 0
                   : i->slots == 0,
               "\"%s\": slots %llu", canon, (unsigned long long)i->slots);
    FUZZ_CHECK(!i->nodelay || i->algorithm == SLUICE_ALG_LEAKY_BUCKET, "\"%s\": nodelay", canon);
    FUZZ_CHECK(i->reserved[0] == 0 && i->reserved[1] == 0 && i->reserved[2] == 0 &&
                   i->reserved[3] == 0,
               "\"%s\": reserved words not zero", canon);
    /* a bucket fills within 2^63-1 ns */
    if (bucket) {
        __extension__ unsigned __int128 fill =
            (unsigned __int128)i->capacity * i->period_ns / i->limit;
        FUZZ_CHECK(fill <= (unsigned __int128)INT64_MAX, "\"%s\": takes over 2^63-1 ns to fill",
                   canon);
    }
}

/* The reference reader: every byte a digit, the value in 128 bits (more
 * than 21 significant digits is above any bound). */
static int ref_number(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    if (n == 0) return SLUICE_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return SLUICE_EINVAL;
    size_t i = 0;
    while (i + 1 < n && s[i] == '0') i++;
    if (n - i > 21) return SLUICE_ERANGE;
    unsigned __int128 v = 0;
    for (; i < n; i++) v = v * 10 + (unsigned)(s[i] - '0');
    if (v > max) return SLUICE_ERANGE;
    *out = (uint64_t)v;
    return 0;
}

static void check_number(const char *s, size_t n)
{
    const uint64_t bounds[4] = {UINT64_MAX, (uint64_t)INT64_MAX, 1000000000000ULL,
                                n ? (uint64_t)(unsigned char)s[0] : 0};
    for (size_t len = 0; len <= n; len += 1 + len / 4) /* the input and some prefixes */
        for (int b = 0; b < 4; b++) {
            uint64_t v = 7, r = 7;
            int rc = sluice_parse_u64(s, len, bounds[b], &v);
            int rr = ref_number(s, len, bounds[b], &r);
            FUZZ_CHECK(rc == rr && v == r, "parse_u64 of %zu bytes under %llu: %d %llu, want %d %llu",
                       len, (unsigned long long)bounds[b], rc, (unsigned long long)v, rr,
                       (unsigned long long)r);
        }
}

/* The concurrency grammar on the same input. */
static void check_conc(const char *spec, bool rate_ok)
{
    char canon[SLUICE_SPEC_MAX + 64], err[512], err2[512];
    memset(canon, 0, sizeof canon);
    int rc = sluice_concurrency_spec_check(spec, canon, sizeof canon, err, sizeof err);
    sluice_concurrency *c = sluice_concurrency_new(spec, err2, sizeof err2);
    if (rc != 0) {
        FUZZ_CHECK(rc == SLUICE_EINVAL || rc == SLUICE_ERANGE, "concurrency_spec_check returned %d", rc);
        FUZZ_CHECK(c == NULL, "concurrency_spec_check refused \"%s\", concurrency_new accepted it", spec);
        check_message("concurrency_spec_check", spec, err, sizeof err);
        check_message("concurrency_new", spec, err2, sizeof err2);
        FUZZ_CHECK(strcmp(err, err2) == 0, "two messages for one spec: \"%s\" and \"%s\"", err, err2);
        return;
    }
    FUZZ_CHECK(!rate_ok, "\"%s\" accepted by both grammars", spec);
    FUZZ_CHECK(c != NULL, "concurrency_spec_check accepted \"%s\", concurrency_new refused: %s", spec, err2);
    size_t cl = fuzz_strnlen(canon, sizeof canon);
    FUZZ_CHECK(cl > 0 && cl < SLUICE_SPEC_MAX && fuzz_one_line(canon, cl), "canonical form \"%s\"", canon);
    char f[SLUICE_SPEC_MAX], again[SLUICE_SPEC_MAX + 64];
    FUZZ_CHECK(sluice_concurrency_spec_format(c, f, sizeof f) == (int)cl && strcmp(f, canon) == 0,
               "format \"%s\" differs from \"%s\"", f, canon);
    FUZZ_CHECK(sluice_concurrency_spec_format(c, f, cl) == SLUICE_ENOSPC, "format into %zu bytes", cl);
    FUZZ_CHECK(sluice_concurrency_spec_check(canon, again, sizeof again, err, sizeof err) == 0 &&
                   strcmp(again, canon) == 0,
               "not a fixed point: \"%s\" -> \"%s\" -> \"%s\"", spec, canon, again);
    uint64_t N = sluice_concurrency_limit(c);
    FUZZ_CHECK(N >= 1 && N <= SLUICE_MAX_LIMIT, "\"%s\": N %llu", canon, (unsigned long long)N);
    sluice_permit pm, more;
    sluice_result r;
    FUZZ_CHECK(sluice_acquire_permit_at(c, 0, 0, &pm, &r) && r.remaining == N, "probe on \"%s\"", canon);
    FUZZ_CHECK(sluice_acquire_permit_at(c, N, 0, &pm, &r) && r.remaining == 0, "N on \"%s\"", canon);
    FUZZ_CHECK(!sluice_acquire_permit_at(c, 1, 0, &more, &r) && r.retry_after_ns > 0,
               "N+1 on \"%s\": retry %lld", canon, (long long)r.retry_after_ns);
    FUZZ_CHECK(sluice_permit_release_at(&pm, 0) == 0 && sluice_permit_release_at(&pm, 0) == SLUICE_ENOENT,
               "release on \"%s\"", canon);
    FUZZ_CHECK(sluice_acquire_permit_at(c, 1, 0, &more, &r), "after a release on \"%s\"", canon);
    sluice_concurrency_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char spec[MAXSPEC + 1];
    size_t n = size < MAXSPEC ? size : MAXSPEC;
    memcpy(spec, data, n);
    spec[n] = '\0';
    check_number(spec, n);

    char canon[SLUICE_SPEC_MAX + 64], err[512], err2[512];
    memset(canon, 0, sizeof canon);
    int rc = sluice_spec_check(spec, canon, sizeof canon, err, sizeof err);
    sluice_limiter *lim = sluice_limiter_new(spec, err2, sizeof err2);
    sluice_spec_info info;
    char err3[512];
    memset(&info, 0x5a, sizeof info);
    int rc3 = sluice_spec_parse(spec, &info, err3, sizeof err3);
    check_conc(spec, rc == 0);
    FUZZ_CHECK(rc3 == rc, "spec_parse returned %d, spec_check %d", rc3, rc);
    if (rc != 0) {
        static const sluice_spec_info zero;
        FUZZ_CHECK(memcmp(&info, &zero, sizeof info) == 0, "spec_parse left its output set");
        FUZZ_CHECK(strcmp(err, err3) == 0, "spec_parse's message \"%s\" differs: \"%s\"", err3, err);
        FUZZ_CHECK(rc == SLUICE_EINVAL || rc == SLUICE_ERANGE, "spec_check returned %d", rc);
        FUZZ_CHECK(lim == NULL, "spec_check refused \"%s\" (%s), limiter_new accepted it", spec, err);
        check_message("spec_check", spec, err, sizeof err);
        check_message("limiter_new", spec, err2, sizeof err2);
        FUZZ_CHECK(strcmp(err, err2) == 0, "two messages for one spec: \"%s\" and \"%s\"", err, err2);
        short_messages(spec, err);
        return 0;
    }
    FUZZ_CHECK(lim != NULL, "spec_check accepted \"%s\", limiter_new refused it: %s", spec, err2);
    size_t cl = fuzz_strnlen(canon, sizeof canon);
    FUZZ_CHECK(cl > 0 && cl < SLUICE_SPEC_MAX, "canonical form of length %zu", cl);
    FUZZ_CHECK(fuzz_one_line(canon, cl), "canonical form has a control byte");

    char f1[SLUICE_SPEC_MAX];
    int fl = sluice_limiter_spec_format(lim, f1, sizeof f1);
    FUZZ_CHECK(fl == (int)cl && strcmp(f1, canon) == 0,
               "format \"%s\" differs from spec_check's \"%s\"", f1, canon);
    check_format(lim, canon);

    /* format -> parse -> format */
    char canon2[SLUICE_SPEC_MAX + 64];
    rc = sluice_spec_check(canon, canon2, sizeof canon2, err, sizeof err);
    FUZZ_CHECK(rc == 0, "canonical form \"%s\" of \"%s\" is refused: %s", canon, spec, err);
    FUZZ_CHECK(strcmp(canon, canon2) == 0, "not a fixed point: \"%s\" -> \"%s\" -> \"%s\"", spec,
               canon, canon2);
    sluice_limiter *lim2 = sluice_limiter_new(canon, err, sizeof err);
    FUZZ_CHECK(lim2 != NULL, "canonical form refused by limiter_new: %s", err);
    char f2[SLUICE_SPEC_MAX];
    FUZZ_CHECK(sluice_limiter_spec_format(lim2, f2, sizeof f2) == (int)cl && strcmp(f2, canon) == 0,
               "format of the reparsed limiter \"%s\" differs from \"%s\"", f2, canon);
    /* the structured view: the same from the spec, its canonical form and
     * the limiter, and within the grammar's bounds */
    sluice_spec_info i2, i3;
    FUZZ_CHECK(sluice_spec_parse(canon, &i2, err, sizeof err) == 0, "canonical form refused");
    sluice_limiter_spec_get(lim2, &i3);
    FUZZ_CHECK(same_info(&info, &i2) && same_info(&info, &i3),
               "spec info differs between \"%s\", its canonical form and its limiter", spec);
    check_info(&info, canon);
    sluice_limiter_free(lim2);

    /* the limiter works */
    sluice_result r;
    bool ok = sluice_try_acquire_at(lim, 0, 0, &r);
    FUZZ_CHECK(ok && r.allowed && r.retry_after_ns == 0, "probe refused on \"%s\"", canon);
    ok = sluice_try_acquire_at(lim, 1, 0, &r);
    FUZZ_CHECK(ok == r.allowed, "return value differs from res.allowed");
    FUZZ_CHECK(ok ? r.retry_after_ns == 0 : r.retry_after_ns == -1 || r.retry_after_ns > 0,
               "allowed=%d with retry_after_ns=%lld", ok, (long long)r.retry_after_ns);
    sluice_limiter_free(lim);
    return 0;
}
