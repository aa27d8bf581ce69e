/* redis_internal.h -- what the Redis tier's source files share.
 *
 *   scripts.c   the three Lua scripts, their SHA1 (computed here: EVALSHA
 *               needs it before any SCRIPT LOAD) and the spec -> script
 *               parameters arithmetic that keeps every number in the
 *               scripts below 2^53
 *   conn.c      the connection pool, the circuit breaker and one script
 *               call with a deadline (non-blocking hiredis contexts, our own
 *               send with MSG_NOSIGNAL, poll until the deadline)
 *   cluster.c   Redis Cluster: key slots (CRC16, hash tags), the slot map
 *               from CLUSTER SLOTS, one pool per node (the nodes follow the
 *               map), MOVED/ASK/TRYAGAIN/CLUSTERDOWN; a single server is
 *               the one-node case
 *   redis.c     the public API: configuration, the local tier (leases,
 *               remembered refusals, local limiters), policies, counters
 *   metrics.c   the tier's series in a metrics registry, through the
 *               core's source interface (sluice_metrics_add_redis)
 */
#ifndef SLUICE_REDIS_INTERNAL_H
#define SLUICE_REDIS_INTERNAL_H

#include <sluice.h>
#include <sluice/redis.h>

#include "base/shared.h" /* src/base/shared.h: the core's allocator hook, SipHash, seeds */

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
#define SR_SCRIPT_FW 2
#define SR_SCRIPT_ALL 3 /* the all-or-nothing script over several keys */

/* The script parameters of a spec (sluice__redis_params()). */
typedef struct sr_params {
    int script;          /* SR_SCRIPT_TB, _SA or _FW */
    uint64_t limit;      /* L */
    uint64_t period_ns;  /* W */
    uint64_t capacity;   /* B (token-bucket), L (sliding-approx, fixed-window) */
    uint64_t quantum_ns; /* the tick: Redis's TIME is floor(us / q_us) ticks */
    /* token-bucket: the rate is a/b permits per tick in lowest terms; the
     * level is kept as x = tokens * b, 0 .. cap = B * b */
    uint64_t a, b, cap;
    /* sliding-approx, fixed-window: the window in ticks */
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
#define SR_FW_FIELDS 5 /* ok, granted, r, count, now */

/* The all-or-nothing script's reply v[0 .. nv-1] (nv = 1 + each key's
 * script's fields; every element an integer, as conn.c checks) for n
 * limits (1 .. SLUICE_COMPOSITE_MAX) with parameters pps[i], asked for
 * permits[i]: bounds-checks every field of every key before any is used
 * and fills a[i] (each limit's verdict and answer; a limit not charged
 * reports its state without the permits).  Returns 1 (all admitted), 0
 * (refused), or SLUICE_EBACKEND for a reply no script of ours writes (a
 * value out of range, a verdict that is not every key's, a length that does
 * not match).  Reads nothing beyond v[nv-1].  Fuzzed by
 * tests/redis/fuzz_redis_reply.c. */
struct sluice__answer;
SR_INTERNAL int sluice__redis_all_reply(const sr_params *const *pps, const uint64_t *permits,
                                        size_t n, const long long *v, size_t nv,
                                        struct sluice__answer *a);

/* SHA1 of `len` bytes as 40 hex digits and a NUL in out[41]. */
SR_INTERNAL void sluice__sha1_hex(const void *data, size_t len, char out[41]);

/* ---- connections ------------------------------------------------------ */

/* The counters of a limiter's connections, shared by every node's pool. */
typedef struct sr_counters {
    _Atomic uint64_t round_trips, noscript, connects, reconnects, discarded;
    _Atomic uint64_t err_connect, err_timeout, err_io, err_protocol,
        err_reply, err_pool, err_circuit, circuit_opens, circuit_closes;
    _Atomic uint64_t moved, ask, tryagain, clusterdown, refreshes;
} sr_counters;

typedef struct sr_slot {
    void *ctx;      /* redisContext *, or NULL */
    uint64_t epoch; /* the circuit epoch it was made in */
} sr_slot;

/* One server: a pool of connections and its circuit. */
typedef struct sr_conn {
    char *host;
    int port;
    const char *user, *pass; /* AUTH after each connect (owned by the
                                cluster); pass NULL: none */
    sr_counters *ct;
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
} sr_conn;

/* The connection parameters every node's pool is made with. */
typedef struct sr_conn_cfg {
    uint32_t pool_size;
    uint64_t connect_timeout_ns;
    uint32_t threshold;
    uint64_t retry_min_ns, retry_max_ns;
    const char *user, *pass;
} sr_conn_cfg;

SR_INTERNAL int sluice__conn_init(sr_conn *c, const char *host, int port,
                                  const sr_conn_cfg *cfg, sr_counters *ct);
SR_INTERNAL void sluice__conn_fini(sr_conn *c);

/* A cluster's answer instead of a script's reply (sluice__conn_eval with a
 * non-NULL `rd`). */
enum { SR_RD_MOVED = 1, SR_RD_ASK, SR_RD_TRYAGAIN, SR_RD_CLUSTERDOWN };
#define SR_REDIRECTED 1 /* sluice__conn_eval's positive answer */
#define SR_HOST_MAX 256
typedef struct sr_redirect {
    int kind;   /* SR_RD_* */
    int slot;   /* MOVED, ASK: the slot; else -1 */
    int port;   /* MOVED, ASK: the node named */
    char host[SR_HOST_MAX]; /* "" (or "?"): the host of the node asked */
} sr_redirect;

/* Run script `which` on `nkeys` keys (1 .. SLUICE_COMPOSITE_MAX) with
 * `nargs` arguments (3 + nkeys + nargs <= SR_EVAL_ARGS, else SLUICE_EINVAL
 * and nothing sent), by EVALSHA (EVAL
 * after NOSCRIPT), before `deadline` (CLOCK_MONOTONIC ns); with `asking`,
 * each command is preceded by ASKING in the same write.  On success
 * returns 0 with the reply's integers in out[0 .. nout-1].  When `rd` is
 * not NULL, a MOVED, ASK, TRYAGAIN or CLUSTERDOWN reply returns
 * SR_REDIRECTED with `rd` filled (the node answered: not a failure of the
 * circuit, nothing counted).  Else returns SLUICE_ETIMEDOUT or
 * SLUICE_EBACKEND, having counted the error, and sets *retry_at to the
 * earliest time the circuit lets a call try again (0 when it is closed). */
#define SR_EVAL_ARGS (3 + SLUICE_COMPOSITE_MAX * 8) /* EVALSHA sha n, n keys, <= 7 arguments a key */
SR_INTERNAL int sluice__conn_eval(sr_conn *c, int which, const char *const *keys,
                                  const size_t *keylens, int nkeys,
                                  const char *const *args,
                                  const size_t *arglens, int nargs,
                                  uint64_t deadline, long long *out, int nout,
                                  uint64_t *retry_at, bool asking,
                                  sr_redirect *rd);

/* Send one command (argv, at most 16 words) and return its reply (a
 * redisReply *, the caller frees it with freeReplyObject) in *reply: 0, or
 * SLUICE_ETIMEDOUT / SLUICE_EBACKEND for an I/O failure (counted).  An
 * error reply is returned as a reply, not counted. */
SR_INTERNAL int sluice__conn_command(sr_conn *c, int argc, const char *const *argv,
                                     const size_t *lens, uint64_t deadline,
                                     void **reply, uint64_t *retry_at);

/* PING before `deadline`: 0, SLUICE_ETIMEDOUT or SLUICE_EBACKEND. */
SR_INTERNAL int sluice__conn_ping(sr_conn *c, uint64_t deadline,
                                  uint64_t *retry_at);

/* The circuit's state: SLUICE_REDIS_CIRCUIT_CLOSED, _OPEN (calls fail at
 * once; the first after the backoff probes) or _HALF_OPEN (a probe is in
 * flight). */
SR_INTERNAL int sluice__conn_circuit_state(sr_conn *c);

/* ---- cluster (cluster.c) ------------------------------------------------ */

#define SR_NSLOTS 16384
#define SR_MAX_NODES 512 /* nodes held at once (the seed, the masters the
                            map names, redirect targets until the next
                            refresh); a dropped node's index is reused */
#define SR_MAX_REDIRECTS SLUICE_REDIS_MAX_REDIRECTS /* MOVED + ASK followed per call */
#define SR_REFRESH_MIN_NS 100000000ULL /* CLUSTER SLOTS at most every 100 ms */
#define SR_REFRESH_SHARE 4 /* a refresh inside a call takes at most 1/4 of
                              the time the call has left */
#define SR_REFRESH_TRIES 3 /* ... and asks at most 3 nodes */

enum { SR_MODE_UNKNOWN = 0, SR_MODE_SINGLE, SR_MODE_CLUSTER };

/* One node.  Held by the table (one reference while it is in nodes[]) and
 * by each call using it (one each); freed, its connections closed, when
 * the last reference goes (nodes_mu). */
typedef struct sr_node {
    sr_conn conn;
    uint32_t refs;            /* nodes_mu */
    bool serves;              /* nodes_mu: the map names it for some slot */
    _Atomic uint64_t last_ok; /* CLOCK_MONOTONIC ns of its last answer */
} sr_node;

typedef struct sr_cand { /* a node a refresh may ask */
    sr_node *n;
    bool closed;      /* its circuit */
    uint64_t last_ok; /* its last answer */
} sr_cand;

typedef struct sr_cluster {
    sr_conn_cfg cfg;     /* for every node's pool; user, pass owned here */
    sr_counters ct;
    int want;            /* SLUICE_REDIS_CLUSTER_* */
    _Atomic int mode;    /* SR_MODE_* */
    pthread_mutex_t nodes_mu;       /* the table, refs, serves */
    sr_node *nodes[SR_MAX_NODES];   /* nodes_mu; NULL: a free index;
                                       nodes[0] is the seed, never dropped */
    uint32_t hi;                    /* nodes_mu: 1 + the highest index used */
    _Atomic uint32_t nnodes;        /* nodes in the table */
    pthread_mutex_t refresh_mu;     /* one CLUSTER SLOTS at a time */
    _Atomic uint64_t last_refresh;  /* CLOCK_MONOTONIC ns of the last attempt */
    _Atomic bool stale;             /* a MOVED, a failure or CLUSTERDOWN
                                       since the last refresh */
    _Atomic uint16_t slot_node[SR_NSLOTS]; /* node index + 1; 0: unknown */
    uint16_t scratch[SR_NSLOTS];           /* refresh_mu */
    sr_cand cand[SR_MAX_NODES];            /* refresh_mu */
} sr_cluster;

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0, no reflection), the
 * Redis Cluster key hash. */
SR_INTERNAL uint16_t sluice__crc16(const void *data, size_t len);

SR_INTERNAL int sluice__cluster_init(sr_cluster *cl, const char *host, int port,
                                     const sr_conn_cfg *cfg, int want);
SR_INTERNAL void sluice__cluster_fini(sr_cluster *cl);

/* sluice__conn_eval on the node that serves keys[0], following the
 * cluster's answers within `deadline`: 0 or SLUICE_ETIMEDOUT /
 * SLUICE_EBACKEND; SLUICE_ERANGE, nothing sent, when the server is a
 * cluster and the keys are not all in keys[0]'s slot. */
SR_INTERNAL int sluice__cluster_eval(sr_cluster *cl, int which, const char *const *keys,
                                     const size_t *keylens, int nkeys,
                                     const char *const *args,
                                     const size_t *arglens, int nargs,
                                     uint64_t deadline, long long *out, int nout,
                                     uint64_t *retry_at);

/* PING the server (cluster: the first node that answers). */
SR_INTERNAL int sluice__cluster_ping(sr_cluster *cl, uint64_t deadline,
                                     uint64_t *retry_at);

/* The worst circuit state of the nodes that serve slots now (those the
 * current map names; a single server, or a cluster whose map is not known
 * yet: the seed): OPEN if some node's is open, else HALF_OPEN if some
 * node's is probing, else CLOSED. */
SR_INTERNAL int sluice__cluster_circuit_state(sr_cluster *cl);

#endif /* SLUICE_REDIS_INTERNAL_H */
