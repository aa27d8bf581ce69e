/* redis.c -- the Redis tier's public API: two tiers and a failure policy.
 *
 * A decision goes through, in order:
 *
 *   1. the local_spec limiter (a sluice_table), when configured: a refusal
 *      there ends it (SRC_LOCAL); a calendar quota (tz=) there is decided
 *      at its own clock, the epoch's (sluice_table_now_ns), unless
 *      clock_fn gives the time;
 *   2. with leases (lease_max > 0), this process's entry for the key, under
 *      its stripe's mutex: a live lease with enough permits admits
 *      (SRC_LEASE); a remembered refusal of a request at most as large that
 *      has not yet reached its retry time refuses (SRC_CACHE);
 *   3. a round trip: the key's script decides, exactly as the contract says,
 *      at Redis's time (SRC_REDIS); with leases it may grant more than
 *      asked, and the surplus becomes the entry's new lease;
 *   4. if Redis cannot decide by the deadline: the policy (SRC_POLICY).
 *
 * Leases.  One thread per limiter and key fetches a lease at a time (the
 * entry's `fetching` flag); it drops what is left of the old lease when it
 * sends, so a limiter never holds more than lease_cap permits of a key,
 * whether in its pool or in flight.  Other threads that find the pool empty
 * meanwhile are refused at once (SRC_CACHE, retry_after_ns = the round-trip
 * time) rather than queueing round trips; the lease size adapts so that
 * this is rare while Redis has permits.  The lease's lifetime counts from
 * the send, which precedes Redis's grant.  Its size: `want` (the surplus
 * asked for) starts at 1, doubles when a lease is used up within half its
 * lifetime, halves when one expires more than half unspent; the surplus
 * kept never exceeds lease_cap.
 *
 * Remembered refusals.  Redis's retry_after_ns for a refused request of p
 * permits is the least wait after which it could pass with no other
 * traffic; other traffic only delays it, and a larger request waits at
 * least as long.  So until send time + retry_after_ns (the send precedes
 * Redis's decision) every request of p or more permits would be refused by
 * Redis too.  The entry refuses them for max(retry_after_ns, lease_ttl/2)
 * (refresh_ns): past retry_after_ns this may refuse what Redis would grant,
 * but what is not taken stays in Redis (up to the burst) for the next
 * lease, so the global rate is kept while a process under an exhausted
 * limit asks Redis at most every lease_ttl/2.  A grant that leaves Redis
 * with less than one permit ("dry") is remembered the same way, for any
 * request, for max(the wait for one permit, lease_ttl/2), once the lease is
 * spent.
 *
 * Local tables: 64 stripes, each an open-addressing table under one mutex,
 * holding at most ceil(max_keys / 64) entries; when a stripe is full, the
 * entries with no live lease, refusal or fetch are dropped (and if that
 * frees too little, all but the fetching ones): dropping an entry only
 * drops permits (fewer admissions, never more) and costs a round trip.
 * Keys are hashed with SipHash-1-3 under a random per-limiter seed, as the
 * core's tables hash (clients choose the keys; without the seed they cannot
 * pick ones that collide).  Every block is allocated through the core's
 * hook (src/base/shared.h); the limiter itself is cache-line aligned, for its
 * stripes.
 */
#define _GNU_SOURCE
#include "redis_internal.h"
#include "alg/sliding_approx.h"
#include "alg/held.h" /* sluice__combine: the composite's rule */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SR_STRIPES 64
#define MS 1000000ULL

typedef struct sr_entry {
    uint64_t hash; /* 0: an empty slot */
    char *key;
    uint32_t keylen;
    bool fetching;
    uint64_t lease_left, lease_exp, lease_t0, lease_size;
    uint64_t lease_gen; /* the stripe's count when this lease began or
                           ended: permits taken from a lease go back only
                           into the same one (try_acquire_all) */
    uint64_t want;
    uint64_t deny_p, deny_until; /* deny_p = 0: nothing remembered */
} sr_entry;

typedef struct sr_stripe {
    _Alignas(64) pthread_mutex_t mu;
    sr_entry *e;
    uint32_t cap, count;
    uint64_t gen; /* lease generations handed out */
    uint64_t allowed, denied, by_lease, by_cache, leases, lease_permits, lease_dropped;
} sr_stripe;

struct sluice_redis {
    sr_params pp;
    sr_cluster conn; /* the server, or the cluster's nodes */
    int policy;
    uint32_t procs;
    char *prefix;
    size_t prefixlen;
    char specid[9];
    char target[SR_HOST_MAX + 1100]; /* the Redis it asks: host, port, cluster
                                        mode, user (try_acquire_all) */
    uint64_t cmd_timeout_ns;
    uint64_t lease_cap, lease_ttl_ns;
    uint64_t refresh_ns; /* least time between asking a dry Redis again */
    _Atomic uint64_t rtt_ns; /* round-trip time, a moving average */
    uint32_t stripe_limit;
    uint64_t hash_seed[2]; /* the local tables' SipHash key */
    sluice_table *front, *fallback;
    bool front_epoch; /* local_spec is a calendar quota (tz=): its own clock */
    char fallback_spec[SLUICE_SPEC_MAX];
    uint64_t (*clock_fn)(void *);
    void *clock_arg;
    /* the script arguments that do not change: q_us, then a b cap or wt L */
    char sarg[4][24];
    size_t sarglen[4];
    int nsarg;
    _Atomic uint64_t allowed, denied, by_redis, by_local, by_policy;
    sr_stripe stripes[SR_STRIPES];
};

static void add(_Atomic uint64_t *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }
static uint64_t rd(const _Atomic uint64_t *c) { return atomic_load_explicit(c, memory_order_relaxed); }

static uint64_t local_now(const sluice_redis *r)
{
    return r->clock_fn ? r->clock_fn(r->clock_arg) : sluice_now_ns();
}

__attribute__((format(printf, 3, 4))) static void errf(char *err, size_t errlen,
                                                      const char *fmt, ...)
{
    if (!errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- configuration -------------------------------------------------------- */

void sluice_redis_config_init(sluice_redis_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->host = "127.0.0.1";
    cfg->port = 6379;
    cfg->connect_timeout_ms = 100;
    cfg->command_timeout_ms = 50;
    cfg->policy = SLUICE_REDIS_FAIL_CLOSED;
    cfg->expected_processes = 1;
    cfg->key_prefix = "sluice:";
    cfg->lease_max = 0;
    cfg->lease_ttl_ms = 0;
    cfg->local_spec = NULL;
    cfg->max_keys = 65536;
    cfg->pool_size = 8;
    cfg->circuit_threshold = 3;
    cfg->retry_min_ms = 10;
    cfg->retry_max_ms = 1000;
}

static int check_config(const sluice_redis_config *c, char *err, size_t errlen)
{
#define BAD(msg, v)                                                                            \
    do {                                                                                       \
        errf(err, errlen, msg, (unsigned long long)(v));                                       \
        return SLUICE_EINVAL;                                                                  \
    } while (0)
    if (!c->host || !*c->host) {
        errf(err, errlen, "%s", "no Redis host");
        return SLUICE_EINVAL;
    }
    if (c->port < 1 || c->port > 65535) BAD("bad Redis port %llu", (unsigned)c->port);
    if (c->connect_timeout_ms < 1 || c->connect_timeout_ms > 600000)
        BAD("bad connect_timeout_ms %llu (1 .. 600000)", c->connect_timeout_ms);
    if (c->command_timeout_ms < 1 || c->command_timeout_ms > 600000)
        BAD("bad command_timeout_ms %llu (1 .. 600000)", c->command_timeout_ms);
    if (c->policy < SLUICE_REDIS_FAIL_CLOSED || c->policy > SLUICE_REDIS_FAIL_LOCAL)
    {
        errf(err, errlen, "bad policy %d (SLUICE_REDIS_FAIL_CLOSED, _OPEN or _LOCAL)", c->policy);
        return SLUICE_EINVAL;
    }
    if (c->expected_processes < 1 || c->expected_processes > 1000000)
        BAD("bad expected_processes %llu (1 .. 1000000)", c->expected_processes);
    if (!c->key_prefix || strlen(c->key_prefix) > 256 || strpbrk(c->key_prefix, "{}")) {
        errf(err, errlen, "bad key_prefix \"%s\" (at most 256 bytes, no '{' or '}')",
             c->key_prefix ? c->key_prefix : "(null)");
        return SLUICE_EINVAL;
    }
    if (c->max_keys < 1) BAD("bad max_keys %llu (>= 1)", c->max_keys);
    if (c->pool_size < 1 || c->pool_size > 1024) BAD("bad pool_size %llu (1 .. 1024)", c->pool_size);
    if (c->circuit_threshold < 1) BAD("bad circuit_threshold %llu (>= 1)", c->circuit_threshold);
    if (c->retry_min_ms < 1 || c->retry_max_ms < c->retry_min_ms)
        BAD("bad retry_min_ms %llu (1 .. retry_max_ms)", c->retry_min_ms);
    if (c->lease_ttl_ms > 3600000) BAD("bad lease_ttl_ms %llu (0 .. 3600000)", c->lease_ttl_ms);
    if (c->cluster < SLUICE_REDIS_CLUSTER_AUTO || c->cluster > SLUICE_REDIS_CLUSTER_ON) {
        errf(err, errlen, "bad cluster %d (SLUICE_REDIS_CLUSTER_AUTO, _OFF or _ON)", c->cluster);
        return SLUICE_EINVAL;
    }
    if (c->username && !c->password) {
        errf(err, errlen, "%s", "a username needs a password");
        return SLUICE_EINVAL;
    }
    if ((c->username && (strlen(c->username) > 1024 || strpbrk(c->username, " \r\n"))) ||
        (c->password && strlen(c->password) > 1024)) {
        errf(err, errlen, "%s", "bad username or password (at most 1024 bytes; no space in a username)");
        return SLUICE_EINVAL;
    }
    return 0;
#undef BAD
}

/* The FAIL_LOCAL spec: LIMIT / P per PERIOD, exactly when it can be said
 * (L/P permits per W == L permits per P*W), else rounded down; burst / P,
 * at least 1; the spec's clock. */
static int fallback_spec(const sr_params *pp, uint32_t P, char *out, size_t n)
{
    uint64_t L = pp->limit, W = pp->period_ns, B = pp->capacity;
    if (P > 1 && pp->script == SR_SCRIPT_TB) {
        B = B / P ? B / P : 1;
        if (L % P == 0) L /= P;
        else if (W <= SLUICE_MAX_PERIOD_NS / P) W *= P;
        else L = L / P ? L / P : 1;
    } else if (P > 1) {
        L = L / P ? L / P : 1;
    }
    return sluice__redis_spec(pp->script, L, W, B, pp->coarse, out, n);
}

/* SPECID: 8 hex digits naming the spec in the Redis key.  Not the local
 * tables' hash: it must be the same in every process and every version
 * that shares the keys, so it is unkeyed (FNV-1a of the canonical spec). */
static uint32_t fnv32(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

sluice_redis *sluice_redis_new(const char *spec, const sluice_redis_config *cfg, char *err,
                               size_t errlen)
{
    if (errlen) err[0] = '\0';
    sluice_redis_config defaults;
    if (!cfg) {
        sluice_redis_config_init(&defaults);
        cfg = &defaults;
    }
    if (!spec) {
        errf(err, errlen, "%s", "no spec");
        return NULL;
    }
    if (check_config(cfg, err, errlen) != 0) return NULL;
    sluice_redis *r = sluice__calloc64(sizeof *r); /* _Alignas(64) stripes */
    if (!r) {
        errf(err, errlen, "%s", "out of memory");
        return NULL;
    }
    if (sluice__redis_params(spec, &r->pp, err, errlen) != 0) {
        sluice__free64(r);
        return NULL;
    }
    r->policy = cfg->policy;
    r->procs = cfg->expected_processes;
    r->cmd_timeout_ns = (uint64_t)cfg->command_timeout_ms * MS;
    r->clock_fn = cfg->clock_fn;
    r->clock_arg = cfg->clock_arg;
    snprintf(r->specid, sizeof r->specid, "%08x", (unsigned)fnv32(r->pp.canon));
    snprintf(r->target, sizeof r->target, "%.255s %d %d %.1024s", cfg->host, cfg->port, cfg->cluster,
             cfg->username ? cfg->username : "");
    r->prefixlen = strlen(cfg->key_prefix);
    r->prefix = sluice__malloc(r->prefixlen + 1);
    sluice__random_seed(r->hash_seed);
    for (int i = 0; i < SR_STRIPES; i++) pthread_mutex_init(&r->stripes[i].mu, NULL);
    uint64_t cap_spec = r->pp.capacity, L = r->pp.limit, W = r->pp.period_ns;
    if (cfg->lease_max > 0) {
        uint64_t c = L / (100ULL * r->procs);
        if (c > cfg->lease_max) c = cfg->lease_max;
        if (c > cap_spec) c = cap_spec;
        r->lease_cap = c ? c : 1;
        uint64_t ttl = cfg->lease_ttl_ms ? (uint64_t)cfg->lease_ttl_ms * MS : W / 100;
        if (!cfg->lease_ttl_ms && ttl > 100 * MS) ttl = 100 * MS;
        r->lease_ttl_ns = ttl < MS ? MS : ttl;
        r->refresh_ns = r->lease_ttl_ns / 2;
    }
    uint64_t mk = cfg->max_keys > (size_t)UINT32_MAX ? UINT32_MAX : cfg->max_keys;
    r->stripe_limit = (uint32_t)((mk + SR_STRIPES - 1) / SR_STRIPES);
    if (r->stripe_limit < 4) r->stripe_limit = 4;
    if (!r->prefix) goto oom;
    memcpy(r->prefix, cfg->key_prefix, r->prefixlen + 1);
    if (cfg->local_spec) {
        r->front = sluice_table_new(cfg->local_spec, cfg->max_keys, err, errlen);
        if (!r->front) {
            char why[200];
            snprintf(why, sizeof why, "%s", err);
            if (errlen) snprintf(err, errlen, "local_spec: %s", why);
            goto fail;
        }
        sluice_spec_info fi;
        r->front_epoch = sluice_spec_parse(cfg->local_spec, &fi, NULL, 0) == 0
                         && fi.clock == SLUICE_CLOCK_REALTIME;
    }
    if (fallback_spec(&r->pp, r->procs, r->fallback_spec, sizeof r->fallback_spec) != 0) {
        errf(err, errlen, "cannot divide \"%s\" among the expected processes", r->pp.canon);
        goto fail;
    }
    if (r->policy == SLUICE_REDIS_FAIL_LOCAL) {
        r->fallback = sluice_table_new(r->fallback_spec, cfg->max_keys, err, errlen);
        if (!r->fallback) goto fail;
    }
    /* static script arguments */
    uint64_t q_us = r->pp.quantum_ns / 1000;
    uint64_t v[3];
    if (r->pp.script == SR_SCRIPT_TB) {
        v[0] = r->pp.a, v[1] = r->pp.b, v[2] = r->pp.cap;
        r->nsarg = 4;
    } else {
        v[0] = r->pp.wt, v[1] = r->pp.limit;
        r->nsarg = 3;
    }
    snprintf(r->sarg[0], sizeof r->sarg[0], "%llu", (unsigned long long)q_us);
    for (int i = 1; i < r->nsarg; i++)
        snprintf(r->sarg[i], sizeof r->sarg[i], "%llu", (unsigned long long)v[i - 1]);
    for (int i = 0; i < r->nsarg; i++) r->sarglen[i] = strlen(r->sarg[i]);
    sr_conn_cfg cc = {.pool_size = cfg->pool_size,
                      .connect_timeout_ns = (uint64_t)cfg->connect_timeout_ms * MS,
                      .threshold = cfg->circuit_threshold,
                      .retry_min_ns = (uint64_t)cfg->retry_min_ms * MS,
                      .retry_max_ns = (uint64_t)cfg->retry_max_ms * MS,
                      .user = cfg->username,
                      .pass = cfg->password};
    if (sluice__cluster_init(&r->conn, cfg->host, cfg->port, &cc, cfg->cluster) != 0) goto oom;
    return r;
oom:
    errf(err, errlen, "%s", "out of memory");
fail:
    sluice_table_free(r->front);
    sluice_table_free(r->fallback);
    for (int i = 0; i < SR_STRIPES; i++) pthread_mutex_destroy(&r->stripes[i].mu);
    sluice__free(r->prefix);
    sluice__free64(r);
    return NULL;
}

void sluice_redis_free(sluice_redis *r)
{
    if (!r) return;
    sluice__cluster_fini(&r->conn);
    for (int i = 0; i < SR_STRIPES; i++) {
        sr_stripe *s = &r->stripes[i];
        for (uint32_t j = 0; j < s->cap; j++)
            if (s->e[j].hash) sluice__free(s->e[j].key);
        sluice__free(s->e);
        pthread_mutex_destroy(&s->mu);
    }
    sluice_table_free(r->front);
    sluice_table_free(r->fallback);
    sluice__free(r->prefix);
    sluice__free64(r);
}

void sluice_redis_limits_get(const sluice_redis *r, sluice_redis_limits *out)
{
    memset(out, 0, sizeof *out);
    out->quantum_ns = r->pp.quantum_ns;
    out->lease_cap = r->lease_cap;
    out->lease_ttl_ns = r->lease_ttl_ns;
    if (r->lease_cap) {
        uint64_t b = (uint64_t)r->procs * r->lease_cap;
        if (r->pp.script == SR_SCRIPT_TB) {
            sr_u128 t = ((sr_u128)r->pp.limit * r->lease_ttl_ns + r->pp.period_ns - 1) / r->pp.period_ns;
            if (t < b) b = (uint64_t)t;
        }
        out->overadmit_bound = b;
    }
    snprintf(out->local_fallback_spec, sizeof out->local_fallback_spec, "%s", r->fallback_spec);
}

int sluice_redis_key_name(const sluice_redis *r, const void *key, size_t keylen, char *buf,
                          size_t buflen)
{
    size_t n = r->prefixlen + 1 + keylen + 2 + 8;
    if (n + 1 > buflen || n > INT32_MAX) return SLUICE_ENOSPC;
    char *p = buf;
    memcpy(p, r->prefix, r->prefixlen), p += r->prefixlen;
    *p++ = '{';
    if (keylen) memcpy(p, key, keylen), p += keylen;
    *p++ = '}';
    *p++ = ':';
    memcpy(p, r->specid, 8), p += 8;
    *p = '\0';
    return (int)n;
}

/* ---- one round trip ------------------------------------------------------- */

typedef struct sr_outcome {
    bool ok;
    uint64_t granted;
    uint64_t remaining;     /* the contract's, at Redis's time, after the grant */
    int64_t retry_after_ns; /* the contract's */
    uint64_t retry1_ns;     /* after the decision: the least wait before a
                               request for 1 permit could pass */
    uint64_t server_ns;
} sr_outcome;

/* What a script is asked for a request of p permits: need, p clamped to
 * capacity + 1 (refused alike, and exact in doubles), and want, the most it
 * may grant (a lease's surplus): at least need, at most capacity unless
 * need is above it. */
static void need_want(const sr_params *pp, uint64_t p, uint64_t want, uint64_t *need_out,
                      uint64_t *want_out)
{
    const uint64_t need = p > pp->capacity ? pp->capacity + 1 : p;
    if (want < need) want = need;
    if (want > pp->capacity) want = need > pp->capacity ? need : pp->capacity;
    *need_out = need;
    *want_out = want;
}

/* The reply fields of a key's script: ok, granted, then its state. */
static int fields_of(int script)
{
    return script == SR_SCRIPT_TB ? SR_TB_FIELDS : script == SR_SCRIPT_FW ? SR_FW_FIELDS : SR_SA_FIELDS;
}

/* One key's outcome from its script's reply v[0 .. fields_of() - 1] (ok,
 * granted, then the script's state), for a request of p permits (need, as
 * sent: p clamped to capacity + 1; want >= need).  `chargeable`: a key the
 * script may have charged (the single-key scripts; the all-or-nothing one
 * when every key allowed); else its granted must be 0 and its state is
 * without the request's permits.  Returns false for a value out of range: a
 * reply no script of ours writes (someone else's key, a damaged value). */
static bool outcome(const sr_params *pp, uint64_t p, uint64_t need, uint64_t want, bool chargeable,
                    const long long *v, sr_outcome *o)
{
    const int nv = fields_of(pp->script);
    for (int i = 0; i < nv; i++)
        if (v[i] < 0) return false;
    const uint64_t q = pp->quantum_ns, now = (uint64_t)v[nv - 1];
    if (v[0] > 1 || now >= SR_TWO53 || now > (uint64_t)INT64_MAX / q) return false;
    o->ok = v[0] == 1;
    o->granted = (uint64_t)v[1];
    if (o->ok && chargeable ? (o->granted < need || o->granted > want) : o->granted != 0) return false;
    o->server_ns = now * q;
    if (pp->script == SR_SCRIPT_TB) {
        uint64_t x = (uint64_t)v[2];
        /* a refusal of p <= burst means fewer than p tokens */
        if (x > pp->cap || (!o->ok && p <= pp->capacity && (sr_u128)p * pp->b <= x)) return false;
        o->remaining = x / pp->b;
        o->retry1_ns = x >= pp->b ? 0
                                  : (uint64_t)((((sr_u128)(pp->b - x)) * q + pp->a - 1) / pp->a);
        if (o->ok) o->retry_after_ns = 0;
        else if (p > pp->capacity) o->retry_after_ns = -1;
        else {
            sr_u128 d = ((sr_u128)p * pp->b - x) * q;
            o->retry_after_ns = (int64_t)((d + pp->a - 1) / pp->a);
        }
    } else if (pp->script == SR_SCRIPT_FW) {
        uint64_t rt = (uint64_t)v[2], c = (uint64_t)v[3];
        if (rt >= pp->wt || c > pp->limit || c < o->granted || (!o->ok && p <= pp->limit && c + p <= pp->limit))
            return false;
        o->remaining = pp->limit - c;
        /* the window ends (wt - rt) ticks later: at most W ns */
        uint64_t to_end = (pp->wt - rt) * q;
        o->retry1_ns = o->remaining ? 0 : to_end;
        if (o->ok) o->retry_after_ns = 0;
        else if (p > pp->limit) o->retry_after_ns = -1;
        else o->retry_after_ns = (int64_t)to_end;
    } else {
        uint64_t rt = (uint64_t)v[2], cur = (uint64_t)v[3], prev = (uint64_t)v[4];
        uint64_t wt = pp->wt, L = pp->limit;
        if (rt >= wt || cur > L || prev > L) return false;
        sr_u128 e = (sr_u128)prev * (wt - rt) + (sr_u128)cur * wt, lw = (sr_u128)L * wt;
        if (!o->ok && p <= L && e + (sr_u128)p * wt <= lw) return false; /* it had room */
        o->remaining = e >= lw ? 0 : (uint64_t)((lw - e) / wt);
        uint64_t W = pp->period_ns, rr = rt * q;
        /* the core's rule (sliding_approx.h), at Redis's offset rr; each
         * wait is at most 2W - rr < 2^63 */
        o->retry1_ns = o->remaining ? 0 : sluice__approx_wait_ns(W, L, prev, cur, rr, 1);
        if (o->ok) o->retry_after_ns = 0;
        else if (p > L) o->retry_after_ns = -1;
        else o->retry_after_ns = (int64_t)sluice__approx_wait_ns(W, L, prev, cur, rr, p);
    }
    return true;
}

/* sluice__redis_all_reply, for keys asked for up to wants[i] (NULL: no
 * surplus); os (NULL, or n entries) gets each key's outcome. */
static int all_reply(const sr_params *const *pps, const uint64_t *permits, const uint64_t *wants,
                     size_t n, const long long *v, size_t nv, sluice__answer *a, sr_outcome *os)
{
    if (n < 1 || n > SLUICE_COMPOSITE_MAX || nv < 1 || (v[0] != 0 && v[0] != 1)) return SLUICE_EBACKEND;
    const bool all = v[0] == 1;
    bool ok_all = true;
    size_t at = 1;
    for (size_t i = 0; i < n; i++) {
        const sr_params *pp = pps[i];
        const size_t f = (size_t)fields_of(pp->script);
        if (f > nv - at) return SLUICE_EBACKEND;
        uint64_t need, want;
        need_want(pp, permits[i], wants ? wants[i] : 0, &need, &want);
        sr_outcome o;
        if (!outcome(pp, permits[i], need, want, all, v + at, &o)) return SLUICE_EBACKEND;
        if (os) os[i] = o;
        at += f;
        ok_all = ok_all && o.ok;
        a[i].ok = o.ok;
        a[i].r = (sluice_result){.allowed = o.ok, .remaining = o.remaining,
                                 .retry_after_ns = o.retry_after_ns};
    }
    /* every field used, and the verdict is every key's */
    if (at != nv || ok_all != all) return SLUICE_EBACKEND;
    return all ? 1 : 0;
}

int sluice__redis_all_reply(const sr_params *const *pps, const uint64_t *permits, size_t n,
                            const long long *v, size_t nv, sluice__answer *a)
{
    return all_reply(pps, permits, NULL, n, v, nv, a, NULL);
}

static void note_rtt(sluice_redis *r, uint64_t t0)
{
    uint64_t el = sluice_now_ns() - t0, avg = atomic_load_explicit(&r->rtt_ns, memory_order_relaxed);
    atomic_store_explicit(&r->rtt_ns, avg ? avg - avg / 8 + el / 8 : el, memory_order_relaxed);
}

/* Ask Redis for p permits (and up to `want` >= p when leasing).  Returns 0
 * with *o filled, or a negative code (the error was counted). */
static int redis_decide(sluice_redis *r, const void *key, size_t keylen, uint64_t p,
                        uint64_t want, uint64_t deadline, sr_outcome *o, uint64_t *retry_at)
{
    char kbuf[512];
    size_t kcap = r->prefixlen + keylen + 16;
    char *kname = kcap <= sizeof kbuf ? kbuf : sluice__malloc(kcap);
    if (!kname) return SLUICE_ENOMEM;
    int kl = sluice_redis_key_name(r, key, keylen, kname, kcap);

    const sr_params *pp = &r->pp;
    uint64_t need;
    need_want(pp, p, want, &need, &want);
    char nbuf[2][24];
    snprintf(nbuf[0], sizeof nbuf[0], "%llu", (unsigned long long)need);
    snprintf(nbuf[1], sizeof nbuf[1], "%llu", (unsigned long long)want);
    const char *args[6];
    size_t lens[6];
    int n = 0;
    for (int i = 0; i < r->nsarg; i++) args[n] = r->sarg[i], lens[n++] = r->sarglen[i];
    args[n] = nbuf[0], lens[n++] = strlen(nbuf[0]);
    args[n] = nbuf[1], lens[n++] = strlen(nbuf[1]);
    long long v[SR_SA_FIELDS];
    int nout = fields_of(pp->script);
    uint64_t t0 = sluice_now_ns();
    const char *kn = kname;
    size_t knl = (size_t)kl;
    int rc = sluice__cluster_eval(&r->conn, pp->script, &kn, &knl, 1, args, lens, n, deadline, v,
                                  nout, retry_at);
    if (kname != kbuf) sluice__free(kname);
    if (rc != 0) return rc;
    note_rtt(r, t0);
    if (!outcome(pp, p, need, want, true, v, o)) {
        /* a reply no script of ours writes: someone else's key? */
        atomic_fetch_add_explicit(&r->conn.ct.err_protocol, 1, memory_order_relaxed);
        return SLUICE_EBACKEND;
    }
    return 0;
}

/* ---- the failure policy ------------------------------------------------------ */

static bool by_policy(sluice_redis *r, const void *key, size_t keylen, uint64_t p, uint64_t now,
                      int error, uint64_t retry_at, sluice_result *res, sluice_redis_info *info)
{
    add(&r->by_policy);
    info->source = SLUICE_REDIS_SRC_POLICY;
    info->error = error;
    bool ok;
    if (r->policy == SLUICE_REDIS_FAIL_OPEN) {
        ok = true;
        *res = (sluice_result){.allowed = true};
    } else if (r->policy == SLUICE_REDIS_FAIL_LOCAL) {
        ok = sluice_table_try_acquire_at(r->fallback, key, keylen, p, now, res);
    } else {
        uint64_t m = sluice_now_ns();
        uint64_t wait = retry_at > m ? retry_at - m : r->conn.cfg.retry_min_ns;
        if (wait < MS) wait = MS;
        ok = p == 0;
        *res = (sluice_result){.allowed = ok, .retry_after_ns = ok ? 0 : (int64_t)wait};
    }
    add(ok ? &r->allowed : &r->denied);
    return ok;
}

/* ---- the local tier's entries ---------------------------------------------- */

/* SipHash-1-3 under the limiter's random seed, as the core's tables hash:
 * keys come from clients, and without the seed they cannot be chosen to
 * collide in one stripe's probe run.  The low 6 bits pick the stripe, the
 * rest the slot. */
static uint64_t hash_key(const sluice_redis *r, const void *key, size_t n)
{
    return sluice__siphash13(r->hash_seed, n ? key : "", n) | 1; /* 0: an empty slot */
}

static sr_entry *find(sr_stripe *s, uint64_t h, const void *key, size_t keylen)
{
    if (!s->cap) return NULL;
    uint32_t mask = s->cap - 1;
    for (uint32_t i = (uint32_t)(h >> 6) & mask, n = 0; n < s->cap; i = (i + 1) & mask, n++) {
        sr_entry *e = &s->e[i];
        if (!e->hash) return NULL;
        if (e->hash == h && e->keylen == keylen && (keylen == 0 || memcmp(e->key, key, keylen) == 0))
            return e;
    }
    return NULL;
}

static bool live(const sr_entry *e, uint64_t now)
{
    return e->fetching || (e->lease_left && now < e->lease_exp) ||
           (e->deny_p && now < e->deny_until);
}

/* Rebuild the stripe's table with capacity `cap`, keeping the entries that
 * `keep` selects (mode 0: all; 1: live ones; 2: fetching ones). */
static bool rebuild(sr_stripe *s, uint32_t cap, int mode, uint64_t now)
{
    sr_entry *ne = sluice__calloc(cap, sizeof *ne);
    if (!ne) return false;
    uint32_t count = 0;
    for (uint32_t j = 0; j < s->cap; j++) {
        sr_entry *e = &s->e[j];
        if (!e->hash) continue;
        bool keep = mode == 0 || (mode == 1 ? live(e, now) : e->fetching);
        if (!keep) {
            if (e->lease_left) s->lease_dropped += e->lease_left;
            sluice__free(e->key);
            continue;
        }
        uint32_t i = (uint32_t)(e->hash >> 6) & (cap - 1);
        while (ne[i].hash) i = (i + 1) & (cap - 1);
        ne[i] = *e;
        count++;
    }
    sluice__free(s->e);
    s->e = ne;
    s->cap = cap;
    s->count = count;
    return true;
}

static sr_entry *find_or_add(sluice_redis *r, sr_stripe *s, uint64_t h, const void *key,
                             size_t keylen, uint64_t now)
{
    sr_entry *e = find(s, h, key, keylen);
    if (e) return e;
    if (s->count >= r->stripe_limit) {
        if (!rebuild(s, s->cap, 1, now)) return NULL;
        if (s->count >= r->stripe_limit - r->stripe_limit / 4 && !rebuild(s, s->cap, 2, now))
            return NULL;
        if (s->count >= r->stripe_limit) return NULL; /* every entry is fetching */
    }
    if ((s->count + 1) * 2 > s->cap) {
        uint32_t nc = s->cap ? s->cap * 2 : 16;
        if (!rebuild(s, nc, 0, now)) return NULL;
    }
    char *k = sluice__malloc(keylen);
    if (!k) return NULL;
    if (keylen) memcpy(k, key, keylen);
    uint32_t i = (uint32_t)(h >> 6) & (s->cap - 1);
    while (s->e[i].hash) i = (i + 1) & (s->cap - 1);
    e = &s->e[i];
    memset(e, 0, sizeof *e);
    e->hash = h;
    e->key = k;
    e->keylen = (uint32_t)keylen;
    e->want = 1;
    s->count++;
    return e;
}

/* Drop what is left of the entry's lease (counted), ending it: permits
 * taken from it can no longer go back. */
static void drop_lease(sr_stripe *s, sr_entry *e)
{
    s->lease_dropped += e->lease_left;
    e->lease_left = 0;
    e->lease_gen = ++s->gen;
}

/* Make k permits, granted by Redis at `now` beyond what the call spent,
 * the entry's new lease (a new generation: nothing taken from an older one
 * goes back into it). */
static void lease_install(const sluice_redis *r, sr_stripe *s, sr_entry *e, uint64_t k, uint64_t now)
{
    e->lease_left = k;
    e->lease_size = k;
    e->lease_t0 = now;
    e->lease_exp = now + r->lease_ttl_ns;
    e->lease_gen = ++s->gen;
    s->leases++;
    s->lease_permits += k;
}

/* Expire the entry's lease if its time is up, adapting `want`. */
static void expire_lease(const sluice_redis *r, sr_stripe *s, sr_entry *e, uint64_t now)
{
    (void)r;
    if (e->lease_left && now >= e->lease_exp) {
        if (e->lease_left * 2 > e->lease_size && e->want > 1) e->want /= 2;
        drop_lease(s, e);
    }
}

/* Spend p permits of the entry's live lease (lease_left >= p); a lease used
 * up within half its lifetime doubles the next one's size. */
static void spend(const sluice_redis *r, sr_entry *e, uint64_t p, uint64_t now)
{
    e->lease_left -= p;
    if (p && e->lease_left == 0 && now - e->lease_t0 < r->lease_ttl_ns / 2)
        e->want = e->want * 2 > r->lease_cap ? r->lease_cap : e->want * 2;
}

/* The tier's fetch.  Called with s->mu held and e (NULL: the stripe had no
 * room for the key) neither fetching nor holding enough: marks it fetching,
 * drops what is left of its lease, unlocks, asks Redis for `permits` and a
 * surplus of e->want, locks again, makes the surplus the entry's new lease
 * (or remembers Redis's refusal), and unlocks.  Returns 0 with *o and
 * *keep (the permits of the new lease, 0 if none), or the round trip's
 * error (nothing granted). */
static int fetch_unlock(sluice_redis *r, sr_stripe *s, sr_entry *e, uint64_t h, const void *key,
                        size_t keylen, uint64_t permits, uint64_t now, uint64_t deadline, sr_outcome *o,
                        uint64_t *keep, uint64_t *retry_at)
{
    uint64_t want = permits;
    const bool fetching = e != NULL;
    *keep = 0;
    if (e) {
        e->fetching = true;
        if (e->lease_left) drop_lease(s, e); /* too small for this request: replaced */
        want = permits + e->want;
    }
    pthread_mutex_unlock(&s->mu);

    int rc = redis_decide(r, key, keylen, permits, want, deadline, o, retry_at);

    pthread_mutex_lock(&s->mu);
    e = find(s, h, key, keylen);
    if (e && fetching) e->fetching = false;
    if (rc != 0) {
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    if (o->ok) {
        uint64_t k = o->granted - permits;
        if (k > r->lease_cap) k = r->lease_cap;
        if (e && fetching) {
            if (k) {
                lease_install(r, s, e, k, now);
                *keep = k;
            }
            e->deny_p = 0;
            if (o->retry1_ns > 0) { /* Redis ran dry: let it refill */
                e->deny_p = 1;
                e->deny_until = now + (o->retry1_ns > r->refresh_ns ? o->retry1_ns : r->refresh_ns);
            }
        } else if (k) {
            s->lease_dropped += k;
        }
    } else if (e) {
        uint64_t wait = (uint64_t)o->retry_after_ns;
        if (wait < r->refresh_ns) wait = r->refresh_ns;
        e->deny_p = permits;
        e->deny_until = o->retry_after_ns < 0 ? UINT64_MAX : now + wait;
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* With s->mu held: refuse from the entry without a round trip (counted as
 * by_cache) when Redis refused a request at least as large and its retry
 * time has not come, or another thread is fetching a lease for the key
 * (refused rather than queueing a second round trip: the lease size adapts
 * so that this is rare while Redis has permits). */
static bool cached_refusal(const sluice_redis *r, sr_stripe *s, const sr_entry *e, uint64_t permits,
                           uint64_t now, sluice_result *res)
{
    if (e->deny_p && permits >= e->deny_p && now < e->deny_until) {
        *res = (sluice_result){
            .allowed = false,
            .remaining = 0,
            .retry_after_ns = e->deny_until == UINT64_MAX ? -1 : (int64_t)(e->deny_until - now)};
    } else if (e->fetching) {
        uint64_t rtt = atomic_load_explicit(&r->rtt_ns, memory_order_relaxed);
        *res = (sluice_result){.allowed = false, .retry_after_ns = (int64_t)(rtt > 1000 ? rtt : 1000)};
    } else {
        return false;
    }
    s->by_cache++;
    s->denied++;
    return true;
}

/* ---- decisions ------------------------------------------------------------- */

static void fill_redis(sluice_result *res, sluice_redis_info *info, const sr_outcome *o,
                       uint64_t keep)
{
    info->source = SLUICE_REDIS_SRC_REDIS;
    info->server_time_ns = o->server_ns;
    info->granted = o->granted;
    res->allowed = o->ok;
    res->wait_ns = 0;
    res->remaining = o->remaining + keep;
    res->retry_after_ns = o->retry_after_ns;
    res->error = 0;
}

bool sluice_redis_try_acquire_ex(sluice_redis *r, const void *key, size_t keylen,
                                 uint64_t permits, sluice_result *res, sluice_redis_info *info)
{
    sluice_result rtmp;
    sluice_redis_info itmp;
    if (!res) res = &rtmp;
    if (!info) info = &itmp;
    memset(info, 0, sizeof *info);
    const uint64_t start = sluice_now_ns();
    const uint64_t deadline = start + r->cmd_timeout_ns;
    if (keylen > SLUICE_MAX_KEY_BYTES || (!key && keylen)) {
        *res = (sluice_result){.allowed = false, .retry_after_ns = -1};
        info->source = SLUICE_REDIS_SRC_LOCAL;
        info->error = SLUICE_EINVAL;
        add(&r->denied);
        add(&r->by_local);
        return false;
    }
    const uint64_t now = local_now(r);
    const uint64_t front_now = r->front_epoch && !r->clock_fn ? sluice_table_now_ns(r->front) : now;
    if (r->front && !sluice_table_try_acquire_at(r->front, key, keylen, permits, front_now, res)) {
        info->source = SLUICE_REDIS_SRC_LOCAL;
        add(&r->by_local);
        add(&r->denied);
        return false;
    }
    uint64_t retry_at = 0;
    sr_outcome o;
    if (r->lease_cap == 0) { /* exact: one round trip */
        int rc = redis_decide(r, key, keylen, permits, permits, deadline, &o, &retry_at);
        if (rc != 0) return by_policy(r, key, keylen, permits, now, rc, retry_at, res, info);
        fill_redis(res, info, &o, 0);
        add(&r->by_redis);
        add(o.ok ? &r->allowed : &r->denied);
        return o.ok;
    }

    /* two tiers */
    const uint64_t h = hash_key(r, key, keylen);
    sr_stripe *s = &r->stripes[h & (SR_STRIPES - 1)];
    pthread_mutex_lock(&s->mu);
    sr_entry *e = find_or_add(r, s, h, key, keylen, now);
    if (e) {
        expire_lease(r, s, e, now);
        if (e->lease_left >= permits) {
            spend(r, e, permits, now);
            *res = (sluice_result){.allowed = true, .remaining = e->lease_left};
            info->source = SLUICE_REDIS_SRC_LEASE;
            s->by_lease++;
            s->allowed++;
            pthread_mutex_unlock(&s->mu);
            return true;
        }
        if (cached_refusal(r, s, e, permits, now, res)) {
            info->source = SLUICE_REDIS_SRC_CACHE;
            pthread_mutex_unlock(&s->mu);
            return false;
        }
    }
    uint64_t keep;
    int rc = fetch_unlock(r, s, e, h, key, keylen, permits, now, deadline, &o, &keep, &retry_at);
    if (rc != 0) return by_policy(r, key, keylen, permits, now, rc, retry_at, res, info);
    fill_redis(res, info, &o, keep);
    add(&r->by_redis);
    add(o.ok ? &r->allowed : &r->denied);
    return o.ok;
}

bool sluice_redis_try_acquire(sluice_redis *r, const void *key, size_t keylen, uint64_t permits,
                              sluice_result *res)
{
    return sluice_redis_try_acquire_ex(r, key, keylen, permits, res, NULL);
}

/* ---- all or nothing across limits ----------------------------------------- */

static int all_refuse(size_t n, int rc, sluice_result *res, sluice_result *per_limit)
{
    sluice_result e = {.allowed = false, .retry_after_ns = -1, .error = rc};
    if (res) *res = e;
    for (size_t i = 0; per_limit && i < n; i++) per_limit[i] = e;
    return rc;
}

/* Whether two limits' keys are one Redis key.  The names PREFIX{KEY}:SPECID
 * are equal iff the prefixes, keys and SPECIDs are: a prefix holds no '{',
 * and SPECID is the last 8 bytes. */
static bool same_key(const sluice_redis *a, const void *ka, size_t la, const sluice_redis *b,
                     const void *kb, size_t lb)
{
    return a->prefixlen == b->prefixlen && memcmp(a->prefix, b->prefix, a->prefixlen) == 0 &&
           memcmp(a->specid, b->specid, 8) == 0 && la == lb && (la == 0 || memcmp(ka, kb, la) == 0);
}

/* Limits in one run of the all-or-nothing script, key i asked for
 * permits[i] and up to wants[i] (NULL: no surplus; the surplus is a lease,
 * for the leased limits of try_acquire_all): 1 admitted, 0 refused (a[]
 * gets each limit's answer, os[] (may be NULL) each key's outcome; each
 * limit counts the request), or a negative code with nothing counted but
 * the error.  rs[0]'s connections and deadline serve the call. */
static int all_script(sluice_redis *const *rs, const void *const *keys, const size_t *keylens,
                      const uint64_t *permits, const uint64_t *wants, size_t n, sluice__answer *a,
                      sr_outcome *os)
{
    sluice_redis *r0 = rs[0];
    const uint64_t deadline = sluice_now_ns() + r0->cmd_timeout_ns;
    /* the key names, in one buffer */
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += rs[i]->prefixlen + keylens[i] + 16;
    char kbuf[2048];
    char *names = total <= sizeof kbuf ? kbuf : sluice__malloc(total);
    if (!names) return SLUICE_ENOMEM;
    const char *kn[SLUICE_COMPOSITE_MAX];
    size_t knl[SLUICE_COMPOSITE_MAX];
    /* the arguments: per key script, q_us, its static ones (q_us first),
     * need, want */
    const char *args[SLUICE_COMPOSITE_MAX * 7];
    size_t lens[SLUICE_COMPOSITE_MAX * 7];
    char nums[SLUICE_COMPOSITE_MAX][3][24];
    uint64_t need[SLUICE_COMPOSITE_MAX], want[SLUICE_COMPOSITE_MAX];
    int na = 0, nout = 1, rc = 0;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const sluice_redis *r = rs[i];
        int kl = sluice_redis_key_name(r, keys[i], keylens[i], names + off, total - off);
        if (kl < 0) { /* cannot happen: sized above */
            rc = kl;
            break;
        }
        kn[i] = names + off;
        knl[i] = (size_t)kl;
        off += (size_t)kl + 1;
        need_want(&r->pp, permits[i], wants ? wants[i] : 0, &need[i], &want[i]);
        snprintf(nums[i][0], sizeof nums[i][0], "%d", r->pp.script);
        snprintf(nums[i][1], sizeof nums[i][1], "%llu", (unsigned long long)need[i]);
        snprintf(nums[i][2], sizeof nums[i][2], "%llu", (unsigned long long)want[i]);
        args[na] = nums[i][0], lens[na++] = strlen(nums[i][0]);
        for (int j = 0; j < r->nsarg; j++) args[na] = r->sarg[j], lens[na++] = r->sarglen[j];
        args[na] = nums[i][1], lens[na++] = strlen(nums[i][1]);
        args[na] = nums[i][2], lens[na++] = strlen(nums[i][2]);
        nout += fields_of(r->pp.script);
    }
    long long v[1 + SLUICE_COMPOSITE_MAX * SR_SA_FIELDS];
    uint64_t retry_at = 0, t0 = sluice_now_ns();
    if (rc == 0)
        rc = sluice__cluster_eval(&r0->conn, SR_SCRIPT_ALL, kn, knl, (int)n, args, lens, na, deadline, v,
                                  nout, &retry_at);
    if (names != kbuf) sluice__free(names);
    if (rc != 0) return rc;
    note_rtt(r0, t0);
    const sr_params *pps[SLUICE_COMPOSITE_MAX];
    for (size_t i = 0; i < n; i++) pps[i] = &rs[i]->pp;
    rc = all_reply(pps, permits, want, n, v, (size_t)nout, a, os);
    if (rc < 0) {
        atomic_fetch_add_explicit(&r0->conn.ct.err_protocol, 1, memory_order_relaxed);
        return rc;
    }
    const bool all = rc == 1;
    for (size_t i = 0; i < n; i++) {
        add(&rs[i]->by_redis);
        add(all ? &rs[i]->allowed : &rs[i]->denied);
    }
    return all ? 1 : 0;
}

/* Limits with leases (some, or all, of the call's).
 *
 * Leased permits are already counted in Redis: Redis charged them when it
 * granted the lease.  So spending them here, or putting back into the same
 * live lease permits taken from it a moment ago, moves nothing in Redis;
 * only a script run does.  The call runs:
 *
 *   (a) take p_i from each leased limit's live lease for its key, in one
 *       order (limiter address, then key), each under its stripe's mutex
 *       alone (never two mutexes at once: no lock order to keep); a
 *       remembered refusal, or another thread fetching, refuses the call
 *       there (SRC_CACHE, as one decision would);
 *   (b) the leased limits whose lease lacked permits (marked fetching, what
 *       was left of their lease dropped, as the tier's fetch does) and the
 *       exact limits go to Redis in ONE run of the all-or-nothing script:
 *       each short leased key asks for p_i and a lease's surplus (want),
 *       each exact one for p_i.  Redis charges all of them or none,
 *       atomically; the surpluses become the entries' new leases, a
 *       refusal is remembered as one decision's is;
 *   admitted: the permits in hand are spent; refused (or an error): every
 *   take of (a) goes back into its entry's lease, but only into the same
 *   lease (its generation, lease_gen, which a new lease, a drop or an
 *   expiry changes) while it lives, and only up to lease_cap; the rest is
 *   dropped and counted as lease_dropped, as an unspent lease is.
 *
 * Why a refused call charges nothing and none over-admits: every permit
 * spent was granted by Redis (in a lease, or by (b)'s run, which grants
 * only when every key allows), and each is spent at most once: it is in
 * exactly one place at a time (a lease, or one call's hand), moved under
 * the stripe's mutex.  A refused call's (b) wrote nothing in Redis, and
 * each permit it held from (a) is back in the lease it came from, where
 * later decisions spend it exactly as if never taken, or dropped (fewer
 * admissions, never more).  Permits back in a lease keep that lease's
 * expiry, no lease exceeds lease_cap, and a call holding permits is one
 * holding them in flight, so the tier's bound (P * lease_cap per key over
 * any interval, docs/redis.md) is unchanged.  While the call holds them
 * (across (b)'s round trip) other calls of the process see a smaller
 * lease and may be refused or fetch anew; then the put back finds a new
 * generation and drops them.  Nothing waits for another thread (a fetch in
 * progress refuses); the one round trip has the call's deadline; on a
 * Redis Cluster (b)'s keys must share a slot (SLUICE_ERANGE, after the
 * takes went back).  Loops: at most 3n entry visits and one script. */
typedef struct sr_hand {
    uint64_t h;    /* the key's hash in its limiter */
    uint64_t took; /* permits held by the call */
    uint64_t gen;  /* the lease they go back to (0: none: dropped) */
    bool fetched;  /* decided by a round trip of this call */
    bool counted;  /* refused from the entry (counted there) */
} sr_hand;

/* The leased limits' order: limiter address, then key. */
static bool before(sluice_redis *const *rs, const void *const *keys, const size_t *keylens, size_t x,
                   size_t y)
{
    if (rs[x] != rs[y]) return (uintptr_t)rs[x] < (uintptr_t)rs[y];
    size_t m = keylens[x] < keylens[y] ? keylens[x] : keylens[y];
    int c = m ? memcmp(keys[x], keys[y], m) : 0;
    return c < 0 || (c == 0 && keylens[x] < keylens[y]);
}

/* With s->mu held: take p from the entry's live lease if it holds enough. */
static bool take(sluice_redis *r, sr_stripe *s, sr_entry *e, uint64_t p, uint64_t now, sr_hand *t,
                 sluice__answer *a)
{
    expire_lease(r, s, e, now);
    if (e->lease_left < p) return false;
    spend(r, e, p, now);
    t->took = p;
    t->gen = e->lease_gen;
    *a = (sluice__answer){.ok = true, .r = {.allowed = true, .remaining = e->lease_left}};
    return true;
}

/* Put the call's permits back into the lease they came from if it is the
 * same one and alive, up to lease_cap; drop the rest (counted). */
static void put_back(sluice_redis *r, const void *key, size_t keylen, sr_hand *t)
{
    if (!t->took) return;
    sr_stripe *s = &r->stripes[t->h & (SR_STRIPES - 1)];
    pthread_mutex_lock(&s->mu);
    const uint64_t now = local_now(r);
    sr_entry *e = find(s, t->h, key, keylen);
    uint64_t back = 0;
    if (e && t->gen && e->lease_gen == t->gen && now < e->lease_exp) {
        back = r->lease_cap > e->lease_left ? r->lease_cap - e->lease_left : 0;
        if (back > t->took) back = t->took;
        e->lease_left += back;
    }
    s->lease_dropped += t->took - back;
    pthread_mutex_unlock(&s->mu);
    t->took = 0;
}

static int all_leased(sluice_redis *const *rs, const void *const *keys, const size_t *keylens,
                      const uint64_t *permits, size_t n, sluice_result *res, sluice_result *per_limit)
{
    size_t ord[SLUICE_COMPOSITE_MAX], ex[SLUICE_COMPOSITE_MAX], nl = 0, ne = 0;
    for (size_t i = 0; i < n; i++) {
        if (rs[i]->lease_cap) ord[nl++] = i;
        else ex[ne++] = i;
    }
    for (size_t i = 1; i < nl; i++) { /* insertion sort: n is small */
        size_t x = ord[i], j = i;
        for (; j > 0 && before(rs, keys, keylens, x, ord[j - 1]); j--) ord[j] = ord[j - 1];
        ord[j] = x;
    }
    sr_hand t[SLUICE_COMPOSITE_MAX];
    sluice__answer a[SLUICE_COMPOSITE_MAX];
    memset(t, 0, sizeof t);
    for (size_t i = 0; i < n; i++) /* a limit the call never reached: no answer of its own */
        a[i] = (sluice__answer){.ok = true, .r = {.allowed = true}};
    int verdict = 1; /* 1 admitted, 0 refused, < 0 an error */
    bool shortage[SLUICE_COMPOSITE_MAX] = {false};
    /* (a) */
    for (size_t k = 0; k < nl && verdict == 1; k++) {
        const size_t i = ord[k];
        sluice_redis *r = rs[i];
        const uint64_t now = local_now(r);
        t[i].h = hash_key(r, keys[i], keylens[i]);
        sr_stripe *s = &r->stripes[t[i].h & (SR_STRIPES - 1)];
        pthread_mutex_lock(&s->mu);
        sr_entry *e = find_or_add(r, s, t[i].h, keys[i], keylens[i], now);
        if (e && take(r, s, e, permits[i], now, &t[i], &a[i])) {
            /* in hand */
        } else if (e && cached_refusal(r, s, e, permits[i], now, &a[i].r)) {
            a[i].ok = false;
            t[i].counted = true;
            verdict = 0;
        } else {
            shortage[i] = true;
        }
        pthread_mutex_unlock(&s->mu);
    }
    /* (b) the leased limits that lacked permits, and the exact ones, in one
     * script run: each short one asks for its permits and a lease's
     * surplus, marked fetching as the tier's fetch is */
    size_t sub[SLUICE_COMPOSITE_MAX], ns = 0;
    uint64_t want[SLUICE_COMPOSITE_MAX];
    bool marked[SLUICE_COMPOSITE_MAX] = {false};
    for (size_t k = 0; k < nl && verdict == 1; k++) {
        const size_t i = ord[k];
        if (!shortage[i]) continue;
        sluice_redis *r = rs[i];
        const uint64_t now = local_now(r);
        sr_stripe *s = &r->stripes[t[i].h & (SR_STRIPES - 1)];
        pthread_mutex_lock(&s->mu);
        sr_entry *e = find_or_add(r, s, t[i].h, keys[i], keylens[i], now);
        want[i] = permits[i];
        if (e && take(r, s, e, permits[i], now, &t[i], &a[i])) { /* another call brought a lease */
            shortage[i] = false;
        } else if (e && cached_refusal(r, s, e, permits[i], now, &a[i].r)) {
            a[i].ok = false;
            t[i].counted = true;
            verdict = 0;
        } else if (e) {
            marked[i] = e->fetching = true;
            if (e->lease_left) drop_lease(s, e); /* too small for this request: replaced */
            want[i] = permits[i] + e->want;
        }
        pthread_mutex_unlock(&s->mu);
        if (shortage[i] && verdict == 1) sub[ns++] = i;
    }
    for (size_t k = 0; k < ne; k++) sub[ns++] = ex[k];
    sr_outcome os[SLUICE_COMPOSITE_MAX];
    if (verdict == 1 && ns > 0) {
        sluice_redis *srs[SLUICE_COMPOSITE_MAX];
        const void *sk[SLUICE_COMPOSITE_MAX];
        size_t sl[SLUICE_COMPOSITE_MAX];
        uint64_t sp[SLUICE_COMPOSITE_MAX], sw[SLUICE_COMPOSITE_MAX];
        sluice__answer sa[SLUICE_COMPOSITE_MAX];
        sr_outcome so[SLUICE_COMPOSITE_MAX];
        for (size_t k = 0; k < ns; k++) {
            const size_t i = sub[k];
            srs[k] = rs[i], sk[k] = keys[i], sl[k] = keylens[i], sp[k] = permits[i];
            sw[k] = rs[i]->lease_cap ? want[i] : permits[i];
        }
        verdict = all_script(srs, sk, sl, sp, sw, ns, sa, so);
        for (size_t k = 0; k < ns && verdict >= 0; k++) {
            a[sub[k]] = sa[k];
            os[sub[k]] = so[k];
            t[sub[k]].fetched = true;
            t[sub[k]].counted = true; /* all_script counted it */
        }
    }
    /* the short leased limits' entries: the surplus becomes the lease, a
     * refusal by Redis is remembered, as after the tier's fetch */
    for (size_t k = 0; k < nl; k++) {
        const size_t i = ord[k];
        if (!shortage[i]) continue;
        sluice_redis *r = rs[i];
        const uint64_t now = local_now(r);
        sr_stripe *s = &r->stripes[t[i].h & (SR_STRIPES - 1)];
        pthread_mutex_lock(&s->mu);
        sr_entry *e = find(s, t[i].h, keys[i], keylens[i]);
        if (e && marked[i]) e->fetching = false;
        else e = NULL; /* evicted meanwhile, or never held */
        if (t[i].fetched && verdict == 1) {
            const sr_outcome *o = &os[i];
            uint64_t keep = o->granted - permits[i];
            if (keep > r->lease_cap) keep = r->lease_cap;
            if (e && keep) {
                lease_install(r, s, e, keep, now);
            } else {
                s->lease_dropped += keep;
                keep = 0;
            }
            if (e) {
                e->deny_p = 0;
                if (o->retry1_ns > 0) { /* Redis ran dry: let it refill */
                    e->deny_p = 1;
                    e->deny_until = now + (o->retry1_ns > r->refresh_ns ? o->retry1_ns : r->refresh_ns);
                }
            }
            a[i].r.remaining += keep;
        } else if (t[i].fetched && e && !a[i].ok) {
            const sr_outcome *o = &os[i];
            uint64_t wait = (uint64_t)o->retry_after_ns;
            if (wait < r->refresh_ns) wait = r->refresh_ns;
            e->deny_p = permits[i];
            e->deny_until = o->retry_after_ns < 0 ? UINT64_MAX : now + wait;
        }
        pthread_mutex_unlock(&s->mu);
    }
    const bool all = verdict == 1;
    for (size_t k = 0; k < nl; k++) {
        const size_t i = ord[k];
        sluice_redis *r = rs[i];
        if (!all) {
            if (a[i].ok) a[i].r.remaining += t[i].took; /* its answer without the request */
            put_back(r, keys[i], keylens[i], &t[i]);
        }
        if (verdict < 0 || t[i].counted) continue;
        if (all) {
            sr_stripe *s = &r->stripes[t[i].h & (SR_STRIPES - 1)];
            pthread_mutex_lock(&s->mu);
            s->by_lease++;
            s->allowed++;
            pthread_mutex_unlock(&s->mu);
        } else {
            add(&r->denied);
        }
    }
    if (verdict < 0) return all_refuse(n, verdict, res, per_limit);
    for (size_t k = 0; k < ne; k++)
        if (!t[ex[k]].counted) add(&rs[ex[k]]->denied);
    sluice__combine(a, n, all, 0, res, per_limit);
    return all ? 1 : 0;
}

int sluice_redis_try_acquire_all(sluice_redis *const *rs, const void *const *keys,
                                 const size_t *keylens, const uint64_t *permits, size_t n,
                                 sluice_result *res, sluice_result *per_limit)
{
    if (!rs || !keys || !keylens || !permits || n < 1 || n > SLUICE_COMPOSITE_MAX)
        return all_refuse(n <= SLUICE_COMPOSITE_MAX ? n : 0, SLUICE_EINVAL, res, per_limit);
    bool leased = false;
    for (size_t i = 0; i < n; i++) {
        const sluice_redis *r = rs[i];
        if (!r || r->front || keylens[i] > SLUICE_MAX_KEY_BYTES || (!keys[i] && keylens[i]) ||
            strcmp(r->target, rs[0]->target) != 0)
            return all_refuse(n, SLUICE_EINVAL, res, per_limit);
        for (size_t j = 0; j < i; j++) /* one Redis key twice */
            if (same_key(rs[j], keys[j], keylens[j], r, keys[i], keylens[i]))
                return all_refuse(n, SLUICE_EINVAL, res, per_limit);
        leased = leased || r->lease_cap;
    }
    if (leased) return all_leased(rs, keys, keylens, permits, n, res, per_limit);
    sluice__answer a[SLUICE_COMPOSITE_MAX];
    int rc = all_script(rs, keys, keylens, permits, NULL, n, a, NULL);
    if (rc < 0) return all_refuse(n, rc, res, per_limit);
    sluice__combine(a, n, rc == 1, 0, res, per_limit);
    return rc;
}

int sluice_redis_ping(sluice_redis *r)
{
    uint64_t retry_at;
    return sluice__cluster_ping(&r->conn, sluice_now_ns() + r->cmd_timeout_ns, &retry_at);
}

void sluice_redis_stats_get(const sluice_redis *r, sluice_redis_stats *out)
{
    memset(out, 0, sizeof *out);
    sluice_redis *m = (sluice_redis *)r; /* the stripes' mutexes */
    for (int i = 0; i < SR_STRIPES; i++) {
        sr_stripe *s = &m->stripes[i];
        pthread_mutex_lock(&s->mu);
        out->allowed += s->allowed;
        out->denied += s->denied;
        out->by_lease += s->by_lease;
        out->by_cache += s->by_cache;
        out->leases += s->leases;
        out->lease_permits += s->lease_permits;
        out->lease_dropped += s->lease_dropped;
        pthread_mutex_unlock(&s->mu);
    }
    out->allowed += rd(&r->allowed);
    out->denied += rd(&r->denied);
    out->by_redis = rd(&r->by_redis);
    out->by_local = rd(&r->by_local);
    out->by_policy = rd(&r->by_policy);
    const sr_counters *c = &r->conn.ct;
    out->round_trips = rd(&c->round_trips);
    out->err_connect = rd(&c->err_connect);
    out->err_timeout = rd(&c->err_timeout);
    out->err_io = rd(&c->err_io);
    out->err_protocol = rd(&c->err_protocol);
    out->err_reply = rd(&c->err_reply);
    out->err_pool = rd(&c->err_pool);
    out->err_circuit = rd(&c->err_circuit);
    out->noscript = rd(&c->noscript);
    out->connects = rd(&c->connects);
    out->reconnects = rd(&c->reconnects);
    out->discarded = rd(&c->discarded);
    out->circuit_opens = rd(&c->circuit_opens);
    out->circuit_closes = rd(&c->circuit_closes);
    out->moved = rd(&c->moved);
    out->ask = rd(&c->ask);
    out->tryagain = rd(&c->tryagain);
    out->clusterdown = rd(&c->clusterdown);
    out->slot_refreshes = rd(&c->refreshes);
    out->cluster = atomic_load(&m->conn.mode) == SR_MODE_CLUSTER;
    out->nodes = atomic_load(&m->conn.nnodes);
    out->circuit_state = sluice__cluster_circuit_state(&m->conn);
    out->circuit_open = out->circuit_state != SLUICE_REDIS_CIRCUIT_CLOSED;
}
