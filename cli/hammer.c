/* hammer.c -- `sluice hammer`: make as many decisions as possible for a
 * while, locally, through Redis, or both, and report (docs/decisions.md 4b).
 *
 * Each of --threads threads loops until the duration is over: pick the next
 * of --keys keys (round robin, each thread from its own offset), time one
 * decision with two CLOCK_MONOTONIC reads, count it.  A calendar quota
 * (tz=) is decided on its own axis: the monotonic time plus the offset of
 * the table's clock (sluice_table_now_ns) read once at the start.  Every loop is bounded
 * by the clock and by a decision count; a decision through Redis never takes
 * longer than --timeout, so the command ends within the duration plus that
 * (plus the connect timeout when it has to connect).
 *
 * The last line on stdout is
 *   allowed=A denied=D errors=E elapsed_ns=T decisions_per_sec=R p50_ns=..
 *   p99_ns=.. max_ns=.. [the Redis tier's counters]
 * errors = decisions that the failure policy made because Redis could not.
 * Several processes pointed at one Redis with the same --limit and --prefix
 * share one global limit.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <pthread.h>
#include <sluice.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SLUICE_HAVE_REDIS
#include <sluice/redis.h>
#endif

int sluice_cli_hammer(int argc, char **argv);

static const char hammer_usage[] =
    "usage: sluice hammer --limit 'SPEC' [--redis redis://HOST:PORT] [--tier local|global|both]\n"
    "                     [--threads N] [--keys N] [--duration D] [OPTIONS]\n"
    "\n"
    "Makes as many decisions as it can for the duration and prints, as its last line,\n"
    "  allowed=A denied=D errors=E elapsed_ns=T decisions_per_sec=R p50_ns=.. p99_ns=.. ...\n"
    "Several processes pointed at one Redis (same --limit, same --prefix) share one\n"
    "global limit: run a few at once to check a deployment by hand.\n"
    "\n"
    "  --limit SPEC          the limit (global tiers: token-bucket, sliding-approx or fixed-window)\n"
    "  --redis URL           redis://HOST:PORT (default redis://127.0.0.1:6379)\n"
    "  --tier T              local: a sluice table in this process only;\n"
    "                        global: one Redis round trip per decision (exact);\n"
    "                        both: leases from Redis spent locally (the two-tier mode)\n"
    "                        (default: both with --redis, else local)\n"
    "  --threads N           decision threads, 1 .. 256 (default 1)\n"
    "  --keys N              keys, 1 .. 10^7, used round robin (default 1)\n"
    "  --duration D          how long, e.g. 3s, 500ms, 2min (default 1s; at most 1d)\n"
    "  --permits N           permits per request (default 1)\n"
    "  --lease N             both: the largest lease (default 10000; 0 = exact)\n"
    "  --processes P         processes expected to share the limit (default 1):\n"
    "                        sizes leases and the fail-local limit\n"
    "  --policy P            closed, open or local: what Redis failures decide\n"
    "                        (default closed)\n"
    "  --local SPEC          both/global: a local limiter in front of Redis\n"
    "  --timeout MS          deadline of one decision through Redis (default 50)\n"
    "  --connect-timeout MS  (default 100)\n"
    "  --prefix STR          Redis key prefix (default sluice:hammer:)\n"
    "  --user NAME           AUTH as this ACL user (needs --password)\n"
    "  --password PW         AUTH with this password (or SLUICE_REDIS_PASSWORD)\n"
    "  --cluster M           auto (default: find out), on or off\n"
    "\n"
    "Exit status: 0 after the run, 2 on bad usage.\n";

#define MAX_THREADS 256
#define HBUCKETS (64 * 16)

typedef struct hist {
    uint64_t n[HBUCKETS];
} hist;

static unsigned hbucket(uint64_t v)
{
    if (v < 16) return (unsigned)v;
    unsigned b = 63u - (unsigned)__builtin_clzll(v);
    return (b - 3) * 16 + (unsigned)((v >> (b - 4)) & 15);
}

static uint64_t hvalue(unsigned i)
{
    if (i < 16) return i;
    unsigned b = i / 16 + 3, sub = i % 16;
    return ((uint64_t)(16 + sub)) << (b - 4);
}

static uint64_t hpercentile(const hist *h, uint64_t total, double q)
{
    if (total == 0) return 0;
    uint64_t want = (uint64_t)(q * (double)total), seen = 0;
    if (want >= total) want = total - 1;
    for (unsigned i = 0; i < HBUCKETS; i++) {
        seen += h->n[i];
        if (seen > want) return hvalue(i);
    }
    return hvalue(HBUCKETS - 1);
}

enum { TIER_LOCAL, TIER_GLOBAL, TIER_BOTH };

typedef struct job {
    int tier;
    sluice_table *table;
#ifdef SLUICE_HAVE_REDIS
    sluice_redis *redis;
#endif
    char (*keys)[24];
    uint32_t nkeys;
    uint64_t permits;
    uint64_t end_ns;
    uint64_t axis_ns; /* added to a monotonic time: the table's axis */
} job;

typedef struct worker {
    pthread_t th;
    const job *job;
    uint32_t first;
    uint64_t allowed, denied, errors, max_ns;
    hist h;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    const job *j = w->job;
    uint32_t k = w->first % j->nkeys;
    uint64_t now = sluice_now_ns();
    /* bounded by the clock and, in case the clock misbehaves, by count */
    for (uint64_t i = 0; i < (1ULL << 40) && now < j->end_ns; i++) {
        const char *key = j->keys[k];
        size_t kl = strlen(key);
        if (++k == j->nkeys) k = 0;
        bool ok;
        uint64_t t0 = now;
        if (j->tier == TIER_LOCAL) {
            ok = sluice_table_try_acquire_at(j->table, key, kl, j->permits, t0 + j->axis_ns, NULL);
        } else {
#ifdef SLUICE_HAVE_REDIS
            sluice_redis_info info;
            ok = sluice_redis_try_acquire_ex(j->redis, key, kl, j->permits, NULL, &info);
            if (info.source == SLUICE_REDIS_SRC_POLICY) w->errors++;
#else
            ok = false;
#endif
        }
        now = sluice_now_ns();
        uint64_t d = now - t0;
        w->h.n[hbucket(d)]++;
        if (d > w->max_ns) w->max_ns = d;
        if (ok) w->allowed++;
        else w->denied++;
    }
    return NULL;
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sluice hammer: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (try sluice hammer --help)\n");
    va_end(ap);
    return 2;
}

/* A decimal option value in [lo, hi], read as the library reads numbers
 * (sluice_parse_u64). */
static bool parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    uint64_t v;
    if (!s || sluice_parse_u64(s, strlen(s), hi, &v) != 0 || v < lo) return false;
    *out = v;
    return true;
}

/* "3s", "500ms", "2min", "1.5"? no: integers with a unit; a bare number is
 * seconds. */
static bool parse_duration(const char *s, uint64_t *ns)
{
    static const struct { const char *u; uint64_t ns; } units[] = {
        {"ns", 1}, {"us", 1000}, {"ms", 1000000}, {"s", 1000000000ULL},
        {"min", 60000000000ULL}, {"m", 60000000000ULL}, {"h", 3600000000000ULL},
        {"d", 86400000000000ULL}, {"", 1000000000ULL},
    };
    size_t n = strspn(s, "0123456789");
    uint64_t v;
    if (sluice_parse_u64(s, n, 86400000000000ULL, &v) != 0) return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(s + n, units[i].u) == 0) {
            if (v > 86400000000000ULL / units[i].ns) return false;
            *ns = v * units[i].ns;
            return *ns > 0;
        }
    return false;
}

/* redis://HOST:PORT, redis://HOST, HOST:PORT; HOST may be [v6]. */
static bool parse_url(const char *url, char *host, size_t hostlen, int *port)
{
    const char *s = url;
    if (strncmp(s, "redis://", 8) == 0) s += 8;
    const char *hend, *pstart = NULL;
    if (*s == '[') {
        hend = strchr(s, ']');
        if (!hend) return false;
        s++;
        if (hend[1] == ':') pstart = hend + 2;
        else if (hend[1] != '\0' && hend[1] != '/') return false;
    } else {
        hend = s + strcspn(s, ":/");
        if (*hend == ':') pstart = hend + 1;
    }
    size_t hl = (size_t)(hend - s);
    if (hl == 0 || hl >= hostlen) return false;
    memcpy(host, s, hl);
    host[hl] = '\0';
    *port = 6379;
    if (pstart) {
        char pb[8];
        size_t pl = strcspn(pstart, "/");
        if (pl == 0 || pl >= sizeof pb) return false;
        memcpy(pb, pstart, pl);
        pb[pl] = '\0';
        uint64_t v;
        if (!parse_u64(pb, 1, 65535, &v)) return false;
        *port = (int)v;
    }
    return true;
}

int sluice_cli_hammer(int argc, char **argv)
{
    const char *limit = NULL, *url = NULL, *tier_s = NULL, *policy_s = "closed";
    const char *local = NULL, *prefix = "sluice:hammer:";
    const char *user = NULL, *password = getenv("SLUICE_REDIS_PASSWORD"), *cluster_s = "auto";
    uint64_t threads = 1, nkeys = 1, duration = 1000000000ULL, permits = 1, lease = 10000;
    uint64_t procs = 1, timeout_ms = 50, connect_ms = 100;
    bool lease_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(hammer_usage, stdout);
            return 0;
        }
        if (i + 1 >= argc) return usage_error("option %s needs a value", a);
        const char *v = argv[++i];
        if (strcmp(a, "--limit") == 0) limit = v;
        else if (strcmp(a, "--redis") == 0) url = v;
        else if (strcmp(a, "--tier") == 0) tier_s = v;
        else if (strcmp(a, "--policy") == 0) policy_s = v;
        else if (strcmp(a, "--local") == 0) local = v;
        else if (strcmp(a, "--prefix") == 0) prefix = v;
        else if (strcmp(a, "--user") == 0) user = v;
        else if (strcmp(a, "--password") == 0) password = v;
        else if (strcmp(a, "--cluster") == 0) cluster_s = v;
        else if (strcmp(a, "--threads") == 0) {
            if (!parse_u64(v, 1, MAX_THREADS, &threads)) return usage_error("bad --threads \"%s\" (1 .. 256)", v);
        } else if (strcmp(a, "--keys") == 0) {
            if (!parse_u64(v, 1, 10000000, &nkeys)) return usage_error("bad --keys \"%s\" (1 .. 10000000)", v);
        } else if (strcmp(a, "--duration") == 0) {
            if (!parse_duration(v, &duration)) return usage_error("bad --duration \"%s\" (e.g. 3s, 500ms)", v);
        } else if (strcmp(a, "--permits") == 0) {
            if (!parse_u64(v, 0, UINT64_MAX, &permits)) return usage_error("bad --permits \"%s\"", v);
        } else if (strcmp(a, "--lease") == 0) {
            if (!parse_u64(v, 0, UINT32_MAX, &lease)) return usage_error("bad --lease \"%s\"", v);
            lease_set = true;
        } else if (strcmp(a, "--processes") == 0) {
            if (!parse_u64(v, 1, 1000000, &procs)) return usage_error("bad --processes \"%s\"", v);
        } else if (strcmp(a, "--timeout") == 0) {
            if (!parse_u64(v, 1, 600000, &timeout_ms)) return usage_error("bad --timeout \"%s\" (ms, 1 .. 600000)", v);
        } else if (strcmp(a, "--connect-timeout") == 0) {
            if (!parse_u64(v, 1, 600000, &connect_ms)) return usage_error("bad --connect-timeout \"%s\"", v);
        } else
            return usage_error("unknown option \"%s\"", a);
    }
    if (!limit) return usage_error("%s", "--limit is required");
    int tier;
    if (!tier_s) tier = url ? TIER_BOTH : TIER_LOCAL;
    else if (strcmp(tier_s, "local") == 0) tier = TIER_LOCAL;
    else if (strcmp(tier_s, "global") == 0) tier = TIER_GLOBAL;
    else if (strcmp(tier_s, "both") == 0) tier = TIER_BOTH;
    else return usage_error("bad --tier \"%s\" (local, global or both)", tier_s);
    char host[256] = "127.0.0.1";
    int port = 6379;
    if (url && !parse_url(url, host, sizeof host, &port))
        return usage_error("bad --redis \"%s\" (redis://HOST:PORT)", url);

    job j = {.tier = tier, .nkeys = (uint32_t)nkeys, .permits = permits};
    char err[256];
    if (tier == TIER_LOCAL) {
        j.table = sluice_table_new(limit, nkeys, err, sizeof err);
        if (!j.table) {
            fprintf(stderr, "sluice hammer: %s\n", err);
            return 2;
        }
        /* a calendar quota (tz=) counts from the Unix epoch: its decisions
         * are at the table's own clock, timed on the monotonic one */
        sluice_spec_info info;
        if (sluice_spec_parse(limit, &info, NULL, 0) == 0 && info.clock == SLUICE_CLOCK_REALTIME)
            j.axis_ns = sluice_table_now_ns(j.table) - sluice_now_ns();
    } else {
#ifdef SLUICE_HAVE_REDIS
        sluice_redis_config cfg;
        sluice_redis_config_init(&cfg);
        cfg.host = host;
        cfg.port = port;
        cfg.command_timeout_ms = (uint32_t)timeout_ms;
        cfg.connect_timeout_ms = (uint32_t)connect_ms;
        cfg.expected_processes = (uint32_t)procs;
        cfg.key_prefix = prefix;
        cfg.local_spec = local;
        cfg.max_keys = nkeys;
        cfg.pool_size = (uint32_t)threads;
        cfg.lease_max = tier == TIER_BOTH ? (uint32_t)lease : 0;
        cfg.username = user;
        cfg.password = password && *password ? password : NULL;
        if (strcmp(cluster_s, "auto") == 0) cfg.cluster = SLUICE_REDIS_CLUSTER_AUTO;
        else if (strcmp(cluster_s, "on") == 0) cfg.cluster = SLUICE_REDIS_CLUSTER_ON;
        else if (strcmp(cluster_s, "off") == 0) cfg.cluster = SLUICE_REDIS_CLUSTER_OFF;
        else return usage_error("bad --cluster \"%s\" (auto, on or off)", cluster_s);
        (void)lease_set;
        if (strcmp(policy_s, "closed") == 0) cfg.policy = SLUICE_REDIS_FAIL_CLOSED;
        else if (strcmp(policy_s, "open") == 0) cfg.policy = SLUICE_REDIS_FAIL_OPEN;
        else if (strcmp(policy_s, "local") == 0) cfg.policy = SLUICE_REDIS_FAIL_LOCAL;
        else return usage_error("bad --policy \"%s\" (closed, open or local)", policy_s);
        j.redis = sluice_redis_new(limit, &cfg, err, sizeof err);
        if (!j.redis) {
            fprintf(stderr, "sluice hammer: %s\n", err);
            return 2;
        }
        int rc = sluice_redis_ping(j.redis);
        if (rc != 0)
            fprintf(stderr, "sluice hammer: Redis at %s:%d does not answer (%s); the %s policy decides\n",
                    host, port, sluice_strerror(rc), policy_s);
#else
        (void)lease_set;
        (void)policy_s;
        (void)user;
        (void)password;
        (void)cluster_s;
        (void)local;
        (void)prefix;
        (void)procs;
        (void)timeout_ms;
        (void)connect_ms;
        (void)port;
        fprintf(stderr, "sluice hammer: this sluice was built without the Redis tier (hiredis); "
                        "only --tier local works\n");
        return 2;
#endif
    }
    j.keys = calloc(nkeys, sizeof *j.keys);
    worker *w = calloc(threads, sizeof *w);
    if (!j.keys || !w) {
        fprintf(stderr, "sluice hammer: out of memory\n");
        return 1;
    }
    for (uint64_t i = 0; i < nkeys; i++) snprintf(j.keys[i], sizeof j.keys[i], "k%llu", (unsigned long long)i);

    uint64_t start = sluice_now_ns();
    j.end_ns = start + duration;
    uint64_t started = 0;
    for (uint64_t t = 0; t < threads; t++) {
        w[t].job = &j;
        w[t].first = (uint32_t)((t * nkeys) / threads);
        if (pthread_create(&w[t].th, NULL, work, &w[t]) != 0) break;
        started++;
    }
    for (uint64_t t = 0; t < started; t++) pthread_join(w[t].th, NULL);
    uint64_t elapsed = sluice_now_ns() - start;

    uint64_t allowed = 0, denied = 0, errors = 0, maxns = 0;
    static hist h;
    for (uint64_t t = 0; t < started; t++) {
        allowed += w[t].allowed;
        denied += w[t].denied;
        errors += w[t].errors;
        if (w[t].max_ns > maxns) maxns = w[t].max_ns;
        for (unsigned b = 0; b < HBUCKETS; b++) h.n[b] += w[t].h.n[b];
    }
    uint64_t total = allowed + denied;
    printf("allowed=%llu denied=%llu errors=%llu elapsed_ns=%llu decisions_per_sec=%.0f "
           "p50_ns=%llu p99_ns=%llu max_ns=%llu threads=%llu keys=%llu",
           (unsigned long long)allowed, (unsigned long long)denied, (unsigned long long)errors,
           (unsigned long long)elapsed, elapsed ? (double)total * 1e9 / (double)elapsed : 0.0,
           (unsigned long long)hpercentile(&h, total, 0.50),
           (unsigned long long)hpercentile(&h, total, 0.99), (unsigned long long)maxns,
           (unsigned long long)started, (unsigned long long)nkeys);
#ifdef SLUICE_HAVE_REDIS
    if (j.redis) {
        sluice_redis_stats st;
        sluice_redis_stats_get(j.redis, &st);
        printf(" round_trips=%llu by_redis=%llu by_lease=%llu by_cache=%llu by_local=%llu "
               "by_policy=%llu leases=%llu lease_permits=%llu lease_dropped=%llu "
               "err_connect=%llu err_timeout=%llu err_io=%llu err_reply=%llu err_circuit=%llu "
               "noscript=%llu connects=%llu reconnects=%llu circuit_opens=%llu "
               "cluster=%d nodes=%u moved=%llu ask=%llu tryagain=%llu clusterdown=%llu "
               "slot_refreshes=%llu",
               (unsigned long long)st.round_trips, (unsigned long long)st.by_redis,
               (unsigned long long)st.by_lease, (unsigned long long)st.by_cache,
               (unsigned long long)st.by_local, (unsigned long long)st.by_policy,
               (unsigned long long)st.leases, (unsigned long long)st.lease_permits,
               (unsigned long long)st.lease_dropped, (unsigned long long)st.err_connect,
               (unsigned long long)st.err_timeout, (unsigned long long)st.err_io,
               (unsigned long long)st.err_reply, (unsigned long long)st.err_circuit,
               (unsigned long long)st.noscript, (unsigned long long)st.connects,
               (unsigned long long)st.reconnects, (unsigned long long)st.circuit_opens,
               st.cluster, (unsigned)st.nodes, (unsigned long long)st.moved,
               (unsigned long long)st.ask, (unsigned long long)st.tryagain,
               (unsigned long long)st.clusterdown, (unsigned long long)st.slot_refreshes);
        sluice_redis_free(j.redis);
    }
#endif
    printf("\n");
    sluice_table_free(j.table);
    free(j.keys);
    free(w);
    return 0;
}
