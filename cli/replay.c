/* replay.c -- `sluice replay`: decide a trace, print one CSV row a request
 * (docs/decisions.md section 4).
 *
 * The whole input is read first and validated in one pass, so a malformed
 * line is reported (line number, problem, exit status 2) before any output
 * is written; a second pass decides every request in file order through one
 * sluice_table (one limiter per key) and writes the rows through a large
 * buffer with hand-rolled integer formatting: a million-line trace takes
 * well under a second.
 *
 * Several --limit flags: one table per SPEC, and each request is decided
 * against its key in every table at once with sluice_composite_try_acquire_at
 * (all or nothing: a refusal by one limit charges none).
 *
 * Input rules: lines end in LF; a CR before the LF is dropped.  Blank lines
 * and lines starting with '#' are skipped; the first other line is a header
 * and is skipped when it starts with a letter.  A request line is
 * time_ns[,key[,permits]]: time_ns decimal 0 .. 2^63-1, key any bytes but
 * comma, CR and LF, permits decimal 0 .. 2^64-1 (absent: 1).  time_ns and
 * permits are echoed as given.
 *
 * --metrics FILE: FILE is opened before anything is read, so a bad path
 * costs no work; after the replay the table is put in a sluice_metrics
 * registry under its canonical spec and the exposition written to FILE
 * (docs/metrics.md).
 *
 * --top N: each table gets a sketch of the keys refused most before the
 * first decision (sluice_table_set_top: 4N counters a shard, at least 64,
 * keys kept to 128 bytes); after the replay the N keys refused most are
 * printed to stderr, after --stats, so stdout stays the decisions CSV.
 */
#include "cli.h"

#include <sluice.h>
#include <sluice/rules.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char replay_usage[] =
    "usage: sluice replay --limit 'SPEC' [--limit 'SPEC' ...] [--max-keys N]\n"
    "                     [--evict-lru] [--stats] [--metrics FILE] [--top N]\n"
    "                     < TRACE > DECISIONS\n"
    "       sluice replay --rules FILE [--stats] [--metrics FILE] < TRACE > DECISIONS\n"
    "\n"
    "Decides every request of TRACE, in file order, with one limiter per key built\n"
    "from SPEC (see sluice --help), at the times the trace gives (no clock is read).\n"
    "\n"
    "With several --limit flags each key has one limiter per SPEC, and every\n"
    "request is decided by all of them at once: allowed iff every limit allows it,\n"
    "and only then charged to every limit (a refusal by one charges none).  The\n"
    "row then combines them: wait_ns the largest, remaining the smallest (a limit\n"
    "that would have allowed a refused request counts without its permits),\n"
    "retry_after_ns the largest of the refusing limits' (-1 if any is -1).\n"
    "\n"
    "TRACE: one request a line, `time_ns[,key[,permits]]`.\n"
    "  time_ns   decimal nanoseconds, 0 .. 9223372036854775807 (2^63-1)\n"
    "  key       any bytes but comma, CR and LF; absent = the empty key\n"
    "  permits   decimal, >= 0 (0 is a probe); absent = 1\n"
    "  Blank lines and lines starting with # are skipped; a first line starting\n"
    "  with a letter is a header and is skipped.  CRLF line ends are accepted.\n"
    "\n"
    "DECISIONS: CSV with the header\n"
    "  time_ns,key,permits,allowed,wait_ns,remaining,retry_after_ns\n"
    "  allowed         1 or 0\n"
    "  wait_ns         the leaky-bucket shaper's wait before proceeding; else 0\n"
    "  remaining       whole permits a request at the same instant could still get\n"
    "  retry_after_ns  for a refusal, the least wait after which the same request\n"
    "                  passes (-1: never); 0 when allowed\n"
    "\n"
    "Options:\n"
    "  --limit SPEC    a limit, e.g. 'token-bucket 100/s burst=20' (required; up\n"
    "                  to 16, all applied to every request)\n"
    "  --max-keys N    hold at most N keys at once per limit, 1 .. 4294967296 (default\n"
    "                  10000000); keys at rest are dropped as needed, and when N\n"
    "                  keys are all in use a request for a new key is refused\n"
    "  --evict-lru     when N keys are all in use, drop the least recently used\n"
    "                  one (sampled) for the new key instead of refusing it\n"
    "  --stats         print the counters to stderr at the end (a line per limit)\n"
    "  --metrics FILE  after the replay, write the counters of what was decided\n"
    "                  to FILE in the Prometheus text format (0.0.4): requests\n"
    "                  and permits by decision, probes, keys held, reclaimed,\n"
    "                  evicted and refused (docs/metrics.md); the `limit` label\n"
    "                  is the canonical form of SPEC; with --top, the keys\n"
    "                  refused most are there too\n"
    "  --top N         after the replay, print to stderr the N keys (1 .. 1000)\n"
    "                  refused most, per limit, most first, one a line:\n"
    "                    [limit=K ]top=RANK count=C error=E key=KEY\n"
    "                  C is estimated (a heavy-hitters sketch): at least the true\n"
    "                  refusals, at most C + E; KEY is the key's bytes with\n"
    "                  backslash doubled and any byte outside printable ASCII\n"
    "                  written \\xNN; a key longer than 128 bytes counts as its\n"
    "                  first 128, followed by \\...  (docs/metrics.md)\n"
    "\n"
    "--rules FILE: decide by the rules of a rule file (docs/rules.md)\n"
    "  instead of --limit.  The trace's key field names the rules and keys of the\n"
    "  request: `time_ns,RULE=KEY[;RULE=KEY...][,permits]` (RULE alone: the empty\n"
    "  key; a global rule ignores its key; KEY any bytes but , ; CR and LF; at most\n"
    "  16 rules a request).  Each request is decided by its enforcing rules as one\n"
    "  composite, then by its shadow rules (which never refuse).  The rows are the\n"
    "  same, the key column echoing the field; a request naming only shadow rules\n"
    "  has remaining 18446744073709551615.  --stats prints a line per rule:\n"
    "    rule=NAME shadow=0|1 allowed=A denied=D denied_shadow=S denied_elsewhere=E\n"
    "  --metrics writes the rule set's series (ruleset label: FILE), with each key\n"
    "  rule's table series (sluice_table_keys{ruleset=..,rule=..} and the rest).\n"
    "  --top N prints, after --stats, each key rule's N keys refused most:\n"
    "    rule=NAME top=RANK count=C error=E key=KEY\n"
    "  (and --metrics has them too).  An unknown\n"
    "  rule, an empty list or a rule named twice in a line: exit status 2.\n"
    "\n"
    "Exit status: 0 on success; 2 on a bad SPEC, a bad option, a --metrics FILE\n"
    "that cannot be opened for writing, or a malformed line (one line on stderr\n"
    "naming the line number and the problem; no output).\n";

typedef sluice_cli_req req;

/* The message for a malformed line, into err: one line, the token quoted
 * (at most 64 bytes of it, each byte that is not printable ASCII written as
 * \xHH).  Returns 2. */
static int bad_line(char *err, size_t errlen, size_t line, const char *what,
                    const char *tok, size_t n)
{
    if (errlen == 0) return 2;
    int w = snprintf(err, errlen, "line %zu: %s", line, what);
    size_t len = w < 0 ? 0 : (size_t)w < errlen ? (size_t)w : errlen - 1;
    if (tok) {
        char q[64 * 4 + 4];
        size_t k = 0;
        q[k++] = ' ';
        q[k++] = '"';
        for (size_t i = 0; i < n && i < 64; i++) {
            unsigned char c = (unsigned char)tok[i];
            if (c >= 0x20 && c < 0x7f) {
                q[k++] = (char)c;
            } else {
                static const char hex[] = "0123456789abcdef";
                q[k++] = '\\';
                q[k++] = 'x';
                q[k++] = hex[c >> 4];
                q[k++] = hex[c & 15];
            }
        }
        q[k++] = '"';
        for (size_t i = 0; i < k && len + 1 < errlen; i++) err[len++] = q[i];
        err[len] = '\0';
    }
    return 2;
}

/* Parse one line [s, s+n) (no LF, CR already dropped) into r.  Returns 0,
 * or 2 with a message in err. */
static int parse_line(const char *s, size_t n, size_t line, req *r, char *err, size_t errlen)
{
    const char *c1 = memchr(s, ',', n);
    const char *end = s + n;
    const char *c2 = c1 ? memchr(c1 + 1, ',', (size_t)(end - c1 - 1)) : NULL;
    if (c2 && memchr(c2 + 1, ',', (size_t)(end - c2 - 1)))
        return bad_line(err, errlen, line, "too many fields (expected time_ns[,key[,permits]]):", s, n);
    if (memchr(s, '\r', n)) return bad_line(err, errlen, line, "stray carriage return", NULL, 0);
    r->t = s;
    r->tn = (uint32_t)((c1 ? c1 : end) - s);
    if (r->tn == 0) return bad_line(err, errlen, line, "missing time_ns", NULL, 0);
    int prc = sluice_parse_u64(s, r->tn, (uint64_t)INT64_MAX, &r->time_ns);
    if (prc != 0) {
        return bad_line(err, errlen, line, prc == SLUICE_ERANGE ? "time_ns out of range (0 .. 2^63-1):"
                                     : "bad time_ns (expected decimal nanoseconds):",
                        s, r->tn);
    }
    r->key = c1 ? c1 + 1 : s + r->tn;
    r->kn = (uint32_t)(c1 ? (c2 ? c2 : end) - (c1 + 1) : 0);
    if (r->kn > SLUICE_MAX_KEY_BYTES)
        return bad_line(err, errlen, line, "key longer than 65536 bytes", NULL, 0);
    r->p = NULL;
    r->pn = 0;
    r->permits = 1;
    if (c2) {
        r->p = c2 + 1;
        r->pn = (uint32_t)(end - r->p);
        prc = sluice_parse_u64(r->p, r->pn, UINT64_MAX, &r->permits);
        if (prc != 0) {
            return bad_line(err, errlen, line, r->pn == 0 ? "empty permits field"
                                  : prc == SLUICE_ERANGE ? "permits out of range (0 .. 2^64-1):"
                                             : "bad permits (expected a decimal integer >= 0):",
                            r->pn ? r->p : NULL, r->pn);
        }
    }
    return 0;
}

int sluice_cli_replay_parse(const char *in, size_t len, sluice_cli_trace *tr, char *err,
                            size_t errlen)
{
    size_t nreq = 0, cap = 1024;
    req *reqs = malloc(cap * sizeof *reqs);
    int rc = reqs ? 0 : 1;
    bool header_possible = true;
    size_t line = 0;
    if (errlen) err[0] = '\0';
    for (size_t pos = 0; rc == 0 && pos < len;) {
        line++;
        const char *s = in + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + 1;
        if (n && s[n - 1] == '\r') n--;
        if (n == 0 || s[0] == '#') continue;
        if (header_possible) {
            header_possible = false;
            if ((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')) continue;
        }
        if (nreq == cap) {
            req *r = realloc(reqs, cap * 2 * sizeof *reqs);
            if (!r) {
                rc = 1;
                break;
            }
            reqs = r;
            cap *= 2;
        }
        rc = parse_line(s, n, line, &reqs[nreq], err, errlen);
        reqs[nreq].line = line;
        nreq++;
    }
    if (rc == 1 && errlen) snprintf(err, errlen, "out of memory");
    tr->reqs = reqs;
    tr->n = rc == 0 ? nreq : 0;
    return rc;
}

/* ---- output ------------------------------------------------------------- */

typedef struct out {
    char *buf;
    size_t len, cap;
    bool failed;
} out;

static void out_flush(out *o)
{
    if (o->len && fwrite(o->buf, 1, o->len, stdout) != o->len) o->failed = true;
    o->len = 0;
}

static void out_put(out *o, const char *s, size_t n)
{
    if (o->len + n > o->cap) out_flush(o);
    if (n > o->cap) {
        if (fwrite(s, 1, n, stdout) != n) o->failed = true;
        return;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}

static void out_u64(out *o, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    out_put(o, tmp + i, sizeof tmp - i);
}

static void out_i64(out *o, int64_t v)
{
    if (v < 0) {
        out_put(o, "-", 1);
        out_u64(o, (uint64_t)0 - (uint64_t)v);
    } else {
        out_u64(o, (uint64_t)v);
    }
}

/* One decision row: time_ns,key,permits,allowed,wait_ns,remaining,retry_after_ns */
static void out_row(out *o, const req *r, bool ok, const sluice_result *res)
{
    out_put(o, r->t, r->tn);
    out_put(o, ",", 1);
    out_put(o, r->key, r->kn);
    out_put(o, ",", 1);
    if (r->p) out_put(o, r->p, r->pn);
    else out_put(o, "1", 1);
    out_put(o, ok ? ",1," : ",0,", 3);
    out_u64(o, res->wait_ns);
    out_put(o, ",", 1);
    out_u64(o, res->remaining);
    out_put(o, ",", 1);
    out_i64(o, res->retry_after_ns);
    out_put(o, "\n", 1);
}

/* ---- input -------------------------------------------------------------- */

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                return NULL;
            }
            buf = b;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* One --top line's key: backslash doubled, bytes outside printable ASCII
 * written \xNN, \... after a truncated key; then the newline. */
static void print_top_key(const sluice_top_entry *e)
{
    for (size_t j = 0; j < e->keylen; j++) {
        unsigned char b = e->key[j];
        if (b == '\\') fputs("\\\\", stderr);
        else if (b >= 0x20 && b < 0x7F) fputc(b, stderr);
        else fprintf(stderr, "\\x%02x", b);
    }
    fputs(e->truncated ? "\\...\n" : "\n", stderr);
}

/* --top with --rules: the n keys each key rule's table refused most, to
 * stderr, `rule=NAME top=RANK count=C error=E key=KEY`, rules in file
 * order.  Returns 0, or 1 after a message. */
static int print_rules_top(const sluice_rules *rs, size_t n)
{
    sluice_top_entry *top = malloc(n * sizeof *top);
    if (!top) {
        fprintf(stderr, "sluice replay: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < sluice_rules_count(rs); i++) {
        sluice_rule_info info;
        size_t got = 0;
        if (sluice_rules_info(rs, i, &info) != 0) break;
        if (info.global || sluice_rules_top_refused(rs, info.id, top, n, &got) != 0) continue;
        for (size_t k = 0; k < got; k++) {
            fprintf(stderr, "rule=%s top=%zu count=%llu error=%llu key=", info.name, k + 1,
                    (unsigned long long)top[k].count, (unsigned long long)top[k].error);
            print_top_key(&top[k]);
        }
    }
    free(top);
    return 0;
}

/* --top: the n keys each table refused most, to stderr.  Returns 0, or 1
 * after a message. */
static int print_top(sluice_table *const *tables, size_t ntab, size_t n)
{
    sluice_top_entry *top = malloc(n * sizeof *top);
    if (!top) {
        fprintf(stderr, "sluice replay: out of memory\n");
        return 1;
    }
    for (size_t k = 0; k < ntab; k++) {
        size_t got = 0;
        if (sluice_table_top_refused(tables[k], top, n, &got) != 0) got = 0;
        for (size_t i = 0; i < got; i++) {
            if (ntab > 1) fprintf(stderr, "limit=%zu ", k + 1);
            fprintf(stderr, "top=%zu count=%llu error=%llu key=", i + 1,
                    (unsigned long long)top[i].count, (unsigned long long)top[i].error);
            print_top_key(&top[i]);
        }
    }
    free(top);
    return 0;
}

/* The metrics of the replay: one series set per limit, the `limit` label
 * being the canonical form of its spec (suffixed with " #N", N its position
 * from 1, if an earlier limit has the same form).  Returns 0, or 1 after a
 * message. */
static int write_metrics(FILE *f, const char *path, sluice_table *const *tables,
                         const char *const *specs, size_t n)
{
    sluice_metrics *m = sluice_metrics_new();
    int rc = m ? 0 : SLUICE_ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char canon[SLUICE_SPEC_MAX + 24];
        if (sluice_spec_check(specs[i], canon, SLUICE_SPEC_MAX, NULL, 0) != 0)
            snprintf(canon, SLUICE_SPEC_MAX, "limit%zu", i);
        rc = sluice_metrics_add_table(m, canon, tables[i]);
        if (rc == SLUICE_EINVAL) { /* the same canonical spec twice */
            size_t cl = strlen(canon);
            snprintf(canon + cl, sizeof canon - cl, " #%zu", i + 1);
            rc = sluice_metrics_add_table(m, canon, tables[i]);
        }
    }
    if (rc == 0) rc = sluice_cli_metrics_dump(m, f, path);
    else fprintf(stderr, "sluice replay: --metrics: %s\n", sluice_strerror(rc));
    sluice_metrics_free(m);
    return rc == 0 ? 0 : 1;
}

int sluice_cli_metrics_dump(const sluice_metrics *m, FILE *f, const char *path)
{
    size_t need = 0;
    int rc = sluice_metrics_write(m, NULL, 0, &need);
    char *buf = NULL;
    /* objects may be added meanwhile (not here, but the function is
     * general): retry with the length the last attempt asked for */
    for (int tries = 0; rc == SLUICE_ENOSPC && tries < 8; tries++) {
        free(buf);
        buf = need < SIZE_MAX ? malloc(need + 1) : NULL;
        if (!buf) {
            rc = SLUICE_ENOMEM;
            break;
        }
        rc = sluice_metrics_write(m, buf, need + 1, &need);
    }
    if (rc == 0 && (fwrite(buf, 1, need, f) != need || fflush(f) != 0)) {
        fprintf(stderr, "sluice: cannot write metrics file \"%s\": %s\n", path, strerror(errno));
        free(buf);
        return 1;
    }
    if (rc != 0) fprintf(stderr, "sluice: metrics: %s\n", sluice_strerror(rc));
    free(buf);
    return rc == 0 ? 0 : 1;
}

/* ---- --rules ------------------------------------------------------------ */

/* The rules and keys of every request, resolved: request i names
 * keys[first[i] .. first[i] + count[i]).  Returns 0, or 2 after a message
 * naming the line and the token, or 1 when out of memory. */
static int resolve_rules(sluice_rules *rs, const req *reqs, size_t nreq, sluice_rule_key **keys_out,
                         size_t **first_out)
{
    size_t total = 0;
    for (size_t i = 0; i < nreq; i++) {
        total += 1;
        for (size_t j = 0; j < reqs[i].kn; j++) total += reqs[i].key[j] == ';';
    }
    size_t nr = sluice_rules_count(rs);
    sluice_rule_key *keys = malloc((total ? total : 1) * sizeof *keys);
    size_t *first = malloc((nreq + 1) * sizeof *first);
    bool *global = calloc(nr ? nr : 1, sizeof *global);
    if (!keys || !first || !global) {
        free(keys);
        free(first);
        free(global);
        fprintf(stderr, "sluice replay: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < nr; i++) {
        sluice_rule_info info;
        if (sluice_rules_info(rs, i, &info) == 0 && info.id >= 0 && (size_t)info.id < nr)
            global[info.id] = info.global;
    }
    char msg[512];
    int rc = 0;
    size_t k = 0;
    for (size_t i = 0; rc == 0 && i < nreq; i++) {
        const req *r = &reqs[i];
        first[i] = k;
        if (r->kn == 0) {
            rc = bad_line(msg, sizeof msg, r->line,
                          "no rule named (expected time_ns,RULE=KEY[;RULE=KEY...][,permits])", NULL, 0);
            break;
        }
        const char *s = r->key, *end = r->key + r->kn;
        size_t count = 0;
        while (rc == 0) {
            const char *semi = memchr(s, ';', (size_t)(end - s));
            const char *ie = semi ? semi : end;
            const char *eq = memchr(s, '=', (size_t)(ie - s));
            const char *ne = eq ? eq : ie;
            char name[SLUICE_RULE_NAME_MAX + 1];
            size_t nl = (size_t)(ne - s);
            int32_t id = SLUICE_ENOENT;
            if (nl > 0 && nl <= SLUICE_RULE_NAME_MAX) {
                memcpy(name, s, nl);
                name[nl] = '\0';
                id = sluice_rules_find(rs, name);
            }
            if (ie == s) {
                rc = bad_line(msg, sizeof msg, r->line, "empty item in the rule list:", r->key, r->kn);
            } else if (id < 0 || (size_t)id >= nr) {
                rc = bad_line(msg, sizeof msg, r->line, "unknown rule", s, nl);
            } else if (++count > SLUICE_COMPOSITE_MAX) {
                rc = bad_line(msg, sizeof msg, r->line, "more than 16 rules in one request:", r->key, r->kn);
            } else {
                sluice_rule_key rk = {id, eq ? eq + 1 : NULL, eq ? (size_t)(ie - eq - 1) : 0};
                for (size_t j = first[i]; j < k; j++)
                    if (keys[j].rule == id && (global[id] || (keys[j].keylen == rk.keylen &&
                                                             (rk.keylen == 0 || memcmp(keys[j].key, rk.key, rk.keylen) == 0))))
                        rc = bad_line(msg, sizeof msg, r->line,
                                      global[id] ? "global rule named twice:" : "rule and key named twice:",
                                      s, (size_t)(ie - s));
                keys[k++] = rk;
            }
            if (!semi) break;
            s = semi + 1;
        }
    }
    first[nreq] = k;
    free(global);
    if (rc) {
        fprintf(stderr, "sluice replay: %s\n", msg);
        free(keys);
        free(first);
        return rc;
    }
    *keys_out = keys;
    *first_out = first;
    return 0;
}

static int replay_rules(const char *path, bool stats, const char *metrics_path, size_t top)
{
    char err[512];
    /* the trace may interleave keys out of time order (see --limit) */
    sluice_rules *rs = sluice_rules_new_file(path, SLUICE_RULES_RECLAIM_WHEN_FULL, err, sizeof err);
    if (!rs) {
        fprintf(stderr, "sluice replay: bad --rules file \"%s\": %s\n", path, err);
        return 2;
    }
    /* a concurrency rule needs releases, which a trace cannot express (as
     * --limit 'concurrency N'; docs/rules.md, "Concurrency rules") */
    for (size_t i = 0; i < sluice_rules_count(rs); i++) {
        sluice_rule_info info;
        if (sluice_rules_info(rs, i, &info) == 0 &&
            sluice_concurrency_spec_check(info.spec, NULL, 0, NULL, 0) == 0) {
            fprintf(stderr, "sluice replay: bad --rules file \"%s\": line %zu: rule \"%s\" is a "
                            "concurrency limit, which needs releases the trace format "
                            "(time_ns,key,permits) cannot express\n",
                    path, info.line, info.name);
            sluice_rules_free(rs);
            return 2;
        }
    }
    int trc = top ? sluice_rules_set_top(rs, top * 4 < 64 ? 64 : top * 4, 128) : 0;
    if (trc != 0) {
        fprintf(stderr, "sluice replay: --top: %s\n", sluice_strerror(trc));
        sluice_rules_free(rs);
        return 1;
    }
    FILE *metrics_file = NULL;
    if (metrics_path) {
        metrics_file = *metrics_path ? fopen(metrics_path, "w") : NULL;
        if (!metrics_file) {
            fprintf(stderr, "sluice replay: cannot open --metrics file \"%s\": %s\n", metrics_path,
                    *metrics_path ? strerror(errno) : "empty name");
            sluice_rules_free(rs);
            return 2;
        }
    }
    size_t len = 0;
    char *in = read_all(stdin, &len);
    int rc = 0;
    sluice_cli_trace tr = {NULL, 0};
    sluice_rule_key *keys = NULL;
    size_t *first = NULL;
    if (!in) {
        fprintf(stderr, "sluice replay: cannot read the trace from stdin\n");
        rc = 1;
    } else {
        char msg[512];
        rc = sluice_cli_replay_parse(in, len, &tr, msg, sizeof msg);
        if (rc == 2) fprintf(stderr, "sluice replay: %s\n", msg);
        if (rc == 1) fprintf(stderr, "sluice replay: out of memory\n");
    }
    if (rc == 0) rc = resolve_rules(rs, tr.reqs, tr.n, &keys, &first);
    if (rc == 0) {
        out o = {malloc(1 << 20), 0, 1 << 20, false};
        if (!o.buf) {
            fprintf(stderr, "sluice replay: out of memory\n");
            rc = 1;
        } else {
            static const char head[] = "time_ns,key,permits,allowed,wait_ns,remaining,retry_after_ns\n";
            out_put(&o, head, sizeof head - 1);
            for (size_t i = 0; i < tr.n; i++) {
                const req *r = &tr.reqs[i];
                sluice_result res;
                bool ok = sluice_rules_decide_at(rs, keys + first[i], first[i + 1] - first[i],
                                                 r->permits, r->time_ns, &res, NULL);
                out_row(&o, r, ok, &res);
            }
            out_flush(&o);
            if (fflush(stdout) != 0 || o.failed) {
                fprintf(stderr, "sluice replay: cannot write the decisions\n");
                rc = 1;
            }
            free(o.buf);
        }
    }
    for (size_t i = 0; rc == 0 && stats && i < sluice_rules_count(rs); i++) {
        sluice_rule_info info;
        if (sluice_rules_info(rs, i, &info) != 0) break;
        fprintf(stderr, "rule=%s shadow=%d allowed=%llu denied=%llu denied_shadow=%llu denied_elsewhere=%llu\n",
                info.name, info.shadow ? 1 : 0,
                (unsigned long long)info.stats.requests[SLUICE_RULE_ALLOWED],
                (unsigned long long)info.stats.requests[SLUICE_RULE_DENIED],
                (unsigned long long)info.stats.requests[SLUICE_RULE_DENIED_SHADOW],
                (unsigned long long)info.stats.requests[SLUICE_RULE_DENIED_ELSEWHERE]);
    }
    if (rc == 0 && top) rc = print_rules_top(rs, top);
    if (metrics_file) {
        int mrc = 0;
        if (rc == 0) {
            sluice_metrics *m = sluice_metrics_new();
            int arc = m ? sluice_metrics_add_rules(m, path, rs) : SLUICE_ENOMEM;
            if (arc == SLUICE_EINVAL) arc = sluice_metrics_add_rules(m, "rules", rs); /* a name the format refuses */
            if (arc == 0) {
                mrc = sluice_cli_metrics_dump(m, metrics_file, metrics_path);
            } else {
                fprintf(stderr, "sluice replay: --metrics: %s\n", sluice_strerror(arc));
                mrc = 1;
            }
            sluice_metrics_free(m);
        }
        if (fclose(metrics_file) != 0 && mrc == 0 && rc == 0) {
            fprintf(stderr, "sluice replay: cannot write --metrics file \"%s\": %s\n", metrics_path,
                    strerror(errno));
            mrc = 1;
        }
        if (rc == 0) rc = mrc;
    }
    free(keys);
    free(first);
    free(tr.reqs);
    free(in);
    sluice_rules_free(rs);
    return rc;
}

int sluice_cli_replay(int argc, char **argv)
{
    const char *specs[SLUICE_COMPOSITE_MAX];
    size_t nspec = 0;
    uint64_t max_keys = 10000000;
    bool stats = false;
    unsigned flags = 0;
    const char *metrics_path = NULL;
    const char *rules_path = NULL;
    bool limit_opts = false; /* --max-keys or --evict-lru given */
    uint64_t top = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(replay_usage, stdout);
            return 0;
        } else if ((strcmp(a, "--limit") == 0 && i + 1 < argc) || strncmp(a, "--limit=", 8) == 0) {
            if (nspec == SLUICE_COMPOSITE_MAX) {
                fprintf(stderr, "sluice replay: too many --limit flags (at most %d)\n", SLUICE_COMPOSITE_MAX);
                return 2;
            }
            specs[nspec++] = a[7] == '=' ? a + 8 : argv[++i];
        } else if ((strcmp(a, "--rules") == 0 && i + 1 < argc) || strncmp(a, "--rules=", 8) == 0) {
            rules_path = a[7] == '=' ? a + 8 : argv[++i];
        } else if ((strcmp(a, "--max-keys") == 0 && i + 1 < argc) || strncmp(a, "--max-keys=", 11) == 0) {
            limit_opts = true;
            const char *v = a[10] == '=' ? a + 11 : argv[++i];
            if (sluice_parse_u64(v, strlen(v), (uint64_t)1 << 32, &max_keys) != 0 || max_keys == 0) {
                fprintf(stderr, "sluice replay: bad --max-keys \"%s\": expected 1 .. 4294967296\n", v);
                return 2;
            }
        } else if (strcmp(a, "--stats") == 0) {
            stats = true;
        } else if (strcmp(a, "--metrics") == 0 && i + 1 < argc) {
            metrics_path = argv[++i];
        } else if (strncmp(a, "--metrics=", 10) == 0) {
            metrics_path = a + 10;
        } else if ((strcmp(a, "--top") == 0 && i + 1 < argc) || strncmp(a, "--top=", 6) == 0) {
            const char *v = a[5] == '=' ? a + 6 : argv[++i];
            if (sluice_parse_u64(v, strlen(v), 1000, &top) != 0 || top == 0) {
                fprintf(stderr, "sluice replay: bad --top \"%s\": expected 1 .. 1000\n", v);
                return 2;
            }
        } else if (strcmp(a, "--evict-lru") == 0) {
            limit_opts = true;
            flags |= SLUICE_TABLE_EVICT_LRU;
        } else {
            fprintf(stderr, "sluice replay: unknown or incomplete argument \"%s\" (try sluice replay --help)\n", a);
            return 2;
        }
    }
    if (rules_path) {
        if (nspec || limit_opts) {
            fprintf(stderr, "sluice replay: --rules takes the limits, max_keys and policies from "
                            "its file: not with --limit, --max-keys or --evict-lru\n");
            return 2;
        }
        return replay_rules(rules_path, stats, metrics_path, (size_t)top);
    }
    if (nspec == 0) {
        fprintf(stderr, "sluice replay: missing --limit SPEC (try sluice replay --help)\n");
        return 2;
    }
    char err[256];
    for (size_t k = 0; k < nspec; k++) {
        /* the clock option chooses what the live functions read; a replay
         * reads none, so asking for one is a mistake worth naming */
        sluice_spec_info info;
        if (sluice_spec_parse(specs[k], &info, err, sizeof err) == 0 &&
            info.clock == SLUICE_CLOCK_COARSE) {
            fprintf(stderr, "sluice replay: bad --limit \"%s\": clock=coarse has no effect here: "
                            "a replay takes every time from the trace\n", specs[k]);
            return 2;
        }
        /* a trace line is an acquire; it cannot say when a permit goes
         * back, so a concurrency limit has nothing to replay (docs/decisions.md
         * section 3.9) */
        if (sluice_concurrency_spec_check(specs[k], NULL, 0, NULL, 0) == 0) {
            fprintf(stderr, "sluice replay: bad --limit \"%s\": a concurrency limit needs releases, "
                            "which the trace format (time_ns,key,permits) cannot express\n", specs[k]);
            return 2;
        }
    }
    /* the trace may interleave keys out of time order: keys at rest are
     * dropped only when a table needs room, so every decision is exact
     * until then (sluice_table_new_flags) */
    flags |= SLUICE_TABLE_RECLAIM_WHEN_FULL;
    sluice_table *tabs[SLUICE_COMPOSITE_MAX];
    for (size_t k = 0; k < nspec; k++) {
        tabs[k] = sluice_table_new_flags(specs[k], (size_t)max_keys, flags, err, sizeof err);
        if (!tabs[k]) {
            if (nspec == 1) fprintf(stderr, "sluice replay: bad --limit: %s\n", err);
            else fprintf(stderr, "sluice replay: bad --limit \"%s\": %s\n", specs[k], err);
            while (k-- > 0) sluice_table_free(tabs[k]);
            return 2;
        }
        int trc = top ? sluice_table_set_top(tabs[k], top * 4 < 64 ? 64 : (size_t)top * 4, 128) : 0;
        if (trc != 0) {
            fprintf(stderr, "sluice replay: --top: %s\n", sluice_strerror(trc));
            for (size_t j = 0; j <= k; j++) sluice_table_free(tabs[j]);
            return 1;
        }
    }
    sluice_table *t = tabs[0];

    FILE *metrics_file = NULL;
    if (metrics_path) {
        metrics_file = *metrics_path ? fopen(metrics_path, "w") : NULL;
        if (!metrics_file) {
            fprintf(stderr, "sluice replay: cannot open --metrics file \"%s\": %s\n", metrics_path,
                    *metrics_path ? strerror(errno) : "empty name");
            for (size_t k = 0; k < nspec; k++) sluice_table_free(tabs[k]);
            return 2;
        }
    }

    size_t len = 0;
    char *in = read_all(stdin, &len);
    if (!in) {
        fprintf(stderr, "sluice replay: cannot read the trace from stdin\n");
        if (metrics_file) fclose(metrics_file);
        for (size_t k = 0; k < nspec; k++) sluice_table_free(tabs[k]);
        return 1;
    }

    /* pass 1: split and validate */
    sluice_cli_trace tr;
    char msg[512];
    int rc = sluice_cli_replay_parse(in, len, &tr, msg, sizeof msg);
    if (rc == 2) fprintf(stderr, "sluice replay: %s\n", msg);
    if (rc == 1) fprintf(stderr, "sluice replay: out of memory\n");
    size_t nreq = tr.n;
    req *reqs = tr.reqs;

    /* pass 2: decide and print */
    if (rc == 0) {
        out o = {malloc(1 << 20), 0, 1 << 20, false};
        if (!o.buf) {
            fprintf(stderr, "sluice replay: out of memory\n");
            rc = 1;
        } else {
            static const char head[] = "time_ns,key,permits,allowed,wait_ns,remaining,retry_after_ns\n";
            out_put(&o, head, sizeof head - 1);
            for (size_t i = 0; i < nreq; i++) {
                const req *r = &reqs[i];
                sluice_result res;
                bool ok;
                if (nspec == 1) {
                    ok = sluice_table_try_acquire_at(t, r->key, r->kn, r->permits, r->time_ns, &res);
                } else {
                    sluice_limit_ref refs[SLUICE_COMPOSITE_MAX];
                    for (size_t k = 0; k < nspec; k++) refs[k] = sluice_ref_key(tabs[k], r->key, r->kn);
                    ok = sluice_composite_try_acquire_at(refs, nspec, r->permits, r->time_ns, &res, NULL);
                }
                out_row(&o, r, ok, &res);
            }
            out_flush(&o);
            if (fflush(stdout) != 0 || o.failed) {
                fprintf(stderr, "sluice replay: cannot write the decisions\n");
                rc = 1;
            }
            free(o.buf);
        }
    }
    for (size_t k = 0; rc == 0 && stats && k < nspec; k++) {
        sluice_table_stats st;
        sluice_table_stats_get(tabs[k], &st);
        if (nspec > 1) fprintf(stderr, "limit=%zu ", k + 1);
        fprintf(stderr,
                "keys=%llu reclaimed=%llu evicted=%llu refused=%llu requests_allowed=%llu "
                "requests_denied=%llu permits_allowed=%llu permits_denied=%llu probes=%llu\n",
                (unsigned long long)st.keys, (unsigned long long)st.reclaimed,
                (unsigned long long)st.evicted, (unsigned long long)st.refused, (unsigned long long)st.decisions.requests_allowed,
                (unsigned long long)st.decisions.requests_denied,
                (unsigned long long)st.decisions.permits_allowed,
                (unsigned long long)st.decisions.permits_denied,
                (unsigned long long)st.decisions.probes);
    }
    if (rc == 0 && top) rc = print_top(tabs, nspec, (size_t)top);
    if (metrics_file) {
        int mrc = rc == 0 ? write_metrics(metrics_file, metrics_path, tabs, specs, nspec) : 0;
        if (fclose(metrics_file) != 0 && mrc == 0 && rc == 0) {
            fprintf(stderr, "sluice replay: cannot write --metrics file \"%s\": %s\n",
                    metrics_path, strerror(errno));
            mrc = 1;
        }
        if (rc == 0) rc = mrc;
    }
    free(reqs);
    free(in);
    for (size_t k = 0; k < nspec; k++) sluice_table_free(tabs[k]);
    return rc;
}
