/* sluice/redis.h -- one limit across many machines: a Redis tier for sluice.
 *
 * libsluice-redis (`-lsluice-redis -lsluice -lhiredis -lpthread -lm`) is an
 * optional library beside the core: the core keeps zero dependencies, and
 * hiredis is linked only here.  It keeps one rate limit per key in Redis,
 * shared by every process pointed at the same Redis, and puts sluice's
 * local limiters in front of it.  The design, the guarantees and the
 * measurements are in docs/redis.md; this header is the reference.
 *
 * The global tier
 *   Three algorithms run as Lua scripts, atomically, with EVALSHA (answered
 *   by EVAL with the script's body after NOSCRIPT: a SCRIPT FLUSH, a restart
 *   or a failover to a server that never saw the script costs no error):
 *
 *     token-bucket LIMIT/PERIOD [burst=B]     docs/decisions.md 3.5 (GCRA)
 *     sliding-approx LIMIT/PERIOD             docs/decisions.md 3.4
 *     fixed-window LIMIT/PERIOD               docs/decisions.md 3.1 (windows
 *                                             aligned to 0 on Redis's clock;
 *                                             a key expires at its window's
 *                                             end)
 *
 *   Each decides exactly as the contract says for the requests in the order
 *   Redis ran them, at the time of Redis's clock (the TIME command, never a
 *   client's: clients whose clocks disagree by any amount share one limit
 *   correctly).  That clock is read in microseconds and quantized to a
 *   `quantum` (sluice_redis_limits): 1 us for every common spec, coarser
 *   only when the spec's numbers would not otherwise stay exact in Lua's
 *   doubles (below 2^53); a spec that cannot be made exact with a quantum
 *   of at most 1 s is refused by sluice_redis_new() with a reason.  A time
 *   earlier than the latest one a key has seen (Redis's clock stepped back,
 *   or a failover to a server whose clock is behind) counts as that latest
 *   time, as the contract says.  One Redis key per limiter key,
 *   `PREFIX{KEY}:SPECID` (a Redis Cluster hash tag around the key, SPECID 8
 *   hex digits naming the spec), a hash with a TTL: a key at rest is deleted
 *   and an idle key expires when it would be back at rest.
 *
 * The local tier
 *   With lease_max = 0 (the default) every decision is one round trip: the
 *   decisions are exactly the contract's, in Redis's order.  With
 *   lease_max > 0 a process takes a batch of permits (a lease) from Redis
 *   in the same round trip as a request and spends it locally; the lease
 *   size adapts to the observed rate (doubling when a lease is used up
 *   within half its lifetime, halving when one expires mostly unspent) and
 *   never exceeds lease_cap.  A lease lives at most lease_ttl; its unspent
 *   permits are then dropped, never returned.  When Redis refuses (or runs
 *   dry granting a lease), this process refuses that key locally, without a
 *   round trip, for max(Redis's retry_after_ns, lease_ttl / 2): Redis would
 *   have refused the same request for retry_after_ns; beyond that, what the
 *   process does not take stays in Redis and the next lease collects it.
 *   So the two-tier mode trades the exactness of single decisions for
 *   round trips, and never admits more than the bound below.  The permits
 *   processes hold in leases are what the global limit can be exceeded by:
 *   per key, over any interval, at most
 *       P * lease_cap (token-bucket: also at most ceil(LIMIT * lease_ttl / PERIOD))
 *   P the number of processes (limiters) sharing the key (docs/redis.md
 *   derives it; sluice_redis_limits() reports it for P =
 *   expected_processes).  An optional local limiter in front (local_spec)
 *   refuses a process's own excess without asking Redis.
 *
 * Failures
 *   Every call has a deadline of command_timeout_ms from its start,
 *   covering everything it does (waiting for a pooled connection,
 *   connecting, the NOSCRIPT retry, the I/O): no call blocks longer because
 *   Redis is slow, frozen or gone.  A connection that failed (I/O error,
 *   timeout, protocol error) is closed and never reused.  After
 *   circuit_threshold consecutive failures the circuit opens: calls stop
 *   touching the network for a backoff (retry_min_ms, doubling to
 *   retry_max_ms, with jitter), then one call at a time probes Redis.
 *   While Redis cannot decide, the limiter's policy does: fail closed
 *   (refuse), fail open (admit), or fail local (a sluice limiter of
 *   LIMIT / expected_processes per PERIOD in this process).  Every error is
 *   counted (sluice_redis_stats).
 *
 * Redis Cluster
 *   `host:port` may name any node of a Redis Cluster (cluster = AUTO, the
 *   default, finds out with CLUSTER SLOTS on the first call, once).  The
 *   library keeps the slot map (CRC16 of the key's hash tag, 16384 slots),
 *   a pool and a circuit per node, opened lazily, and follows the cluster's
 *   answers within the call's deadline: MOVED records the slot and sends
 *   the call to the node named at once (an empty host, `MOVED 3999 :6380`,
 *   is the host that answered); ASK sends ASKING and the script to the node
 *   named; TRYAGAIN and CLUSTERDOWN are retried after 1, 2, 4 .. 16 ms; a
 *   node that cannot be reached makes the call refresh the map and try the
 *   node it now names (a failover).  MOVED, CLUSTERDOWN and failures mark
 *   the map stale; a later call refreshes it (at most every 100 ms) within a
 *   quarter of its own remaining time, asking the nodes that answered last
 *   first, so no refresh takes a call's whole deadline.  The nodes held
 *   follow the map: a refresh drops those it does not name (the configured
 *   one is kept), at most 512 at once.  At most 5 MOVED/ASK per call
 *   (SLUICE_REDIS_MAX_REDIRECTS); more fail the call (err_reply).  Each
 *   single-key script touches one key, so every call is a one-slot call;
 *   sluice_redis_try_acquire_all needs the keys it sends in one slot.
 *   docs/redis.md has the failover costs (CLUSTERDOWN everywhere for about
 *   the node timeout) and bound.
 *
 * Authentication
 *   With `password` set, every new connection (to every node) first sends
 *   AUTH password, or AUTH username password (an ACL user).  A refusal
 *   counts as err_reply and fails the call.
 *
 * Conventions are the core's (sluice.h): uint64_t nanoseconds, decisions
 * return bool, other calls 0 or a negative SLUICE_E* code, `_free(NULL)` is
 * a no-op.  Thread-safety: every function except sluice_redis_new() and
 * sluice_redis_free() may be called from any number of threads at once on
 * the same object.  SIGPIPE is never raised by this library (it sends with
 * MSG_NOSIGNAL).
 */
#ifndef SLUICE_REDIS_H
#define SLUICE_REDIS_H

#include <sluice.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility push(default)
#endif

typedef struct sluice_redis sluice_redis; /* opaque */

/* What a limiter does when Redis cannot decide (unreachable, timed out,
 * circuit open, an error reply). */
enum {
    SLUICE_REDIS_FAIL_CLOSED = 0, /* refuse (the default): never admits more */
    SLUICE_REDIS_FAIL_OPEN = 1,   /* admit */
    SLUICE_REDIS_FAIL_LOCAL = 2   /* decide with a local limiter of LIMIT /
                                   * expected_processes per PERIOD (burst
                                   * likewise divided; at least 1) */
};

/* How the configured address is taken (sluice_redis_config.cluster). */
enum {
    SLUICE_REDIS_CLUSTER_AUTO = 0, /* ask it CLUSTER SLOTS on the first call,
                                      once: a map means a cluster node; any
                                      error reply ("cluster support
                                      disabled", "unknown command", NOPERM
                                      ...) a single server (LOADING, BUSY:
                                      asked again later); a MOVED or ASK
                                      reply at any time means a cluster */
    SLUICE_REDIS_CLUSTER_OFF = 1,  /* a single server: never CLUSTER SLOTS,
                                      a MOVED is an error reply */
    SLUICE_REDIS_CLUSTER_ON = 2    /* a cluster: a server that does not
                                      answer CLUSTER SLOTS with a map fails
                                      every call (err_reply) */
};

/* The most MOVED and ASK answers one call follows. */
#define SLUICE_REDIS_MAX_REDIRECTS 5

/* Configuration.  Fill it with sluice_redis_config_init() and change what
 * you need; sluice_redis_new() copies it (the strings too). */
typedef struct sluice_redis_config {
    const char *host;            /* Redis address (of a cluster: any node);
                                    default "127.0.0.1".  A
                                    numeric address is never looked up; a
                                    name is resolved by getaddrinfo, which no
                                    timeout bounds */
    int port;                    /* default 6379 */
    uint32_t connect_timeout_ms; /* bound on one TCP connect, 1 .. 600000;
                                    default 100 (also cut to the call's
                                    deadline) */
    uint32_t command_timeout_ms; /* the deadline of one call, 1 .. 600000;
                                    default 50 */
    int policy;                  /* SLUICE_REDIS_FAIL_*; default CLOSED */
    uint32_t expected_processes; /* P, processes expected to share the
                                    limit, 1 .. 10^6; default 1.  Sizes the
                                    FAIL_LOCAL limiter and the lease cap */
    const char *key_prefix;      /* Redis key prefix; default "sluice:";
                                    at most 256 bytes, no '{' or '}' */
    uint32_t lease_max;          /* 0 (default): one round trip per
                                    decision, exactly the contract.  > 0:
                                    the most permits one lease may carry
                                    (the effective cap is also at most
                                    LIMIT / (100 * expected_processes), at
                                    least 1; see sluice_redis_limits) */
    uint32_t lease_ttl_ms;       /* a lease's lifetime; 0 (default):
                                    min(PERIOD / 100, 100 ms), at least
                                    1 ms */
    const char *local_spec;      /* NULL (default): none.  Else a sluice
                                    spec for a per-key limiter in this
                                    process that every request passes
                                    first (it takes its permits even when
                                    Redis then refuses) */
    size_t max_keys;             /* keys the local tier holds (leases,
                                    remembered refusals, local limiters);
                                    default 65536.  Dropping one only costs
                                    a round trip */
    uint32_t pool_size;          /* connections, 1 .. 1024; default 8.  A
                                    call waits (within its deadline) for a
                                    free one */
    uint32_t circuit_threshold;  /* consecutive failures that open the
                                    circuit, >= 1; default 3 */
    uint32_t retry_min_ms;       /* first backoff of an open circuit; 10 */
    uint32_t retry_max_ms;       /* longest backoff; default 1000 */
    /* The local clock, in ns, of the local tier: leases' lifetimes,
     * remembered refusals, the local_spec and FAIL_LOCAL limiters.  NULL:
     * sluice_now_ns() (a calendar quota, tz=, as local_spec: its own
     * clock, the epoch's; with clock_fn, the times it gives).  Never sent to Redis; deadlines always use
     * CLOCK_MONOTONIC.  For tests.  (A clock running slow makes leases live
     * longer in real time: the P * lease_cap bound still holds, the
     * token-bucket TTL bound does not.) */
    uint64_t (*clock_fn)(void *arg);
    void *clock_arg;
    const char *username;        /* NULL (default): none.  An ACL user,
                                    with password: AUTH username password.
                                    At most 1024 bytes, no space */
    const char *password;        /* NULL (default): no AUTH.  Else sent with
                                    AUTH on every new connection; at most
                                    1024 bytes */
    int cluster;                 /* SLUICE_REDIS_CLUSTER_*; default AUTO */
    uint64_t reserved_[4]; /* zero: room to grow in a minor version */
} sluice_redis_config;

/* Fill `cfg` with the defaults above.  Thread-safe. */
void sluice_redis_config_init(sluice_redis_config *cfg);

/* Make a Redis-backed limiter from a spec (token-bucket, sliding-approx or
 * fixed-window, any options of the core's grammar; clock=coarse applies to the local
 * limiters only) and a configuration (NULL: the defaults).  Does not
 * connect: the first call that needs Redis does (see sluice_redis_ping).
 * Returns NULL when the spec or the configuration is refused, or memory
 * runs out, with a one-line reason in `err` (NUL-terminated when
 * errlen > 0), e.g. `algorithm "sliding-log" has no Redis script (use
 * token-bucket, sliding-approx or fixed-window)`.  The caller frees it with
 * sluice_redis_free().  Thread-safe. */
sluice_redis *sluice_redis_new(const char *spec, const sluice_redis_config *cfg,
                               char *err, size_t errlen);

/* Close every connection and free the limiter.  NULL is a no-op.  No other
 * call may be using `r`. */
void sluice_redis_free(sluice_redis *r);

/* Which tier made a decision. */
enum {
    SLUICE_REDIS_SRC_REDIS = 0,  /* a round trip: Redis's script decided */
    SLUICE_REDIS_SRC_LEASE = 1,  /* admitted from this process's lease */
    SLUICE_REDIS_SRC_CACHE = 2,  /* refused without a round trip (leases
                                    only): Redis refused a request at least
                                    as large less than max(its
                                    retry_after_ns, lease_ttl / 2) ago, or
                                    ran dry granting the last lease, or
                                    another thread of this limiter is
                                    fetching a lease for the key */
    SLUICE_REDIS_SRC_LOCAL = 3,  /* refused by the local_spec limiter */
    SLUICE_REDIS_SRC_POLICY = 4  /* Redis could not decide; the failure
                                    policy did (info.error says why) */
};

/* The details of a decision beyond sluice_result. */
typedef struct sluice_redis_info {
    int source;              /* SLUICE_REDIS_SRC_* */
    int error;               /* SRC_POLICY: SLUICE_ETIMEDOUT (the deadline
                                passed) or SLUICE_EBACKEND (no connection,
                                circuit open, I/O or reply error); else 0 */
    uint64_t server_time_ns; /* SRC_REDIS: the time at which Redis decided,
                                ns since the Unix epoch on Redis's clock,
                                a multiple of the quantum; else 0 */
    uint64_t granted;        /* SRC_REDIS: permits Redis granted (the
                                request's, plus a lease's); else 0 */
    uint64_t reserved_[4]; /* zero: room to grow in a minor version */
} sluice_redis_info;

/* Ask for `permits` on `key` (keylen bytes, any bytes, at most
 * SLUICE_MAX_KEY_BYTES; NULL when keylen is 0; a longer key is refused with
 * info.error = SLUICE_EINVAL and retry_after_ns = -1).  Returns true when
 * granted.
 * `res` (may be NULL) gets the details:
 *   - SRC_REDIS: exactly the contract's, at info.server_time_ns: remaining
 *     (permits a request at that instant could still get, the lease just
 *     granted included) and retry_after_ns (-1: permits exceed the burst,
 *     or LIMIT for sliding-approx and fixed-window);
 *   - SRC_LEASE: remaining = the permits left in this process's lease;
 *   - SRC_CACHE: retry_after_ns = the time left until this process asks
 *     Redis again (-1: the request exceeds the burst, or LIMIT), remaining
 *     0;
 *   - SRC_LOCAL: the local_spec limiter's result;
 *   - SRC_POLICY: fail closed: refused, retry_after_ns = the time until
 *     the circuit lets a call try Redis again (at least 1 ms), remaining 0;
 *     fail open: admitted, remaining 0; fail local: the local limiter's.
 * permits = 0 is a probe: always true; with lease_max = 0 it asks Redis
 * for the state (remaining), else it answers from the local tier.
 * Never blocks longer than command_timeout_ms.  Thread-safe. */
bool sluice_redis_try_acquire(sluice_redis *r, const void *key, size_t keylen,
                              uint64_t permits, sluice_result *res);

/* sluice_redis_try_acquire(), also filling `info` (may be NULL). */
bool sluice_redis_try_acquire_ex(sluice_redis *r, const void *key,
                                 size_t keylen, uint64_t permits,
                                 sluice_result *res, sluice_redis_info *info);

/* Ask n limits at once, all or nothing (docs/decisions.md 3.7): limit
 * rs[i] for permits[i] on keys[i] (keylens[i] bytes, as
 * sluice_redis_try_acquire).  One script run (EVALSHA of script 3, EVAL
 * after NOSCRIPT) with the n Redis keys judges every key at Redis's time and
 * charges them all only when every one allows: a request refused by one
 * limit charges none, atomically (no other call sees a part charged).
 * Limits with leases (lease_max > 0; all, or some beside exact ones) decide
 * in this process first: each takes its permits from its lease; those
 * whose lease lacks them and the exact ones then go to Redis in one script
 * run (the short leased keys asking for a lease's surplus too): all or
 * none charged.  On a refusal every permit taken goes back into its lease
 * if that lease is still the same and alive (else it is dropped, counted
 * as lease_dropped): a refused request spends no permit of any limit, and
 * the leases' bound (P * lease_cap per key) holds as for single decisions.
 * Their answers are single decisions' with leases (a limit not reached
 * before a remembered refusal: allowed, remaining 0).
 * Returns 1 when admitted, 0 when refused, or a negative code with nothing
 * decided:
 *   SLUICE_EINVAL  a bad call, nothing sent: NULL arrays, n outside
 *                  1 .. SLUICE_COMPOSITE_MAX, a NULL limit, a key too long,
 *                  two limits whose configurations name different Redis
 *                  servers (host, port, cluster mode and user must be the
 *                  same), a limit with a local_spec (it decides in the
 *                  process first: ask each with sluice_redis_try_acquire_ex),
 *                  or one Redis key twice;
 *   SLUICE_ERANGE  the server is a Redis Cluster and the keys sent to it
 *                  (the exact limits', the leased ones short of permits)
 *                  are not all in one hash slot (nothing sent: the caller may decide them
 *                  one at a time instead);
 *   SLUICE_ETIMEDOUT, SLUICE_EBACKEND, SLUICE_ENOMEM  as for one decision
 *                  (no failure policy is applied: the caller chooses; after
 *                  a timeout Redis may have run the script), and
 *                  SLUICE_EBACKEND for a reply with a value out of range
 *                  (a damaged key: counted as err_protocol).
 * `res` (may be NULL) gets the combined answer, the composite's rule: the
 * smallest remaining, the largest retry_after_ns of the refusing limits
 * (-1 if one is -1: permits[i] exceeds its burst or LIMIT); on an error,
 * allowed false, retry_after_ns -1 and `error` the code (with leases,
 * every permit taken went back first).  `per_limit` (may
 * be NULL; n entries) gets each limit's own answer; when refused, a limit
 * that would have allowed reports allowed = true and its remaining without
 * the request's permits.  Each limit's counters count the request as
 * allowed or denied; round trips and errors count on rs[0], whose
 * connections and command_timeout_ms serve the call.  Never blocks longer
 * than that timeout.  Thread-safe, as every decision: Redis runs the script
 * atomically, so every limit's decisions are the contract's for Redis's
 * order of all calls. */
int sluice_redis_try_acquire_all(sluice_redis *const *rs, const void *const *keys,
                                 const size_t *keylens, const uint64_t *permits, size_t n,
                                 sluice_result *res, sluice_result *per_limit);

/* Connect if needed and send PING, within command_timeout_ms: 0 when Redis
 * answered, else SLUICE_ETIMEDOUT or SLUICE_EBACKEND (counted like any
 * call's error, and subject to the circuit).  Thread-safe. */
int sluice_redis_ping(sluice_redis *r);

/* Write the Redis key name of `key` (binary: `PREFIX{KEY}:SPECID`) into
 * buf.  Returns its length, or SLUICE_ENOSPC when buflen is too small (it
 * needs keylen + strlen(prefix) + 12 bytes with the NUL).  Thread-safe. */
int sluice_redis_key_name(const sluice_redis *r, const void *key,
                          size_t keylen, char *buf, size_t buflen);

/* The numbers a limiter derived from its spec and configuration. */
typedef struct sluice_redis_limits {
    uint64_t quantum_ns;    /* resolution of Redis's clock as the scripts
                               use it: 1000 (1 us) for every common spec */
    uint64_t lease_cap;     /* the most permits in one lease; 0 when
                               lease_max = 0 */
    uint64_t lease_ttl_ns;  /* a lease's lifetime (0 when lease_max = 0) */
    uint64_t overadmit_bound; /* per key, with P = expected_processes: the
                                 most permits by which the processes
                                 together can exceed the contract's limit
                                 over any interval (0 when lease_max = 0) */
    char local_fallback_spec[SLUICE_SPEC_MAX]; /* the FAIL_LOCAL limiter */
    uint64_t reserved_[4]; /* zero: room to grow in a minor version */
} sluice_redis_limits;

/* Fill `out`.  Thread-safe. */
void sluice_redis_limits_get(const sluice_redis *r, sluice_redis_limits *out);

/* Counters since the limiter was made; each is exact, the set is read
 * without stopping the limiter. */
typedef struct sluice_redis_stats {
    uint64_t allowed, denied;  /* decisions (probes count as allowed) */
    uint64_t by_redis;         /* decided by a round trip */
    uint64_t by_lease;         /* admitted from a lease */
    uint64_t by_cache;         /* refused from a remembered refusal */
    uint64_t by_local;         /* refused by the local_spec limiter */
    uint64_t by_policy;        /* decided by the failure policy */
    uint64_t round_trips;      /* script calls sent (EVALSHA or EVAL) */
    uint64_t leases;           /* grants that carried permits to keep */
    uint64_t lease_permits;    /* permits kept from grants */
    uint64_t lease_dropped;    /* lease permits dropped unspent (expired,
                                  replaced or evicted) */
    /* backend errors, by kind; each failed call counts once */
    uint64_t err_connect;      /* connect failed or timed out */
    uint64_t err_timeout;      /* the deadline passed during a command */
    uint64_t err_io;           /* the connection broke (reset, EOF) */
    uint64_t err_protocol;     /* an unparsable or unexpected reply */
    uint64_t err_reply;        /* an error reply (not NOSCRIPT), e.g.
                                  READONLY, OOM, LOADING, BUSY */
    uint64_t err_pool;         /* no free connection before the deadline */
    uint64_t err_circuit;      /* refused to try: the circuit was open */
    uint64_t noscript;         /* NOSCRIPT replies, answered by EVAL */
    uint64_t connects;         /* connections made */
    uint64_t reconnects;       /* ... after the first */
    uint64_t discarded;        /* connections closed after a failure */
    uint64_t circuit_opens;    /* times the circuit opened */
    uint64_t circuit_closes;   /* times it closed again */
    int circuit_open;          /* 1 while open or probing (a cluster: some
                                  serving node's, as below), else 0 */
    int circuit_state;         /* SLUICE_REDIS_CIRCUIT_* (a cluster: over
                                  the nodes that serve slots now, the
                                  masters the current map names: OPEN if
                                  one's is, else HALF_OPEN if one's is,
                                  else CLOSED; before the map is known,
                                  the configured node's) */
    /* Redis Cluster (all 0 for a single server) */
    uint64_t moved;            /* MOVED answers followed */
    uint64_t ask;              /* ASK answers followed */
    uint64_t tryagain;         /* TRYAGAIN answers (retried) */
    uint64_t clusterdown;      /* CLUSTERDOWN answers (retried) */
    uint64_t slot_refreshes;   /* CLUSTER SLOTS answered (also the first,
                                  that finds out whether it is a cluster) */
    int cluster;               /* 1 once the server is known to be a
                                  cluster node */
    uint32_t nodes;            /* nodes held: the masters the current map
                                  names, redirect targets since the last
                                  refresh, and the configured node; at
                                  most 512 */
    uint64_t reserved_[4]; /* zero: room to grow in a minor version */
} sluice_redis_stats;

/* The circuit's states (sluice_redis_stats.circuit_state; the gauge
 * sluice_redis_circuit_state). */
enum {
    SLUICE_REDIS_CIRCUIT_CLOSED = 0,   /* calls go to Redis */
    SLUICE_REDIS_CIRCUIT_OPEN = 1,     /* circuit_threshold consecutive
                                          failures: calls fail at once
                                          (err_circuit) until the backoff
                                          ends; the next call probes */
    SLUICE_REDIS_CIRCUIT_HALF_OPEN = 2 /* one call is probing Redis: its
                                          success closes the circuit, its
                                          failure opens it again with the
                                          backoff doubled */
};

/* Copy the counters into `out`.  Thread-safe. */
void sluice_redis_stats_get(const sluice_redis *r, sluice_redis_stats *out);

/* Expose the limiter in a metrics registry (sluice/metrics.h) under `name`,
 * the value of its series' `limit` label: the families below, written by
 * libsluice-redis through the registry's source interface
 * (sluice_metrics_add_source), so the core library never links this one.
 * Read with sluice_redis_stats_get() on each write: every value exact.
 *
 *   sluice_redis_requests_total{limit,decision}  allowed | denied
 *   sluice_redis_round_trips_total{limit}        script calls sent
 *   sluice_redis_fallbacks_total{limit}          decided by the failure
 *                                                policy (Redis could not)
 *   sluice_redis_errors_total{limit,kind}        connect | timeout | io |
 *                                  protocol | reply | pool | circuit
 *   sluice_redis_leases_total{limit}             leases taken
 *   sluice_redis_lease_permits_total{limit,outcome}  taken | dropped
 *                                  (unspent: leases are never returned)
 *   sluice_redis_circuit_state{limit}            gauge, SLUICE_REDIS_CIRCUIT_*
 *   sluice_redis_circuit_opens_total{limit}      times it opened
 *   sluice_redis_cluster_mode{limit}             gauge, 1 once a cluster
 *   sluice_redis_cluster_nodes{limit}            gauge, nodes held
 *   sluice_redis_cluster_redirects_total{limit,kind}  moved | ask
 *   sluice_redis_cluster_retries_total{limit,reason}  tryagain | clusterdown
 *   sluice_redis_cluster_slot_refreshes_total{limit}  CLUSTER SLOTS answered
 *
 * docs/metrics.md and docs/redis.md say more.  Remove it with
 * sluice_metrics_remove(m, r) before freeing r.  Returns
 * sluice_metrics_add_source()'s answer: 0, SLUICE_EINVAL (NULL argument,
 * bad or used name, r already added), SLUICE_EFULL, SLUICE_ENOMEM.
 * Thread-safe. */
int sluice_metrics_add_redis(sluice_metrics *m, const char *name, const sluice_redis *r);

/* The Redis Cluster slot (0 .. 16383) of a Redis key name (len bytes,
 * e.g. from sluice_redis_key_name): CRC16/XMODEM mod 16384 of the key's
 * hash tag (the bytes between its first '{' and the next '}', when there
 * is at least one), else of the whole key; what CLUSTER KEYSLOT answers.
 * Thread-safe. */
unsigned sluice_redis_key_slot(const void *key, size_t len);

/* The Lua source of a script: 0 token-bucket, 1 sliding-approx,
 * 2 fixed-window, 3 all or nothing across keys (sluice_redis_try_acquire_all:
 * the three algorithms' same Lua functions); NULL for another index.  Static storage.  Thread-safe. */
const char *sluice_redis_script_source(int which);

/* The SHA1 of that script as 40 lowercase hex digits (what SCRIPT LOAD
 * returns), NULL for another index.  Thread-safe. */
const char *sluice_redis_script_sha(int which);

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_REDIS_H */
