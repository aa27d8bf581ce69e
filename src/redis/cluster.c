/* cluster.c -- Redis Cluster: which node serves a key, and following the
 * cluster's answers within one call's deadline.
 *
 *   key_slot            the slot of a Redis key name
 *   node_* / table      the nodes, reference-counted, bounded
 *   apply_slots         a CLUSTER SLOTS reply -> the map; unnamed nodes dropped
 *   discover, refresh   what the seed is; the map again, with a small budget
 *   sluice__cluster_eval   one call: the map, redirects, retries
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
 * Nodes.  nodes[0] is the configured address (the seed), kept for the
 * limiter's life.  Every other node is added when CLUSTER SLOTS or a
 * redirect names it, and dropped (its connections closed) by the next
 * refresh whose map does not name it: the table follows the current map,
 * so rolling restarts to new addresses never fill it.  At most
 * SR_MAX_NODES at once; a dropped node's index is reused, and a full table
 * drops a node that no slot names (an old redirect's target) to make room
 * (a map naming more masters than that leaves the rest of its slots
 * unknown: they go to the seed, which redirects).  Each node is an sr_conn: its own lazily
 * opened pool, its own circuit, the limiter's shared counters.  A call
 * holds a reference to the node it talks to (nodes_mu, two short critical
 * sections per attempt next to a network round trip), so a node dropped
 * meanwhile is freed by whoever lets go of it last.
 *
 * Slot map.  slot_node[s] is a node index + 1 (0: unknown, sent to the
 * seed), read without a lock; an index whose node was dropped also means
 * the seed, and an index reused by another node at worst costs a MOVED.
 * CLUSTER SLOTS rebuilds it whole and drops the nodes it does not name;
 * a MOVED sets its one slot at once.
 *
 * Refreshes never take a caller's whole deadline.  A MOVED, CLUSTERDOWN or
 * a failure to reach a node marks the map stale; the call itself follows
 * the redirect's target at once (MOVED: the slot is recorded and the
 * script sent to the node named; ASK: ASKING and the script to it).  The
 * next call that finds the map stale (at most one refresh every
 * SR_REFRESH_MIN_NS, one at a time) refreshes it first, with a budget of
 * 1/SR_REFRESH_SHARE of the time it has left; after a failure to reach a
 * node the failing call does the same and retries on the node the new map
 * names.  A refresh asks at most SR_REFRESH_TRIES nodes, those that
 * answered most recently first (those whose circuit is closed before the
 * others), so a silent, stale node is asked last, if the budget lasts.
 *
 * Mode.  SLUICE_REDIS_CLUSTER_AUTO: the first call (or ping) sends
 * CLUSTER SLOTS to the seed, once: an array means a cluster; any error
 * reply ("cluster support disabled", "unknown command" from a server that
 * renamed CLUSTER away or a proxy, NOPERM, ...) means a single server,
 * except LOADING and BUSY (the server cannot answer yet: the call fails
 * and a later one asks again).  A single server gets exactly one EVALSHA
 * per call, as without this file; a MOVED or ASK from it at any time
 * means a cluster after all.  _OFF: a single server, no CLUSTER SLOTS ever
 * (a MOVED is an error reply).  _ON: a cluster; a seed that does not
 * answer CLUSTER SLOTS with a map fails the call (err_reply) until it does.
 *
 * One call.  At most SR_MAX_REDIRECTS MOVED and ASK answers are followed;
 * an empty host in a redirect (`MOVED 3999 :6380`; also "?") means the
 * host of the node that answered; TRYAGAIN and CLUSTERDOWN are retried on
 * the same node after a pause of 1, 2, 4 .. 16 ms, never past the deadline;
 * a node that cannot be reached is retried (at most twice) on the node the
 * refreshed map names, if it names another.  All of it within the call's
 * one deadline; a call that runs out of redirects fails with err_reply.
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


/* ---- the node table ---------------------------------------------------------- */

/* Allocate and start a node's pool (one reference: the table's); NULL when
 * memory runs out. */
static sr_node *node_new(sr_cluster *cl, const char *host, int port)
{
    sr_node *n = sluice__malloc(sizeof *n);
    if (!n) return NULL;
    if (sluice__conn_init(&n->conn, host, port, &cl->cfg, &cl->ct) != 0) {
        sluice__free(n);
        return NULL;
    }
    n->refs = 1;
    n->serves = false;
    atomic_init(&n->last_ok, 0);
    return n;
}

static void node_free(sr_node *n)
{
    sluice__conn_fini(&n->conn);
    sluice__free(n);
}

/* Take a reference to the node at index ix (the seed when ix names none). */
static sr_node *node_get(sr_cluster *cl, uint32_t ix)
{
    pthread_mutex_lock(&cl->nodes_mu);
    sr_node *n = ix < SR_MAX_NODES && cl->nodes[ix] ? cl->nodes[ix] : cl->nodes[0];
    n->refs++;
    pthread_mutex_unlock(&cl->nodes_mu);
    return n;
}

/* Let go of a reference; the last one frees a dropped node. */
static void node_put(sr_cluster *cl, sr_node *n)
{
    pthread_mutex_lock(&cl->nodes_mu);
    bool last = --n->refs == 0;
    pthread_mutex_unlock(&cl->nodes_mu);
    if (last) node_free(n);
}

/* Remove the node at index ix from the table (nodes_mu held); it is
 * freed now, or by the last call that holds it.  Returns it when it must
 * be freed by the caller (outside the lock), else NULL. */
static sr_node *node_drop_locked(sr_cluster *cl, uint32_t ix)
{
    sr_node *n = cl->nodes[ix];
    cl->nodes[ix] = NULL;
    while (cl->hi > 1 && !cl->nodes[cl->hi - 1]) cl->hi--;
    atomic_fetch_sub_explicit(&cl->nnodes, 1, memory_order_relaxed);
    return --n->refs == 0 ? n : NULL;
}

/* The index of host:port, added when new (nodes_mu held); -1 when the table
 * is full of nodes that serve slots (or that `keep` marks), or memory runs
 * out. */
static int node_find_or_add_locked(sr_cluster *cl, const char *host, int port, const bool *keep)
{
    int free_ix = -1;
    for (uint32_t i = 0; i < cl->hi; i++) {
        sr_node *x = cl->nodes[i];
        if (!x) {
            if (free_ix < 0) free_ix = (int)i;
            continue;
        }
        if (x->conn.port == port && strcmp(x->conn.host, host) == 0) return (int)i;
    }
    if (free_ix < 0 && cl->hi < SR_MAX_NODES) free_ix = (int)cl->hi;
    if (free_ix < 0) {
        /* full: drop a node no slot of the map names (a redirect's target
         * since replaced, an ASK's), and take its index */
        bool named[SR_MAX_NODES] = {false};
        for (int s = 0; s < SR_NSLOTS; s++) {
            uint16_t v = atomic_load_explicit(&cl->slot_node[s], memory_order_relaxed);
            if (v) named[v - 1] = true;
        }
        for (uint32_t i = 1; i < cl->hi && free_ix < 0; i++)
            if (!named[i] && !(keep && keep[i])) free_ix = (int)i;
        if (free_ix < 0) return -1; /* SR_MAX_NODES nodes serve slots */
        sr_node *g = node_drop_locked(cl, (uint32_t)free_ix);
        if (g) node_free(g); /* no call holds it; its locks are its own */
    }
    sr_node *x = node_new(cl, host, port);
    if (!x) return -1;
    cl->nodes[free_ix] = x;
    if ((uint32_t)free_ix >= cl->hi) cl->hi = (uint32_t)free_ix + 1;
    atomic_fetch_add_explicit(&cl->nnodes, 1, memory_order_relaxed);
    return free_ix;
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
    cl->nodes[0] = seed;
    cl->hi = 1;
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
    if (!cl->hi) return;
    for (uint32_t i = 0; i < cl->hi; i++)
        if (cl->nodes[i]) node_free(cl->nodes[i]); /* no call holds one now */
    pthread_mutex_destroy(&cl->nodes_mu);
    pthread_mutex_destroy(&cl->refresh_mu);
    sluice__free((void *)cl->cfg.user);
    sluice__free((void *)cl->cfg.pass);
    memset(cl, 0, sizeof *cl);
}

/* ---- the slot map ---------------------------------------------------------- */

static bool is_same_host(const char *h, size_t len)
{
    return len == 0 || (len == 1 && h[0] == '?');
}

/* Check a CLUSTER SLOTS reply's shape: every entry [lo, hi, [host, port,
 * ...], ...] with 0 <= lo <= hi < 16384, a host shorter than SR_HOST_MAX
 * and a port of 1 .. 65535. */
static bool slots_reply_ok(const redisReply *rep)
{
    if (rep->type != REDIS_REPLY_ARRAY) return false;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) return false;
        const redisReply *lo = e->element[0], *hi = e->element[1], *m = e->element[2];
        if (lo->type != REDIS_REPLY_INTEGER || hi->type != REDIS_REPLY_INTEGER ||
            lo->integer < 0 || hi->integer < lo->integer || hi->integer >= SR_NSLOTS)
            return false;
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
            m->element[0]->type != REDIS_REPLY_STRING ||
            m->element[1]->type != REDIS_REPLY_INTEGER || m->element[1]->integer < 1 ||
            m->element[1]->integer > 65535 || m->element[0]->len >= SR_HOST_MAX)
            return false;
    }
    return true;
}

/* Apply a CLUSTER SLOTS reply got from node `from`: 0, or -1 when it is
 * not one (nothing changed).  The map is replaced whole; the nodes it does
 * not name (but the seed) are dropped.  refresh_mu held. */
static int apply_slots(sr_cluster *cl, const redisReply *rep, const sr_node *from)
{
    if (!slots_reply_ok(rep)) return -1;
    memset(cl->scratch, 0, sizeof cl->scratch);
    bool named[SR_MAX_NODES] = {false};
    sr_node *gone[SR_MAX_NODES];
    int ngone = 0;
    pthread_mutex_lock(&cl->nodes_mu);
    /* bounded: the reply's entries (each checked above), each range within
     * 0 .. 16383 */
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        const redisReply *m = e->element[2], *h = m->element[0];
        /* an empty or "?" address: the node we asked (the specification's
         * "same endpoint as the request") */
        char host[SR_HOST_MAX];
        if (is_same_host(h->str, h->len))
            snprintf(host, sizeof host, "%s", from->conn.host);
        else {
            memcpy(host, h->str, h->len);
            host[h->len] = '\0';
        }
        int ix = node_find_or_add_locked(cl, host, (int)m->element[1]->integer, named);
        if (ix < 0) continue; /* the table is full: unknown, sent to the seed */
        named[ix] = true;
        for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
            cl->scratch[s] = (uint16_t)(ix + 1);
    }
    for (int s = 0; s < SR_NSLOTS; s++)
        atomic_store_explicit(&cl->slot_node[s], cl->scratch[s], memory_order_relaxed);
    for (uint32_t i = 0; i < cl->hi; i++) {
        if (!cl->nodes[i]) continue;
        cl->nodes[i]->serves = named[i];
        if (i > 0 && !named[i]) {
            sr_node *g = node_drop_locked(cl, i);
            if (g) gone[ngone++] = g;
        }
    }
    pthread_mutex_unlock(&cl->nodes_mu);
    for (int i = 0; i < ngone; i++) node_free(gone[i]);
    return 0;
}

/* An error reply to CLUSTER SLOTS that says "not now" rather than "no". */
static bool transient(const redisReply *rep)
{
    return rep->len >= 7 && (memcmp(rep->str, "LOADING", 7) == 0 || memcmp(rep->str, "BUSY", 4) == 0);
}

/* Ask node `n` for CLUSTER SLOTS.  0: the map is rebuilt (mode CLUSTER);
 * 1: an error reply that means "not a cluster node" (any but LOADING or
 * BUSY); else a negative code (an I/O failure, counted by the pool, or a
 * reply that is no map, counted here). */
static int ask_slots(sr_cluster *cl, sr_node *n, uint64_t deadline, uint64_t *retry_at)
{
    static const char *const argv[2] = {"CLUSTER", "SLOTS"};
    static const size_t lens[2] = {7, 5};
    void *v = NULL;
    int rc = sluice__conn_command(&n->conn, 2, argv, lens, deadline, &v, retry_at);
    if (rc != 0) return rc;
    add(&cl->ct.refreshes); /* answered (an error reply too) */
    atomic_store_explicit(&n->last_ok, sluice_now_ns(), memory_order_relaxed);
    redisReply *rep = v;
    if (rep->type == REDIS_REPLY_ERROR && !transient(rep)) rc = 1;
    else if (apply_slots(cl, rep, n) == 0) {
        atomic_store(&cl->mode, SR_MODE_CLUSTER);
        atomic_store(&cl->stale, false);
        rc = 0;
    } else {
        add(rep->type == REDIS_REPLY_ERROR ? &cl->ct.err_reply : &cl->ct.err_protocol);
        rc = SLUICE_EBACKEND;
    }
    freeReplyObject(rep);
    return rc;
}

/* Refresh candidates: closed circuits first, the most recently answered
 * first among them. */
static int cand_cmp(const void *a, const void *b)
{
    const sr_cand *x = a, *y = b;
    if (x->closed != y->closed) return x->closed ? -1 : 1;
    return x->last_ok > y->last_ok ? -1 : x->last_ok < y->last_ok;
}

/* Rebuild the map when it is stale, no refresh began in the last
 * SR_REFRESH_MIN_NS and no other thread is refreshing: ask the nodes in
 * the order above until one answers with a map, within 1/SR_REFRESH_SHARE
 * of the time left before `deadline`, asking at most SR_REFRESH_TRIES. */
static void refresh(sr_cluster *cl, uint64_t deadline)
{
    if (!atomic_load_explicit(&cl->stale, memory_order_relaxed)) return;
    uint64_t now = sluice_now_ns();
    uint64_t last = atomic_load_explicit(&cl->last_refresh, memory_order_relaxed);
    if (now >= deadline || (last && now - last < SR_REFRESH_MIN_NS)) return;
    if (pthread_mutex_trylock(&cl->refresh_mu) != 0) return;
    last = atomic_load_explicit(&cl->last_refresh, memory_order_relaxed);
    if ((!last || now - last >= SR_REFRESH_MIN_NS) && atomic_load(&cl->stale)) {
        atomic_store_explicit(&cl->last_refresh, now, memory_order_relaxed);
        const uint64_t budget_end = now + (deadline - now) / SR_REFRESH_SHARE;
        sr_cand *c = cl->cand;
        uint32_t nc = 0;
        pthread_mutex_lock(&cl->nodes_mu);
        for (uint32_t i = 0; i < cl->hi; i++) {
            sr_node *x = cl->nodes[i];
            if (!x) continue;
            x->refs++;
            c[nc++] = (sr_cand){x, false, atomic_load_explicit(&x->last_ok, memory_order_relaxed)};
        }
        pthread_mutex_unlock(&cl->nodes_mu);
        for (uint32_t i = 0; i < nc; i++)
            c[i].closed = sluice__conn_circuit_state(&c[i].n->conn) == SLUICE_REDIS_CIRCUIT_CLOSED;
        qsort(c, nc, sizeof c[0], cand_cmp);
        bool done = false;
        for (uint32_t k = 0; k < nc && k < SR_REFRESH_TRIES && !done &&
                             sluice_now_ns() < budget_end;
             k++) {
            uint64_t ra;
            done = ask_slots(cl, c[k].n, budget_end, &ra) == 0;
        }
        for (uint32_t i = 0; i < nc; i++) node_put(cl, c[i].n);
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
        sr_node *seed = node_get(cl, 0);
        rc = ask_slots(cl, seed, deadline, retry_at);
        node_put(cl, seed);
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

static uint32_t index_of_slot(sr_cluster *cl, unsigned slot)
{
    uint16_t v = atomic_load_explicit(&cl->slot_node[slot], memory_order_relaxed);
    return v ? (uint32_t)(v - 1) : 0;
}

/* A redirect's node, with a reference, added to the table when new; for
 * MOVED the slot is recorded and the node marked as serving.  NULL when
 * the table is full or memory runs out. */
static sr_node *redirect_node(sr_cluster *cl, const sr_redirect *rd, const sr_node *from)
{
    const char *host = is_same_host(rd->host, strlen(rd->host)) ? from->conn.host : rd->host;
    pthread_mutex_lock(&cl->nodes_mu);
    int ix = node_find_or_add_locked(cl, host, rd->port, NULL);
    sr_node *n = NULL;
    if (ix >= 0) {
        n = cl->nodes[ix];
        n->refs++;
        if (rd->kind == SR_RD_MOVED) {
            n->serves = true;
            atomic_store_explicit(&cl->slot_node[rd->slot], (uint16_t)(ix + 1),
                                  memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&cl->nodes_mu);
    return n;
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

/* The cluster path of one call, starting at node `n` (a reference the
 * call owns), `asking` for an ASK already received. */
static int cluster_call(sr_cluster *cl, sr_node *n, bool asking, unsigned slot, int which,
                        const char *const *keys, const size_t *keylens, int nkeys,
                        const char *const *args,
                        const size_t *arglens, int nargs, uint64_t deadline, long long *out,
                        int nout, uint64_t *retry_at, int redirects)
{
    int moved_on_failure = 0, rc = SLUICE_EBACKEND;
    uint64_t pause_ns = 1000000;
    sr_redirect rd;
    /* bounded: each turn is a redirect (at most SR_MAX_REDIRECTS), a failed
     * node retried elsewhere (at most 2), or a pause (the deadline; and the
     * count: 4096 pauses of at most 16 ms outlast a 60-s deadline) */
    for (int turn = 0; turn < 4096; turn++) {
        rc = sluice__conn_eval(&n->conn, which, keys, keylens, nkeys, args, arglens, nargs, deadline, out,
                               nout, retry_at, asking, &rd);
        if (rc == 0) {
            atomic_store_explicit(&n->last_ok, sluice_now_ns(), memory_order_relaxed);
            break;
        }
        if (rc < 0) {
            /* the node may be gone (a failover): learn the map again,
             * within a share of the time left, and try the node it names,
             * if another */
            atomic_store(&cl->stale, true);
            refresh(cl, deadline);
            sr_node *nn = node_get(cl, index_of_slot(cl, slot));
            if (nn == n || moved_on_failure >= 2 || sluice_now_ns() >= deadline) {
                node_put(cl, nn);
                break;
            }
            moved_on_failure++;
            node_put(cl, n);
            n = nn;
            asking = false;
            continue;
        }
        atomic_store_explicit(&n->last_ok, sluice_now_ns(), memory_order_relaxed);
        if (rd.kind == SR_RD_MOVED || rd.kind == SR_RD_ASK) {
            add(rd.kind == SR_RD_MOVED ? &cl->ct.moved : &cl->ct.ask);
            sr_node *nn = ++redirects > SR_MAX_REDIRECTS ? NULL : redirect_node(cl, &rd, n);
            if (!nn) {
                add(&cl->ct.err_reply);
                rc = SLUICE_EBACKEND;
                break;
            }
            if (rd.kind == SR_RD_MOVED) atomic_store(&cl->stale, true); /* others moved too, likely */
            asking = rd.kind == SR_RD_ASK;
            node_put(cl, n);
            n = nn;
            continue;
        }
        /* TRYAGAIN, CLUSTERDOWN: the same node, after a pause */
        add(rd.kind == SR_RD_TRYAGAIN ? &cl->ct.tryagain : &cl->ct.clusterdown);
        if (rd.kind == SR_RD_CLUSTERDOWN) atomic_store(&cl->stale, true);
        pause_until(pause_ns, deadline);
        if (pause_ns < 16000000) pause_ns *= 2;
        if (sluice_now_ns() >= deadline) {
            add(&cl->ct.err_timeout);
            rc = SLUICE_ETIMEDOUT;
            break;
        }
    }
    if (rc > 0) { /* 4096 turns: never reached before the deadline */
        add(&cl->ct.err_reply);
        rc = SLUICE_EBACKEND;
    }
    node_put(cl, n);
    return rc;
}

int sluice__cluster_eval(sr_cluster *cl, int which, const char *const *keys,
                         const size_t *keylens, int nkeys, const char *const *args, const size_t *arglens, int nargs,
                         uint64_t deadline, long long *out, int nout, uint64_t *retry_at)
{
    *retry_at = 0;
    int mode = atomic_load_explicit(&cl->mode, memory_order_relaxed);
    if (mode == SR_MODE_UNKNOWN) {
        int rc = discover(cl, deadline, retry_at);
        if (rc != 0) return rc;
        mode = atomic_load_explicit(&cl->mode, memory_order_relaxed);
    }
    const unsigned slot = key_slot(keys[0], keylens[0]);
    if (mode == SR_MODE_CLUSTER)
        for (int i = 1; i < nkeys; i++)
            if (key_slot(keys[i], keylens[i]) != slot) return SLUICE_ERANGE; /* nothing sent */
    if (mode == SR_MODE_SINGLE) { /* exactly one EVALSHA, as to any server */
        sr_node *seed = cl->nodes[0]; /* never dropped */
        if (cl->want == SLUICE_REDIS_CLUSTER_OFF)
            return sluice__conn_eval(&seed->conn, which, keys, keylens, nkeys, args, arglens, nargs,
                                     deadline, out, nout, retry_at, false, NULL);
        sr_redirect rd;
        int rc = sluice__conn_eval(&seed->conn, which, keys, keylens, nkeys, args, arglens, nargs,
                                   deadline, out, nout, retry_at, false, &rd);
        if (rc <= 0) return rc;
        if (rd.kind != SR_RD_MOVED && rd.kind != SR_RD_ASK) {
            add(&cl->ct.err_reply); /* a single server never says that */
            return SLUICE_EBACKEND;
        }
        /* AUTO, and a MOVED or ASK: a cluster after all (CLUSTER SLOTS
         * renamed away, or refused to us): follow it */
        atomic_store(&cl->mode, SR_MODE_CLUSTER);
        atomic_store(&cl->stale, true);
        add(rd.kind == SR_RD_MOVED ? &cl->ct.moved : &cl->ct.ask);
        sr_node *nn = redirect_node(cl, &rd, seed);
        if (!nn) {
            add(&cl->ct.err_reply);
            return SLUICE_EBACKEND;
        }
        return cluster_call(cl, nn, rd.kind == SR_RD_ASK, slot, which, keys, keylens, nkeys, args,
                            arglens, nargs, deadline, out, nout, retry_at, 1);
    }
    refresh(cl, deadline); /* when stale: a share of the time left */
    sr_node *n = node_get(cl, index_of_slot(cl, slot));
    return cluster_call(cl, n, false, slot, which, keys, keylens, nkeys, args, arglens, nargs, deadline,
                        out, nout, retry_at, 0);
}

int sluice__cluster_ping(sr_cluster *cl, uint64_t deadline, uint64_t *retry_at)
{
    *retry_at = 0;
    if (atomic_load(&cl->mode) == SR_MODE_UNKNOWN) {
        int rc = discover(cl, deadline, retry_at);
        if (rc != 0) return rc;
    }
    int rc = sluice__conn_ping(&cl->nodes[0]->conn, deadline, retry_at);
    if (rc == 0 || atomic_load(&cl->mode) != SR_MODE_CLUSTER) return rc;
    /* the seed did not answer: any node that serves slots will do */
    for (uint32_t i = 1; i < SR_MAX_NODES && sluice_now_ns() < deadline; i++) {
        pthread_mutex_lock(&cl->nodes_mu);
        bool end = i >= cl->hi;
        sr_node *x = end ? NULL : cl->nodes[i];
        if (x) x->refs++;
        pthread_mutex_unlock(&cl->nodes_mu);
        if (end) break;
        if (!x) continue;
        int r = SLUICE_EBACKEND;
        if (sluice__conn_circuit_state(&x->conn) == SLUICE_REDIS_CIRCUIT_CLOSED)
            r = sluice__conn_ping(&x->conn, deadline, retry_at);
        node_put(cl, x);
        if (r == 0) return 0;
    }
    return rc;
}

int sluice__cluster_circuit_state(sr_cluster *cl)
{
    const bool cluster = atomic_load(&cl->mode) == SR_MODE_CLUSTER;
    int worst = SLUICE_REDIS_CIRCUIT_CLOSED;
    bool any = false;
    pthread_mutex_lock(&cl->nodes_mu);
    for (uint32_t i = 0; cluster && i < cl->hi; i++) {
        sr_node *x = cl->nodes[i];
        if (!x || !x->serves) continue;
        any = true;
        int st = sluice__conn_circuit_state(&x->conn);
        if (st == SLUICE_REDIS_CIRCUIT_OPEN) worst = st;
        else if (st == SLUICE_REDIS_CIRCUIT_HALF_OPEN && worst == SLUICE_REDIS_CIRCUIT_CLOSED)
            worst = st;
    }
    if (!any) worst = sluice__conn_circuit_state(&cl->nodes[0]->conn);
    pthread_mutex_unlock(&cl->nodes_mu);
    return worst;
}
