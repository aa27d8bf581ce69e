/* fuzz_replay.c -- fuzz the `sluice replay` trace parser in process.
 *
 * The input is a trace.  It goes through sluice_cli_replay_parse() (the
 * function `sluice replay` itself uses, cli/replay.c), and:
 *  - a refusal (2) carries a one-line message "line N: ..." with N at most
 *    the number of lines of the input; nothing else is returned but 0 or 2
 *    (1 is out of memory);
 *  - each accepted request points inside the input; its time_ns field is
 *    1 .. 19 decimal digits worth at most 2^63-1, its key has no comma, CR
 *    or LF and at most SLUICE_MAX_KEY_BYTES bytes, its permits field (when
 *    present) is decimal and worth at most 2^64-1, absent means 1; the
 *    numbers equal the fields' values, recomputed here;
 *  - writing the requests back as `time_ns,key[,permits]` lines and parsing
 *    that gives the same requests (the parse is a function of the fields);
 *  - the first requests, decided through a small table (max_keys 4) as
 *    replay does, keep the result invariants: allowed => retry_after_ns 0,
 *    refused => retry_after_ns -1 or > 0, a probe allowed unless the table
 *    refused the key, and the statistics count every decision.
 */
#include <sluice.h>
#include <string.h>

#include "cli.h"
#include "fuzz.h"

/* The value of a decimal field, or -1 as "not decimal / too large". */
static int dec_value(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    if (n == 0) return -1;
    __extension__ unsigned __int128 v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
        if (v > max) return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static void check_req(const char *in, size_t len, const sluice_cli_req *r)
{
    const char *end = in + len;
    FUZZ_CHECK(r->t >= in && r->t + r->tn <= end, "time field outside the input");
    FUZZ_CHECK(r->key >= in && r->key + r->kn <= end, "key outside the input");
    uint64_t v = 0;
    FUZZ_CHECK(dec_value(r->t, r->tn, (uint64_t)INT64_MAX, &v) == 0 && v == r->time_ns,
               "time_ns %.*s parsed as %llu", (int)r->tn, r->t, (unsigned long long)r->time_ns);
    FUZZ_CHECK(r->kn <= SLUICE_MAX_KEY_BYTES, "key of %u bytes", (unsigned)r->kn);
    for (size_t i = 0; i < r->kn; i++)
        FUZZ_CHECK(r->key[i] != ',' && r->key[i] != '\r' && r->key[i] != '\n',
                   "key with a comma, CR or LF at byte %zu", i);
    if (r->p) {
        FUZZ_CHECK(r->p >= in && r->p + r->pn <= end, "permits field outside the input");
        FUZZ_CHECK(dec_value(r->p, r->pn, UINT64_MAX, &v) == 0 && v == r->permits,
                   "permits %.*s parsed as %llu", (int)r->pn, r->p, (unsigned long long)r->permits);
    } else {
        FUZZ_CHECK(r->permits == 1, "absent permits parsed as %llu", (unsigned long long)r->permits);
    }
}

static void round_trip(const sluice_cli_trace *tr)
{
    size_t cap = 1;
    for (size_t i = 0; i < tr->n; i++) cap += tr->reqs[i].tn + tr->reqs[i].kn + tr->reqs[i].pn + 3;
    char *buf = malloc(cap);
    FUZZ_CHECK(buf != NULL, "out of memory");
    size_t len = 0;
    for (size_t i = 0; i < tr->n; i++) {
        const sluice_cli_req *r = &tr->reqs[i];
        memcpy(buf + len, r->t, r->tn);
        len += r->tn;
        buf[len++] = ',';
        memcpy(buf + len, r->key, r->kn);
        len += r->kn;
        if (r->p) {
            buf[len++] = ',';
            memcpy(buf + len, r->p, r->pn);
            len += r->pn;
        }
        buf[len++] = '\n';
    }
    sluice_cli_trace t2;
    char err[256];
    int rc = sluice_cli_replay_parse(buf, len, &t2, err, sizeof err);
    FUZZ_CHECK(rc == 0, "the requests written back are refused: %s", err);
    FUZZ_CHECK(t2.n == tr->n, "%zu requests written back, %zu parsed", tr->n, t2.n);
    for (size_t i = 0; i < tr->n; i++) {
        const sluice_cli_req *a = &tr->reqs[i], *b = &t2.reqs[i];
        FUZZ_CHECK(a->time_ns == b->time_ns && a->permits == b->permits && a->kn == b->kn &&
                       memcmp(a->key, b->key, a->kn) == 0 && (a->p == NULL) == (b->p == NULL),
                   "request %zu differs after writing back", i);
    }
    free(t2.reqs);
    free(buf);
}

static void decide(const sluice_cli_trace *tr)
{
    static const char *const specs[] = {
        "fixed-window 3/s",        "sliding-log 2/100ns",  "sliding-wheel 4/s slots=4",
        "sliding-approx 5/10ns",   "token-bucket 3/s burst=2", "leaky-bucket 1/10ns capacity=3",
    };
    char err[256];
    sluice_table *t = sluice_table_new(specs[tr->n % 6], 4, err, sizeof err);
    FUZZ_CHECK(t != NULL, "table refused: %s", err);
    uint64_t allowed = 0, denied = 0, probes = 0;
    for (size_t i = 0; i < tr->n && i < 512; i++) {
        const sluice_cli_req *r = &tr->reqs[i];
        sluice_result res;
        bool ok = sluice_table_try_acquire_at(t, r->key, r->kn, r->permits, r->time_ns, &res);
        int e = res.error;
        FUZZ_CHECK(ok == res.allowed, "return value differs from res.allowed");
        if (ok) FUZZ_CHECK(res.retry_after_ns == 0, "allowed with retry %lld", (long long)res.retry_after_ns);
        else FUZZ_CHECK(res.retry_after_ns == -1 || res.retry_after_ns > 0,
                        "refused with retry %lld", (long long)res.retry_after_ns);
        if (r->permits == 0) {
            FUZZ_CHECK(ok || e != 0, "probe refused by the key's limiter");
            probes++;
        } else if (ok) {
            allowed++;
        } else {
            denied++;
        }
    }
    sluice_table_stats st;
    sluice_table_stats_get(t, &st);
    FUZZ_CHECK(st.decisions.requests_allowed == allowed && st.decisions.requests_denied == denied &&
                   st.decisions.probes == probes,
               "stats %llu/%llu/%llu, observed %llu/%llu/%llu",
               (unsigned long long)st.decisions.requests_allowed,
               (unsigned long long)st.decisions.requests_denied,
               (unsigned long long)st.decisions.probes, (unsigned long long)allowed,
               (unsigned long long)denied, (unsigned long long)probes);
    FUZZ_CHECK(st.keys <= 4, "a table of max_keys 4 holds %llu keys", (unsigned long long)st.keys);
    sluice_table_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data;
    sluice_cli_trace tr;
    char err[256];
    memset(err, 'X', sizeof err);
    int rc = sluice_cli_replay_parse(in, size, &tr, err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == 2, "parse returned %d", rc);
    if (rc == 2) {
        size_t n = fuzz_strnlen(err, sizeof err);
        FUZZ_CHECK(n < sizeof err && n > 0, "message not NUL-terminated or empty");
        FUZZ_CHECK(fuzz_one_line(err, n), "message has a control byte: \"%s\"", err);
        unsigned long line = 0;
        FUZZ_CHECK(sscanf(err, "line %lu:", &line) == 1, "message does not name the line: %s", err);
        size_t lines = 1;
        for (size_t i = 0; i < size; i++) lines += in[i] == '\n';
        FUZZ_CHECK(line >= 1 && line <= lines, "line %lu of %zu", line, lines);
        FUZZ_CHECK(tr.n == 0, "requests returned with an error");
        free(tr.reqs);
        return 0;
    }
    for (size_t i = 0; i < tr.n; i++) check_req(in, size, &tr.reqs[i]);
    round_trip(&tr);
    decide(&tr);
    free(tr.reqs);
    return 0;
}
