/* cluster.c -- Redis Cluster: which node serves a key, and following the
 * cluster's answers within one call's deadline.
 *
 * Key slots.  A key's slot is CRC16(k) mod 16384 (CRC-16/XMODEM:
 * polynomial 0x1021, initial value 0, bits not reflected), where k is the
 * whole key, or, when the key holds a '{' followed later by a '}' with at
 * least one byte between them, the bytes between the first '{' and the
 * first '}' after it (a hash tag).  The tier's keys are `PREFIX{KEY}:SPECID`
 * and each script touches one key, so every call is a one-slot call; the
 * slot is computed from the Redis key name by the rule itself, so a KEY
 * holding braces or an empty KEY (whose `{}` is no tag) still lands where
 * Redis looks for it.
 *
 * Nodes.  nodes[0] is the configured address (the seed); every other node
 * is added when CLUSTER SLOTS or a redirect names it, and stays until the
 * limiter is freed (at most SR_MAX_NODES; a node beyond that is never
 * used: its slots stay unknown and go to nodes[0], which redirects).  Each
 * node is an sr_conn: its own lazily opened pool, its own circuit, the
 * limiter's shared counters.  A dead master's circuit opens without
 * touching the others.
 *
 * Slot map.  slot_node[s] is a node index + 1 (0: unknown, sent to
 * nodes[0]), read without a lock.  CLUSTER SLOTS rebuilds it whole (one
 * refresh at a time, under refresh_mu, at most every SR_REFRESH_MIN_NS,
 * asking the nodes in turn, skipping those whose circuit is open); a MOVED
 * sets its one slot at once.  A refresh is triggered by MOVED, CLUSTERDOWN
 * and by any failure to reach a node (after a failover the replica that
 * took over is found this way).
 *
 * Mode.  SLUICE_REDIS_CLUSTER_AUTO: the first call (or ping) sends
 * CLUSTER SLOTS to the seed: "cluster support disabled" means a single
 * server (from then on every call is exactly one EVALSHA to it, as without
 * this file); an array means a cluster.  A MOVED at any time also means a
 * cluster.  _OFF: a single server, no CLUSTER SLOTS ever (a MOVED is an
 * error reply).  _ON: a cluster; a seed that says it is not one fails the
 * call (err_reply) until it is.
 *
 * One call.  At most SR_MAX_REDIRECTS MOVED and ASK answers are followed;
 * ASK sends ASKING and the script to the node named, in one write, without
 * touching the map; TRYAGAIN and CLUSTERDOWN are retried on the same node
 * after a pause of 1, 2, 4 .. 16 ms, never past the deadline; a node that
 * cannot be reached is retried once on the node the refreshed map names,
 * if it names another.  All of it within the call's one deadline; a call
 * that runs out of redirects fails with err_reply.
 */
#define _GNU_SOURCE
#include "redis_internal.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

static void add(_Atomic uint64_t *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }

uint16_t sluice__crc16(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

/* The slot of a Redis key name (the cluster specification's rule). */
static unsigned key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open + 1 - key);
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return sluice__crc16(open + 1, (size_t)(close - open - 1)) & (SR_NSLOTS - 1);
    }
    return sluice__crc16(key, len) & (SR_NSLOTS - 1);
}

unsigned sluice_redis_key_slot(const void *key, size_t len)
{
    return key_slot(len ? key : "", len);
}

static sr_node *node_at(sr_cluster *cl, uint32_t i)
{
    return atomic_load_explicit(&cl->nodes[i], memory_order_acquire);
}

static uint32_t count(sr_cluster *cl)
{
    return atomic_load_explicit(&cl->nnodes, memory_order_acquire);
}

/* Allocate and start a node's pool; NULL when memory runs out. */
static sr_node *node_new(sr_cluster *cl, const char *host, int port)
{
    sr_node *n = sluice__malloc(sizeof *n);
    if (!n) return NULL;
    if (sluice__conn_init(&n->conn, host, port, &cl->cfg, &cl->ct) != 0) {
        sluice__free(n);
        return NULL;
    }
    return n;
}

/* The index of host:port, added when new; -1 when it cannot be. */
static int node_find_or_add(sr_cluster *cl, const char *host, int port)
{
    pthread_mutex_lock(&cl->nodes_mu);
    uint32_t n = count(cl);
    for (uint32_t i = 0; i < n; i++) {
        sr_node *x = node_at(cl, i);
        if (x->conn.port == port && strcmp(x->conn.host, host) == 0) {
            pthread_mutex_unlock(&cl->nodes_mu);
            return (int)i;
        }
    }
    int ix = -1;
    if (n < SR_MAX_NODES) {
        sr_node *x = node_new(cl, host, port);
        if (x) {
            atomic_store_explicit(&cl->nodes[n], x, memory_order_release);
            atomic_store_explicit(&cl->nnodes, n + 1, memory_order_release);
            ix = (int)n;
        }
    }
    pthread_mutex_unlock(&cl->nodes_mu);
    return ix;
}

int sluice__cluster_init(sr_cluster *cl, const char *host, int port, const sr_conn_cfg *cfg,
                         int want)
{
    memset(cl, 0, sizeof *cl);
    cl->cfg = *cfg;
    cl->cfg.user = cl->cfg.pass = NULL;
    cl->want = want;
    atomic_init(&cl->mode, want == SLUICE_REDIS_CLUSTER_OFF ? SR_MODE_SINGLE : SR_MODE_UNKNOWN);
    char *u = NULL, *pw = NULL;
    if (cfg->user) {
        size_t n = strlen(cfg->user) + 1;
        if (!(u = sluice__malloc(n))) goto oom;
        memcpy(u, cfg->user, n);
    }
    if (cfg->pass) {
        size_t n = strlen(cfg->pass) + 1;
        if (!(pw = sluice__malloc(n))) goto oom;
        memcpy(pw, cfg->pass, n);
    }
    cl->cfg.user = u;
    cl->cfg.pass = pw;
    if (pthread_mutex_init(&cl->nodes_mu, NULL) != 0) goto oom;
    if (pthread_mutex_init(&cl->refresh_mu, NULL) != 0) {
        pthread_mutex_destroy(&cl->nodes_mu);
        goto oom;
    }
    sr_node *seed = node_new(cl, host, port);
    if (!seed) {
        pthread_mutex_destroy(&cl->nodes_mu);
        pthread_mutex_destroy(&cl->refresh_mu);
        goto oom;
    }
    atomic_store(&cl->nodes[0], seed);
    atomic_store(&cl->nnodes, 1);
    return 0;
oom:
    sluice__free(u);
    sluice__free(pw);
    memset(cl, 0, sizeof *cl);
    return SLUICE_ENOMEM;
}

void sluice__cluster_fini(sr_cluster *cl)
{
    uint32_t n = count(cl);
    if (n == 0) return;
    for (uint32_t i = 0; i < n; i++) {
        sr_node *x = node_at(cl, i);
        sluice__conn_fini(&x->conn);
        sluice__free(x);
    }
    pthread_mutex_destroy(&cl->nodes_mu);
    pthread_mutex_destroy(&cl->refresh_mu);
    sluice__free((void *)cl->cfg.user);
    sluice__free((void *)cl->cfg.pass);
    memset(cl, 0, sizeof *cl);
}

/* ---- the slot map ---------------------------------------------------------- */

/* Apply a CLUSTER SLOTS reply got from node `from`: 0, or -1 when it is
 * not one (nothing changed).  refresh_mu held. */
static int apply_slots(sr_cluster *cl, const redisReply *rep, uint32_t from)
{
    if (rep->type != REDIS_REPLY_ARRAY) return -1;
    memset(cl->scratch, 0, sizeof cl->scratch);
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) return -1;
        const redisReply *lo = e->element[0], *hi = e->element[1], *m = e->element[2];
        if (lo->type != REDIS_REPLY_INTEGER || hi->type != REDIS_REPLY_INTEGER ||
            lo->integer < 0 || hi->integer < lo->integer || hi->integer >= SR_NSLOTS)
            return -1;
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
            m->element[0]->type != REDIS_REPLY_STRING ||
            m->element[1]->type != REDIS_REPLY_INTEGER || m->element[1]->integer < 1 ||
            m->element[1]->integer > 65535 || m->element[0]->len >= SR_HOST_MAX)
            return -1;
        /* an empty or "?" address: the node we asked (the specification's
         * "same endpoint as the request") */
        char host[SR_HOST_MAX];
        const redisReply *h = m->element[0];
        if (h->len == 0 || (h->len == 1 && h->str[0] == '?'))
            snprintf(host, sizeof host, "%s", node_at(cl, from)->conn.host);
        else {
            memcpy(host, h->str, h->len);
            host[h->len] = '\0';
        }
        int ix = node_find_or_add(cl, host, (int)m->element[1]->integer);
        if (ix < 0) continue; /* unknown: sent to nodes[0], which redirects */
        for (long long s = lo->integer; s <= hi->integer; s++) cl->scratch[s] = (uint16_t)(ix + 1);
    }
    for (int s = 0; s < SR_NSLOTS; s++)
        atomic_store_explicit(&cl->slot_node[s], cl->scratch[s], memory_order_relaxed);
    return 0;
}

static bool not_cluster(const redisReply *rep)
{
    return rep->type == REDIS_REPLY_ERROR && rep->str &&
           strstr(rep->str, "cluster support disabled") != NULL;
}

/* Ask node `ix` for CLUSTER SLOTS.  0: the map is rebuilt (mode CLUSTER);
 * 1: the node is not in cluster mode; else a negative code (an I/O
 * failure, counted by the pool, or an error reply, counted here). */
static int ask_slots(sr_cluster *cl, uint32_t ix, uint64_t deadline, uint64_t *retry_at)
{
    static const char *const argv[2] = {"CLUSTER", "SLOTS"};
    static const size_t lens[2] = {7, 5};
    void *v = NULL;
    int rc = sluice__conn_command(&node_at(cl, ix)->conn, 2, argv, lens, deadline, &v, retry_at);
    if (rc != 0) return rc;
    add(&cl->ct.refreshes); /* answered (an error reply too) */
    redisReply *rep = v;
    if (not_cluster(rep)) rc = 1;
    else if (apply_slots(cl, rep, ix) == 0) {
        atomic_store(&cl->mode, SR_MODE_CLUSTER);
        rc = 0;
    } else {
        add(rep->type == REDIS_REPLY_ERROR ? &cl->ct.err_reply : &cl->ct.err_protocol);
        rc = SLUICE_EBACKEND;
    }
    freeReplyObject(rep);
    return rc;
}

/* Rebuild the map if no refresh ran in the last SR_REFRESH_MIN_NS and no
 * other thread is refreshing: ask the nodes in turn (those whose circuit
 * is closed first) until one answers, within the deadline. */
static void refresh(sr_cluster *cl, uint64_t deadline)
{
    uint64_t now = sluice_now_ns();
    uint64_t last = atomic_load_explicit(&cl->last_refresh, memory_order_relaxed);
    if (now >= deadline || (last && now - last < SR_REFRESH_MIN_NS)) return;
    if (pthread_mutex_trylock(&cl->refresh_mu) != 0) return;
    last = atomic_load_explicit(&cl->last_refresh, memory_order_relaxed);
    if (!last || now - last >= SR_REFRESH_MIN_NS) {
        atomic_store_explicit(&cl->last_refresh, now, memory_order_relaxed);
        uint32_t n = count(cl), start = cl->refresh_from++ % n;
        /* two passes: closed circuits, then (if none answered) the rest */
        bool done = false;
        for (int pass = 0; pass < 2 && !done; pass++)
            for (uint32_t k = 0; k < n && !done && sluice_now_ns() < deadline; k++) {
                uint32_t ix = (start + k) % n;
                bool open = sluice__conn_circuit_state(&node_at(cl, ix)->conn) !=
                            SLUICE_REDIS_CIRCUIT_CLOSED;
                if (open != (pass == 1)) continue;
                uint64_t ra;
                done = ask_slots(cl, ix, deadline, &ra) == 0;
            }
    }
    pthread_mutex_unlock(&cl->refresh_mu);
}

/* The first call in AUTO or ON mode: find out what the seed is.  0 when
 * the mode is known, or when another thread is finding out (this call then
 * takes the cluster path with an unknown map: the seed either decides, or
 * redirects), else the error of this call. */
static int discover(sr_cluster *cl, uint64_t deadline, uint64_t *retry_at)
{
    if (pthread_mutex_trylock(&cl->refresh_mu) != 0) return 0;
    int rc = 0;
    if (atomic_load(&cl->mode) == SR_MODE_UNKNOWN) {
        rc = ask_slots(cl, 0, deadline, retry_at);
        if (rc == 0) {
            atomic_store_explicit(&cl->last_refresh, sluice_now_ns(), memory_order_relaxed);
        } else if (rc == 1) {
            if (cl->want == SLUICE_REDIS_CLUSTER_ON) {
                add(&cl->ct.err_reply);
                rc = SLUICE_EBACKEND;
            } else {
                atomic_store(&cl->mode, SR_MODE_SINGLE);
                rc = 0;
            }
        }
    }
    pthread_mutex_unlock(&cl->refresh_mu);
    return rc;
}

static uint32_t node_of_slot(sr_cluster *cl, unsigned slot)
{
    uint16_t v = atomic_load_explicit(&cl->slot_node[slot], memory_order_relaxed);
    return v ? (uint32_t)(v - 1) : 0;
}

/* Sleep until min(now + ns, deadline). */
static void pause_until(uint64_t ns, uint64_t deadline)
{
    uint64_t now = sluice_now_ns();
    if (now >= deadline) return;
    uint64_t end = deadline - now < ns ? deadline : now + ns;
    struct timespec ts = {(time_t)(end / 1000000000ULL), (long)(end % 1000000000ULL)};
    for (int i = 0; i < 100 && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR; i++) {
    }
}

int sluice__cluster_eval(sr_cluster *cl, int which, const char *key, size_t keylen,
                         const char *const *args, const size_t *arglens, int nargs,
                         uint64_t deadline, long long *out, int nout, uint64_t *retry_at)
{
    *retry_at = 0;
    int mode = atomic_load_explicit(&cl->mode, memory_order_relaxed);
    if (mode == SR_MODE_UNKNOWN) {
        int rc = discover(cl, deadline, retry_at);
        if (rc != 0) return rc;
        mode = atomic_load_explicit(&cl->mode, memory_order_relaxed);
    }
    if (mode == SR_MODE_SINGLE) /* exactly one EVALSHA, as to any server */
        return sluice__conn_eval(&node_at(cl, 0)->conn, which, key, keylen, args, arglens, nargs,
                                 deadline, out, nout, retry_at, false, NULL);

    const unsigned slot = key_slot(key, keylen);
    uint32_t ix = node_of_slot(cl, slot);
    bool asking = false;
    int redirects = 0, moved_on_failure = 0;
    uint64_t pause_ns = 1000000;
    sr_redirect rd;
    /* bounded: each turn is a redirect (at most SR_MAX_REDIRECTS), a failed
     * node retried elsewhere (at most 2), or a pause (the deadline; and the
     * count: 4096 pauses of at most 16 ms outlast a 60-s deadline) */
    for (int turn = 0; turn < 4096; turn++) {
        int rc = sluice__conn_eval(&node_at(cl, ix)->conn, which, key, keylen, args, arglens,
                                   nargs, deadline, out, nout, retry_at, asking, &rd);
        if (rc == 0) return 0;
        if (rc < 0) {
            /* the node may be gone (a failover): learn the map again and
             * try the node it names, if another, while time is left */
            refresh(cl, deadline);
            uint32_t nix = node_of_slot(cl, slot);
            if (nix == ix || moved_on_failure >= 2 || sluice_now_ns() >= deadline) return rc;
            moved_on_failure++;
            ix = nix;
            asking = false;
            continue;
        }
        switch (rd.kind) {
        case SR_RD_MOVED:
        case SR_RD_ASK: {
            add(rd.kind == SR_RD_MOVED ? &cl->ct.moved : &cl->ct.ask);
            if (++redirects > SR_MAX_REDIRECTS) {
                add(&cl->ct.err_reply);
                return SLUICE_EBACKEND;
            }
            int nix = node_find_or_add(cl, rd.host, rd.port);
            if (nix < 0) {
                add(&cl->ct.err_reply);
                return SLUICE_EBACKEND;
            }
            if (rd.kind == SR_RD_MOVED) {
                atomic_store(&cl->mode, SR_MODE_CLUSTER);
                atomic_store_explicit(&cl->slot_node[rd.slot], (uint16_t)(nix + 1),
                                      memory_order_relaxed);
                refresh(cl, deadline); /* others moved too, likely */
                asking = false;
            } else {
                asking = true;
            }
            ix = (uint32_t)nix;
            break;
        }
        default: /* TRYAGAIN, CLUSTERDOWN: the same node, after a pause */
            add(rd.kind == SR_RD_TRYAGAIN ? &cl->ct.tryagain : &cl->ct.clusterdown);
            if (rd.kind == SR_RD_CLUSTERDOWN) refresh(cl, deadline);
            pause_until(pause_ns, deadline);
            if (pause_ns < 16000000) pause_ns *= 2;
            if (sluice_now_ns() >= deadline) {
                add(&cl->ct.err_timeout);
                return SLUICE_ETIMEDOUT;
            }
            break;
        }
    }
    add(&cl->ct.err_reply);
    return SLUICE_EBACKEND;
}

int sluice__cluster_ping(sr_cluster *cl, uint64_t deadline, uint64_t *retry_at)
{
    *retry_at = 0;
    if (atomic_load(&cl->mode) == SR_MODE_UNKNOWN) {
        int rc = discover(cl, deadline, retry_at);
        if (rc != 0) return rc;
    }
    int rc = sluice__conn_ping(&node_at(cl, 0)->conn, deadline, retry_at);
    if (rc == 0 || atomic_load(&cl->mode) != SR_MODE_CLUSTER) return rc;
    uint32_t n = count(cl);
    for (uint32_t i = 1; i < n && sluice_now_ns() < deadline; i++) {
        sr_node *x = node_at(cl, i);
        if (sluice__conn_circuit_state(&x->conn) != SLUICE_REDIS_CIRCUIT_CLOSED) continue;
        if (sluice__conn_ping(&x->conn, deadline, retry_at) == 0) return 0;
    }
    return rc;
}

int sluice__cluster_circuit_state(sr_cluster *cl)
{
    uint32_t n = count(cl);
    int worst = SLUICE_REDIS_CIRCUIT_CLOSED;
    for (uint32_t i = 0; i < n; i++) {
        int st = sluice__conn_circuit_state(&node_at(cl, i)->conn);
        if (st == SLUICE_REDIS_CIRCUIT_OPEN) return st;
        if (st == SLUICE_REDIS_CIRCUIT_HALF_OPEN) worst = st;
    }
    return worst;
}
