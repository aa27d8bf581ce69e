/* redis_internal.h -- what the Redis tier's source files share.
 *
 *   scripts.c   the two Lua scripts, their SHA1 (computed here: EVALSHA
 *               needs it before any SCRIPT LOAD) and the spec -> script
 *               parameters arithmetic that keeps every number in the
 *               scripts below 2^53
 *   conn.c      the connection pool, the circuit breaker and one script
 *               call with a deadline (non-blocking hiredis contexts, our own
 *               send with MSG_NOSIGNAL, poll until the deadline)
 *   redis.c     the public API: configuration, the local tier (leases,
 *               remembered refusals, local limiters), policies, counters
 *   metrics.c   the tier's series in a metrics registry, through the
 *               core's source interface (sluice_metrics_add_redis)
 */
#ifndef SLUICE_REDIS_INTERNAL_H
#define SLUICE_REDIS_INTERNAL_H

#include <sluice.h>
#include <sluice/redis.h>

#include "shared.h" /* src/shared.h: the core's allocator hook, SipHash, seeds */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

__extension__ typedef unsigned __int128 sr_u128;

#define SR_INTERNAL __attribute__((visibility("hidden")))

#define SR_TWO53 ((uint64_t)1 << 53) /* every number in a script stays below */
#define SR_SCRIPT_TB 0
#define SR_SCRIPT_SA 1

/* The script parameters of a spec (sluice__redis_params()). */
typedef struct sr_params {
    int script;          /* SR_SCRIPT_TB or SR_SCRIPT_SA */
    uint64_t limit;      /* L */
    uint64_t period_ns;  /* W */
    uint64_t capacity;   /* B (token-bucket), L (sliding-approx) */
    uint64_t quantum_ns; /* the tick: Redis's TIME is floor(us / q_us) ticks */
    /* token-bucket: the rate is a/b permits per tick in lowest terms; the
     * level is kept as x = tokens * b, 0 .. cap = B * b */
    uint64_t a, b, cap;
    /* sliding-approx: the window in ticks */
    uint64_t wt;
    bool coarse;         /* the spec says clock=coarse (for the local tier) */
    char canon[SLUICE_SPEC_MAX]; /* canonical spec, without clock=coarse: it
                                  * names the Redis keys (SPECID), so it is
                                  * the same for every clock */
} sr_params;

/* Parse and check `spec` for the Redis tier: the algorithm must have a
 * script, and some quantum of 1 us .. 1 s must keep every script number
 * below 2^53.  Returns 0 or a negative code with a reason in err. */
SR_INTERNAL int sluice__redis_params(const char *spec, sr_params *out,
                                     char *err, size_t errlen);

/* The canonical spec of script `script` (SR_SCRIPT_*) for LIMIT L per W ns,
 * burst B (token-bucket only), with clock=coarse when `coarse`, into
 * out[n].  0, or a negative code when the spec is refused or does not fit. */
SR_INTERNAL int sluice__redis_spec(int script, uint64_t L, uint64_t W, uint64_t B,
                                   bool coarse, char *out, size_t n);

/* Reply fields of the scripts. */
#define SR_TB_FIELDS 4 /* ok, granted, x, now */
#define SR_SA_FIELDS 6 /* ok, granted, r, cur, prev, now */

/* SHA1 of `len` bytes as 40 hex digits and a NUL in out[41]. */
SR_INTERNAL void sluice__sha1_hex(const void *data, size_t len, char out[41]);

/* ---- connections ------------------------------------------------------ */

typedef struct sr_slot {
    void *ctx;      /* redisContext *, or NULL */
    uint64_t epoch; /* the circuit epoch it was made in */
} sr_slot;

typedef struct sr_conn {
    char *host;
    int port;
    uint64_t connect_timeout_ns;
    uint32_t threshold;
    uint64_t retry_min_ns, retry_max_ns;

    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cv;
    sr_slot *slots;
    uint32_t nslots;
    uint32_t *free_ix; /* stack of free slot indices */
    uint32_t nfree;

    pthread_mutex_t circ_mu;
    uint32_t failures;  /* consecutive */
    bool open;
    bool probing;
    uint64_t open_until; /* CLOCK_MONOTONIC ns */
    uint64_t backoff_ns;
    uint64_t epoch;      /* bumped when the circuit opens */
    uint64_t rng;
    bool ever_connected;

    _Atomic uint64_t round_trips, noscript, connects, reconnects, discarded;
    _Atomic uint64_t err_connect, err_timeout, err_io, err_protocol,
        err_reply, err_pool, err_circuit, circuit_opens, circuit_closes;
} sr_conn;

SR_INTERNAL int sluice__conn_init(sr_conn *c, const char *host, int port,
                                  uint32_t pool_size, uint64_t connect_timeout_ns,
                                  uint32_t threshold, uint64_t retry_min_ns,
                                  uint64_t retry_max_ns);
SR_INTERNAL void sluice__conn_fini(sr_conn *c);

/* Run script `which` on one key with `nargs` arguments, by EVALSHA (EVAL
 * after NOSCRIPT), before `deadline` (CLOCK_MONOTONIC ns).  On success
 * returns 0 with the reply's integers in out[0 .. nout-1].  Else returns
 * SLUICE_ETIMEDOUT or SLUICE_EBACKEND, having counted the error, and sets
 * *retry_at to the earliest time the circuit lets a call try again (0 when
 * it is closed). */
SR_INTERNAL int sluice__conn_eval(sr_conn *c, int which, const char *key,
                                  size_t keylen, const char *const *args,
                                  const size_t *arglens, int nargs,
                                  uint64_t deadline, long long *out, int nout,
                                  uint64_t *retry_at);

/* PING before `deadline`: 0, SLUICE_ETIMEDOUT or SLUICE_EBACKEND. */
SR_INTERNAL int sluice__conn_ping(sr_conn *c, uint64_t deadline,
                                  uint64_t *retry_at);

/* The circuit's state: SLUICE_REDIS_CIRCUIT_CLOSED, _OPEN (calls fail at
 * once; the first after the backoff probes) or _HALF_OPEN (a probe is in
 * flight). */
SR_INTERNAL int sluice__conn_circuit_state(sr_conn *c);

#endif /* SLUICE_REDIS_INTERNAL_H */
