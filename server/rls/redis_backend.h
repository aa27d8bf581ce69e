/* redis_backend.h -- sluice-rls: the Redis tier (sluice/redis.h) as the
 * backend of every limit, for replicas on several hosts that share one
 * limit.  redis_backend.c has the design note.
 *
 * Built with the Redis tier when CMake finds hiredis (SLUICE_RLS_REDIS is
 * then defined); without it the functions below exist, rls_redis_from_env()
 * refuses a REDIS_URL, and nothing else is ever called.
 */
#ifndef SLUICE_RLS_REDIS_BACKEND_H
#define SLUICE_RLS_REDIS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice.h>

struct sluice_redis;

/* What a call does when Redis cannot decide (unreachable, timed out, its
 * circuit open, an error reply): SLUICE_RLS_REDIS_FAILURE. */
enum {
    RLS_REDIS_FAIL_ERROR = 0,  /* answer gRPC UNAVAILABLE (the default): Envoy's
                                * failure_mode_deny decides, as with
                                * envoyproxy/ratelimit when its Redis fails */
    RLS_REDIS_FAIL_CLOSED = 1, /* answer OVER_LIMIT */
    RLS_REDIS_FAIL_OPEN = 2,   /* answer OK */
    RLS_REDIS_FAIL_LOCAL = 3   /* decide in this process, with LIMIT /
                                * SLUICE_RLS_REDIS_PROCESSES per period */
};

/* The Redis settings, read from the environment once. */
typedef struct rls_redis_settings {
    bool on;                  /* REDIS_URL is set */
    char host[256];
    int port;
    char username[256], password[256]; /* "" : none */
    int cluster;              /* SLUICE_REDIS_CLUSTER_*: AUTO when REDIS_TYPE
                                 is unset, OFF for single, ON for cluster */
    int failure;              /* RLS_REDIS_FAIL_* */
    uint32_t lease_max;       /* 0: one round trip per decision (exact) */
    uint32_t processes;       /* expected_processes, >= 1 */
    uint32_t timeout_ms;      /* one call's deadline */
    uint32_t pool_size;       /* connections per limit */
    char prefix[128];         /* CACHE_KEY_PREFIX */
    int hash_tag;             /* SLUICE_RLS_REDIS_HASH_TAG: 0 descriptor
                                 (each key its own hash tag), 1 domain (the
                                 call's domain: one slot per domain) */
} rls_redis_settings;

/* Read REDIS_URL (host:port, as envoyproxy/ratelimit takes it, the first of
 * a comma-separated list, or redis://[user:password@]host:port),
 * REDIS_SOCKET_TYPE (tcp only), REDIS_TYPE (single, cluster), REDIS_AUTH
 * (password or user:password), REDIS_TLS (false only), REDIS_POOL_SIZE,
 * CACHE_KEY_PREFIX, and sluice-rls's SLUICE_RLS_REDIS_FAILURE,
 * SLUICE_RLS_REDIS_LEASE_MAX, SLUICE_RLS_REDIS_PROCESSES,
 * SLUICE_RLS_REDIS_TIMEOUT_MS and SLUICE_RLS_REDIS_HASH_TAG into `s`.  REDIS_URL unset: s->on is false.
 * Returns 0, or -1 with a one-line reason naming the variable and its value
 * in err.  Not thread-safe (getenv). */
int rls_redis_from_env(rls_redis_settings *s, char *err, size_t errlen);

/* Make every limit of the configs loaded from now on a Redis-backed one
 * (NULL or !s->on: tables, the default).  Call once, before any load; not
 * thread-safe. */
void rls_redis_use(const rls_redis_settings *s);

/* Is the Redis backend in use? */
bool rls_redis_enabled(void);

/* The Redis limiter of a limit: spec (token-bucket, sliding-approx or
 * fixed-window; the
 * Redis tier's grammar), its Redis keys prefixed with CACHE_KEY_PREFIX and
 * a digest of the limit's full key, so two limits never share a key.  NULL
 * with the tier's one-line reason in err.  Not connected yet. */
struct sluice_redis *rls_redis_make(const char *full_key, const char *spec, char *err, size_t errlen);

/* Free it; NULL is a no-op. */
void rls_redis_free(struct sluice_redis *r);

/* The bytes that begin a Redis limit's key (rls.c builds the rest): none
 * with SLUICE_RLS_REDIS_HASH_TAG=descriptor (the default: the tier's hash
 * tag is the whole key, so the keys spread over a Cluster's nodes); with
 * `domain`, RLS_REDIS_TAG_BYTES: 16 hex digits of the domain's FNV-1a and
 * '}', which close the tier's '{' early (its names are PREFIX{KEY}:SPECID),
 * so the hash tag is the domain's digest and every key of a call shares one
 * slot.  rls_redis_tag_len() is 0 or RLS_REDIS_TAG_BYTES; rls_redis_tag()
 * writes that many bytes into out.  Thread-safe after rls_redis_use(). */
#define RLS_REDIS_TAG_BYTES 17
size_t rls_redis_tag_len(void);
void rls_redis_tag(const char *domain, size_t domainlen, unsigned char *out);

/* Ask `r` for `hits` (0: a probe) on `key`.  Returns true when granted and
 * fills `res`.  *failed is set when Redis could not decide and the policy is
 * RLS_REDIS_FAIL_ERROR (the call must then answer UNAVAILABLE); with the
 * other policies the tier's policy decided.  Blocks the calling thread for
 * at most the call's deadline.  Thread-safe. */
bool rls_redis_decide(struct sluice_redis *r, const void *key, size_t keylen, uint64_t hits, sluice_result *res,
                      bool *failed);

/* Decide n (2 .. SLUICE_COMPOSITE_MAX) limits at once, all or nothing, in
 * one script run (sluice_redis_try_acquire_all): limit rs[i] for hits[i] on
 * keys[i] (distinct Redis keys).  Returns 0 with per[i] (each limit's own
 * answer: when refused, one that would have allowed says allowed with its
 * remaining untouched) and *allowed; or -1, nothing decided, when it cannot
 * be done so: leases (SLUICE_RLS_REDIS_LEASE_MAX > 0), keys in several
 * slots of a Redis Cluster, or Redis failed (the caller then decides them
 * one at a time, under the failure policy).  Thread-safe. */
int rls_redis_decide_all(struct sluice_redis *const *rs, const void *const *keys, const size_t *keylens,
                         const uint64_t *hits, size_t n, sluice_result *per, bool *allowed);

/* Add r's counters to sums[RLS_REDIS_SUMS]: script calls sent
 * (round trips), decisions the failure policy made, failed calls,
 * decisions answered locally (from a lease or a remembered refusal),
 * permits kept as leases, lease permits dropped unspent (expired,
 * replaced or evicted).  Thread-safe. */
#define RLS_REDIS_SUMS 6
void rls_redis_stats_add(const struct sluice_redis *r, uint64_t sums[RLS_REDIS_SUMS]);

#endif
