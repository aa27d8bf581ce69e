/* redis_backend.c -- sluice-rls: the Redis tier as the backend of every
 * limit (REDIS_URL), for replicas on several hosts that share one limit.
 *
 * Map: the environment (REDIS_URL and the rest); the limiters; a decision.
 *
 * Each limit of the config (and each override limit) is one sluice_redis
 * (libsluice-redis, include/sluice/redis.h): one Redis key per descriptor
 * value, `PREFIX rls:DIGEST: {KEY}:SPECID`, where DIGEST (FNV-1a of the
 * limit's full key, 16 hex digits) keeps the same values under two rules
 * apart and KEY is the table key rls.c builds.  The tier's scripts are
 * token-bucket, sliding-approx and fixed-window, so a limit without
 * `algorithm` is a fixed-window one on Redis too (config_yaml.c), windows
 * aligned to 0 as envoyproxy/ratelimit's are.  Redis's clock decides
 * (TIME, in the script), never this host's.
 *
 * With SLUICE_RLS_REDIS_LEASE_MAX = 0 (the default) every decision is one
 * round trip and exact in Redis's order.  Above 0 the tier's two-tier mode:
 * a process takes leases of permits and spends them locally, and the
 * processes together exceed a limit by at most P * lease_cap per key
 * (docs/redis.md derives it; P = SLUICE_RLS_REDIS_PROCESSES).  Either way
 * a call's enforced descriptors are decided together, all or nothing
 * (rls_redis_decide_all: sluice_redis_try_acquire_all; with leases the
 * permits in hand go back on a refusal) when they can be: on a Redis
 * Cluster only when the keys sent to Redis share a hash slot: with
 * SLUICE_RLS_REDIS_HASH_TAG=domain they do (rls_redis_tag: the hash tag is
 * the domain's digest; the default, descriptor, keeps each key its own
 * tag and the names they always had).
 *
 * A call blocks its worker thread for the round trip (at most
 * SLUICE_RLS_REDIS_TIMEOUT_MS): with Redis, the workers are the calls in
 * flight, so SLUICE_RLS_WORKERS may be set above the number of cores.
 *
 * When Redis cannot decide, the tier's policy does: fail closed is
 * answered as gRPC UNAVAILABLE unless SLUICE_RLS_REDIS_FAILURE=closed asks
 * for OVER_LIMIT; open admits; local decides with LIMIT/P in this process.
 */
#define _GNU_SOURCE
#include "redis_backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SLUICE_RLS_REDIS
#include <sluice/redis.h>
#endif

static rls_redis_settings g_redis; /* g_redis.on: the backend is in use */

static int bad(char *err, size_t errlen, const char *name, const char *v, const char *why)
{
    snprintf(err, errlen, "%s='%.200s' %s", name, v, why);
    return -1;
}

#ifdef SLUICE_RLS_REDIS
static int env_u32(const char *name, uint32_t lo, uint32_t hi, uint32_t *out, char *err, size_t errlen)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    uint64_t x = 0;
    if (sluice_parse_u64(v, strlen(v), hi, &x) != 0 || x < lo) { /* digits only: no sign, no space */
        char why[96];
        snprintf(why, sizeof why, "is not an integer from %lu to %lu", (unsigned long)lo, (unsigned long)hi);
        return bad(err, errlen, name, v, why);
    }
    *out = (uint32_t)x;
    return 0;
}

static bool ieq(const char *a, const char *b) { return strcasecmp(a, b) == 0; }

/* host:port (the host may be [v6]); the first of a comma-separated list. */
static int parse_hostport(rls_redis_settings *s, const char *url, char *err, size_t errlen)
{
    const char *p = url;
    if (!strncmp(p, "redis://", 8))
        p += 8;
    else if (!strncmp(p, "rediss://", 9))
        return bad(err, errlen, "REDIS_URL", url, "asks for TLS; sluice-rls speaks to Redis in cleartext only");
    size_t len = strcspn(p, ",/");
    const char *at = memchr(p, '@', len);
    if (at) { /* user:password@ or :password@ */
        const char *colon = memchr(p, ':', (size_t)(at - p));
        size_t ul = colon ? (size_t)(colon - p) : 0;
        const char *pw = colon ? colon + 1 : p;
        size_t pl = (size_t)(at - pw);
        if (ul >= sizeof s->username || pl >= sizeof s->password)
            return bad(err, errlen, "REDIS_URL", url, "has a user or password that is too long");
        memcpy(s->username, p, ul);
        s->username[ul] = 0;
        memcpy(s->password, pw, pl);
        s->password[pl] = 0;
        len -= (size_t)(at + 1 - p);
        p = at + 1;
        url = p; /* messages below never show the password */
    }
    const char *end = p + len, *colon = NULL;
    for (const char *c = p; c < end; c++) {
        if (*c == ':')
            colon = c;
    }
    if (!colon || colon == p)
        return bad(err, errlen, "REDIS_URL", url, "is not HOST:PORT");
    const char *h = p;
    size_t hl = (size_t)(colon - p);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') { /* [::1]:6379 */
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= sizeof s->host)
        return bad(err, errlen, "REDIS_URL", url, "has an empty or too long host");
    memcpy(s->host, h, hl);
    s->host[hl] = 0;
    uint64_t port = 0;
    if (sluice_parse_u64(colon + 1, (size_t)(end - (colon + 1)), 65535, &port) != 0 || port < 1)
        return bad(err, errlen, "REDIS_URL", url, "has a port that is not a number from 1 to 65535");
    s->port = (int)port;
    return 0;
}

#endif

int rls_redis_from_env(rls_redis_settings *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->processes = 1;
    s->timeout_ms = 50;
    s->pool_size = 8;
    const char *url = getenv("REDIS_URL");
    if (!url || !*url)
        return 0;
#ifndef SLUICE_RLS_REDIS
    return bad(err, errlen, "REDIS_URL", url,
               "is set, but this sluice-rls was built without the Redis tier (hiredis: libhiredis-dev)");
#else
    s->on = true;
    if (parse_hostport(s, url, err, errlen) < 0)
        return -1;
    const char *v = getenv("REDIS_SOCKET_TYPE");
    if (v && *v && !ieq(v, "tcp"))
        return bad(err, errlen, "REDIS_SOCKET_TYPE", v, "is not supported (tcp only)");
    v = getenv("REDIS_TYPE");
    s->cluster = SLUICE_REDIS_CLUSTER_AUTO;
    if (v && *v) {
        if (ieq(v, "single"))
            s->cluster = SLUICE_REDIS_CLUSTER_OFF;
        else if (ieq(v, "cluster"))
            s->cluster = SLUICE_REDIS_CLUSTER_ON;
        else
            return bad(err, errlen, "REDIS_TYPE", v, "is not single or cluster (sentinel is not supported)");
    }
    v = getenv("REDIS_TLS");
    if (v && *v && !ieq(v, "false") && strcmp(v, "0") != 0)
        return bad(err, errlen, "REDIS_TLS", v, "is not supported (cleartext only)");
    v = getenv("REDIS_AUTH"); /* password, or user:password (envoyproxy/ratelimit's form) */
    if (v && *v) {
        const char *colon = strchr(v, ':');
        size_t ul = colon ? (size_t)(colon - v) : 0;
        const char *pw = colon ? colon + 1 : v;
        if (ul >= sizeof s->username || strlen(pw) >= sizeof s->password || !*pw)
            return bad(err, errlen, "REDIS_AUTH", "...", "is empty or too long (password or user:password)");
        memcpy(s->username, v, ul);
        s->username[ul] = 0;
        snprintf(s->password, sizeof s->password, "%s", pw);
    }
    v = getenv("SLUICE_RLS_REDIS_FAILURE");
    s->failure = RLS_REDIS_FAIL_ERROR;
    if (v && *v) {
        static const char *const names[] = {"error", "closed", "open", "local"};
        s->failure = -1;
        for (int i = 0; i < 4; i++) {
            if (!strcmp(v, names[i]))
                s->failure = i;
        }
        if (s->failure < 0)
            return bad(err, errlen, "SLUICE_RLS_REDIS_FAILURE", v, "is not error, closed, open or local");
    }
    if (env_u32("SLUICE_RLS_REDIS_LEASE_MAX", 0, 1000000000u, &s->lease_max, err, errlen) < 0 ||
        env_u32("SLUICE_RLS_REDIS_PROCESSES", 1, 1000000u, &s->processes, err, errlen) < 0 ||
        env_u32("SLUICE_RLS_REDIS_TIMEOUT_MS", 1, 600000u, &s->timeout_ms, err, errlen) < 0 ||
        env_u32("REDIS_POOL_SIZE", 1, 1024, &s->pool_size, err, errlen) < 0)
        return -1;
    v = getenv("SLUICE_RLS_REDIS_HASH_TAG");
    s->hash_tag = 0;
    if (v && *v) {
        if (!strcmp(v, "domain"))
            s->hash_tag = 1;
        else if (strcmp(v, "descriptor") != 0)
            return bad(err, errlen, "SLUICE_RLS_REDIS_HASH_TAG", v, "is not descriptor or domain");
    }
    v = getenv("CACHE_KEY_PREFIX");
    if (v && *v) {
        if (strlen(v) > 100 || strpbrk(v, "{}"))
            return bad(err, errlen, "CACHE_KEY_PREFIX", v, "is longer than 100 bytes or holds '{' or '}'");
        snprintf(s->prefix, sizeof s->prefix, "%s", v);
    }
    return 0;
#endif
}

void rls_redis_use(const rls_redis_settings *s)
{
    if (s && s->on)
        g_redis = *s;
    else
        memset(&g_redis, 0, sizeof g_redis);
}

bool rls_redis_enabled(void) { return g_redis.on; }

size_t rls_redis_tag_len(void) { return g_redis.on && g_redis.hash_tag ? RLS_REDIS_TAG_BYTES : 0; }

void rls_redis_tag(const char *domain, size_t domainlen, unsigned char *out)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < domainlen; i++)
        h = (h ^ (unsigned char)domain[i]) * 1099511628211ull;
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++)
        out[i] = (unsigned char)hex[(h >> (60 - 4 * i)) & 15];
    out[16] = '}';
}

#ifdef SLUICE_RLS_REDIS

struct sluice_redis *rls_redis_make(const char *full_key, const char *spec, char *err, size_t errlen)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)full_key; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    char prefix[200];
    snprintf(prefix, sizeof prefix, "%srls:%016llx:", g_redis.prefix, (unsigned long long)h);
    sluice_redis_config c;
    sluice_redis_config_init(&c);
    c.host = g_redis.host;
    c.port = g_redis.port;
    c.command_timeout_ms = g_redis.timeout_ms;
    c.connect_timeout_ms = g_redis.timeout_ms;
    c.policy = g_redis.failure == RLS_REDIS_FAIL_OPEN    ? SLUICE_REDIS_FAIL_OPEN
               : g_redis.failure == RLS_REDIS_FAIL_LOCAL ? SLUICE_REDIS_FAIL_LOCAL
                                                         : SLUICE_REDIS_FAIL_CLOSED;
    c.expected_processes = g_redis.processes;
    c.key_prefix = prefix;
    c.lease_max = g_redis.lease_max;
    c.pool_size = g_redis.pool_size;
    c.username = g_redis.username[0] ? g_redis.username : NULL;
    c.password = g_redis.password[0] ? g_redis.password : NULL;
    c.cluster = g_redis.cluster;
    return sluice_redis_new(spec, &c, err, errlen);
}

void rls_redis_free(struct sluice_redis *r) { sluice_redis_free(r); }

bool rls_redis_decide(struct sluice_redis *r, const void *key, size_t keylen, uint64_t hits, sluice_result *res,
                      bool *failed)
{
    sluice_redis_info info;
    bool ok = sluice_redis_try_acquire_ex(r, key, keylen, hits, res, &info);
    *failed = info.source == SLUICE_REDIS_SRC_POLICY && g_redis.failure == RLS_REDIS_FAIL_ERROR;
    return ok;
}

int rls_redis_decide_all(struct sluice_redis *const *rs, const void *const *keys, const size_t *keylens,
                         const uint64_t *hits, size_t n, sluice_result *per, bool *allowed)
{
    if (n < 2 || n > SLUICE_COMPOSITE_MAX)
        return -1;
    int rc = sluice_redis_try_acquire_all(rs, keys, keylens, hits, n, NULL, per);
    if (rc < 0)
        return -1;
    *allowed = rc == 1;
    return 0;
}

void rls_redis_stats_add(const struct sluice_redis *r, uint64_t sums[RLS_REDIS_SUMS])
{
    sluice_redis_stats st;
    sluice_redis_stats_get(r, &st);
    sums[0] += st.round_trips;
    sums[1] += st.by_policy;
    sums[2] += st.err_connect + st.err_timeout + st.err_io + st.err_protocol + st.err_reply + st.err_pool +
               st.err_circuit;
    sums[3] += st.by_lease + st.by_cache;
    sums[4] += st.lease_permits;
    sums[5] += st.lease_dropped;
}

#else /* built without the Redis tier: never called (rls_redis_enabled() is false) */

struct sluice_redis *rls_redis_make(const char *full_key, const char *spec, char *err, size_t errlen)
{
    (void)full_key;
    (void)spec;
    snprintf(err, errlen, "built without the Redis tier");
    return NULL;
}

void rls_redis_free(struct sluice_redis *r) { (void)r; }

void rls_redis_stats_add(const struct sluice_redis *r, uint64_t sums[RLS_REDIS_SUMS])
{
    (void)r;
    (void)sums;
}

int rls_redis_decide_all(struct sluice_redis *const *rs, const void *const *keys, const size_t *keylens,
                         const uint64_t *hits, size_t n, sluice_result *per, bool *allowed)
{
    (void)rs;
    (void)keys;
    (void)keylens;
    (void)hits;
    (void)n;
    (void)per;
    (void)allowed;
    return -1;
}

bool rls_redis_decide(struct sluice_redis *r, const void *key, size_t keylen, uint64_t hits, sluice_result *res,
                      bool *failed)
{
    (void)r;
    (void)key;
    (void)keylen;
    (void)hits;
    memset(res, 0, sizeof *res);
    res->retry_after_ns = -1;
    *failed = true;
    return false;
}

#endif
