/* conn.c -- connections to one Redis server: a pool, a circuit breaker,
 * and one script call that never outlives its deadline.  (A cluster is one
 * of these per node: cluster.c.)
 *
 * Deadlines.  A call gets one deadline (CLOCK_MONOTONIC ns) and everything
 * it does is cut to it: waiting for a free pooled connection
 * (pthread_cond_timedwait), connecting (a non-blocking connect, then ppoll
 * for writability, at most connect_timeout too), sending (our own send()
 * with MSG_NOSIGNAL on the context's non-blocking socket, ppoll between
 * partial writes) and reading (ppoll for readability, then hiredis's
 * redisBufferRead and reply parser).  hiredis's own blocking I/O is never
 * used, so SO_RCVTIMEO-style per-syscall timeouts cannot add up.  The one
 * thing no deadline bounds is getaddrinfo() for a host given by name.
 *
 * Broken contexts.  After any I/O error, timeout or unparsable reply the
 * context is freed (redisFree) and its slot emptied: a context whose stream
 * may hold half a reply is never reused.  An error reply (READONLY, OOM,
 * BUSY...) leaves the stream intact; the context is kept, except after
 * READONLY/LOADING/MASTERDOWN, which mean "this is not the server to talk
 * to" (e.g. a failover) and so reconnect.
 *
 * Scripts.  EVALSHA with the SHA1 computed locally; on NOSCRIPT (the
 * server's script cache was flushed, or it restarted, or it is a new master
 * after a failover) the same call is sent once more as EVAL with the body,
 * which also caches it.  So SCRIPT FLUSH costs one extra round trip per
 * connection and no error.
 *
 * AUTH.  With a password configured, a new connection sends AUTH [user]
 * password (within the same deadline) before it joins the pool; a refusal
 * frees it, counts as err_reply and as a failure of the circuit.
 *
 * Cluster answers.  The cluster layer asks for MOVED, ASK, TRYAGAIN and
 * CLUSTERDOWN to come back to it parsed (sr_redirect) instead of as errors:
 * the node answered, so the circuit counts a success.  For ASK it sets
 * `asking`: ASKING and the script go in one write, and ASKING's +OK is read
 * first (also before the EVAL that answers a NOSCRIPT, since ASKING lasts
 * one command).
 *
 * Circuit.  circuit_threshold consecutive failed calls open it: calls then
 * fail at once (err_circuit) without touching the network until
 * open_until; then exactly one call (the probe) may try; its success
 * closes the circuit, its failure reopens it with the backoff doubled (up
 * to retry_max, each wait jittered to 75..100 %).  Opening bumps the epoch,
 * so every pooled connection made before is discarded rather than reused.
 */
#define _GNU_SOURCE /* ppoll */
#include "redis_internal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <hiredis/hiredis.h>

static uint64_t mono_ns(void) { return sluice_now_ns(); }

int sluice__conn_init(sr_conn *c, const char *host, int port, const sr_conn_cfg *cfg,
                      sr_counters *ct)
{
    memset(c, 0, sizeof *c);
    const uint32_t pool_size = cfg->pool_size;
    c->ct = ct;
    c->user = cfg->user;
    c->pass = cfg->pass;
    size_t hl = strlen(host);
    c->host = sluice__malloc(hl + 1);
    c->slots = sluice__calloc(pool_size, sizeof *c->slots);
    c->free_ix = sluice__calloc(pool_size, sizeof *c->free_ix);
    if (!c->host || !c->slots || !c->free_ix) goto oom;
    memcpy(c->host, host, hl + 1);
    c->port = port;
    c->connect_timeout_ns = cfg->connect_timeout_ns;
    c->threshold = cfg->threshold;
    c->retry_min_ns = cfg->retry_min_ns;
    c->retry_max_ns = cfg->retry_max_ns;
    c->backoff_ns = cfg->retry_min_ns;
    c->nslots = c->nfree = pool_size;
    for (uint32_t i = 0; i < pool_size; i++) c->free_ix[i] = pool_size - 1 - i;
    c->rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uintptr_t)c ^ mono_ns();
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) goto oom;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int e1 = pthread_cond_init(&c->pool_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (e1 != 0) goto oom;
    if (pthread_mutex_init(&c->pool_mu, NULL) != 0) {
        pthread_cond_destroy(&c->pool_cv);
        goto oom;
    }
    if (pthread_mutex_init(&c->circ_mu, NULL) != 0) {
        pthread_mutex_destroy(&c->pool_mu);
        pthread_cond_destroy(&c->pool_cv);
        goto oom;
    }
    return 0;
oom:
    sluice__free(c->host);
    sluice__free(c->slots);
    sluice__free(c->free_ix);
    memset(c, 0, sizeof *c);
    return SLUICE_ENOMEM;
}

void sluice__conn_fini(sr_conn *c)
{
    if (!c->slots) return;
    for (uint32_t i = 0; i < c->nslots; i++)
        if (c->slots[i].ctx) redisFree(c->slots[i].ctx);
    pthread_cond_destroy(&c->pool_cv);
    pthread_mutex_destroy(&c->pool_mu);
    pthread_mutex_destroy(&c->circ_mu);
    sluice__free(c->host);
    sluice__free(c->slots);
    sluice__free(c->free_ix);
    memset(c, 0, sizeof *c);
}

static void add(_Atomic uint64_t *ctr) { atomic_fetch_add_explicit(ctr, 1, memory_order_relaxed); }

/* ---- pool ------------------------------------------------------------- */

static sr_slot *pool_get(sr_conn *c, uint64_t deadline)
{
    pthread_mutex_lock(&c->pool_mu);
    /* bounded: each wait ends by the deadline */
    while (c->nfree == 0) {
        uint64_t now = mono_ns();
        if (now >= deadline) {
            pthread_mutex_unlock(&c->pool_mu);
            return NULL;
        }
        struct timespec ts = {(time_t)(deadline / 1000000000ULL), (long)(deadline % 1000000000ULL)};
        int e = pthread_cond_timedwait(&c->pool_cv, &c->pool_mu, &ts);
        if (e != 0 && e != ETIMEDOUT && e != EINTR) break;
    }
    sr_slot *s = NULL;
    if (c->nfree > 0) s = &c->slots[c->free_ix[--c->nfree]];
    pthread_mutex_unlock(&c->pool_mu);
    return s;
}

static void pool_put(sr_conn *c, sr_slot *s)
{
    pthread_mutex_lock(&c->pool_mu);
    c->free_ix[c->nfree++] = (uint32_t)(s - c->slots);
    pthread_cond_signal(&c->pool_cv);
    pthread_mutex_unlock(&c->pool_mu);
}

static void discard(sr_conn *c, sr_slot *s)
{
    if (s->ctx) {
        redisFree(s->ctx);
        s->ctx = NULL;
        add(&c->ct->discarded);
    }
}

/* ---- circuit ---------------------------------------------------------- */

enum { GATE_PASS, GATE_PROBE, GATE_REJECT };

static uint64_t jitter(sr_conn *c, uint64_t ns)
{
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return ns - (ns / 4) * (c->rng % 1001) / 1000; /* 75 .. 100 % */
}

static int gate(sr_conn *c, uint64_t now, uint64_t *retry_at, uint64_t *epoch)
{
    int g = GATE_PASS;
    pthread_mutex_lock(&c->circ_mu);
    *epoch = c->epoch;
    if (c->open) {
        if (now < c->open_until || c->probing) {
            *retry_at = c->open_until > now ? c->open_until : now + c->retry_min_ns;
            g = GATE_REJECT;
        } else {
            c->probing = true;
            g = GATE_PROBE;
        }
    }
    pthread_mutex_unlock(&c->circ_mu);
    return g;
}

static void report(sr_conn *c, bool ok, int g, uint64_t *retry_at)
{
    uint64_t now = mono_ns();
    pthread_mutex_lock(&c->circ_mu);
    if (ok) {
        c->failures = 0;
        if (c->open && g == GATE_PROBE) {
            c->open = false;
            c->probing = false;
            c->backoff_ns = c->retry_min_ns;
            add(&c->ct->circuit_closes);
        }
    } else {
        if (c->failures < UINT32_MAX) c->failures++;
        if (g == GATE_PROBE) {
            c->probing = false;
            c->open_until = now + jitter(c, c->backoff_ns);
            c->backoff_ns = c->backoff_ns > c->retry_max_ns / 2 ? c->retry_max_ns : 2 * c->backoff_ns;
        } else if (!c->open && c->failures >= c->threshold) {
            c->open = true;
            c->probing = false;
            c->epoch++;
            c->open_until = now + jitter(c, c->backoff_ns);
            c->backoff_ns = c->backoff_ns > c->retry_max_ns / 2 ? c->retry_max_ns : 2 * c->backoff_ns;
            add(&c->ct->circuit_opens);
        }
        if (retry_at) *retry_at = c->open ? c->open_until : 0;
    }
    pthread_mutex_unlock(&c->circ_mu);
}

int sluice__conn_circuit_state(sr_conn *c)
{
    pthread_mutex_lock(&c->circ_mu);
    int st = !c->open     ? SLUICE_REDIS_CIRCUIT_CLOSED
             : c->probing ? SLUICE_REDIS_CIRCUIT_HALF_OPEN
                          : SLUICE_REDIS_CIRCUIT_OPEN;
    pthread_mutex_unlock(&c->circ_mu);
    return st;
}

/* ---- I/O with a deadline ------------------------------------------------ */

/* Wait for `events` on fd until the deadline: 1 ready, 0 timed out, -1
 * error. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
    for (int spins = 0; spins < 1000000; spins++) { /* EINTR: bounded too */
        uint64_t now = mono_ns();
        if (now >= deadline) return 0;
        uint64_t left = deadline - now;
        struct timespec ts = {(time_t)(left / 1000000000ULL), (long)(left % 1000000000ULL)};
        struct pollfd p = {.fd = fd, .events = events};
        int n = ppoll(&p, 1, &ts, NULL);
        if (n > 0) return (p.revents & (events | POLLERR | POLLHUP)) ? 1 : -1;
        if (n == 0) return 0;
        if (errno != EINTR) return -1;
    }
    return 0;
}

enum { IO_OK = 0, IO_TIMEOUT, IO_BROKEN, IO_PROTOCOL, IO_AUTH };

static int roundtrip(redisContext *ctx, int argc, const char *const *argv,
                     const size_t *lens, uint64_t deadline, redisReply **out);

/* AUTH [user] pass on a new context: IO_OK, an I/O code, or IO_AUTH when
 * the server refused. */
static int auth(sr_conn *c, redisContext *ctx, uint64_t deadline)
{
    const char *argv[3] = {"AUTH"};
    size_t lens[3] = {4};
    int argc = 1;
    if (c->user) argv[argc] = c->user, lens[argc++] = strlen(c->user);
    argv[argc] = c->pass, lens[argc++] = strlen(c->pass);
    redisReply *rep = NULL;
    int io = roundtrip(ctx, argc, argv, lens, deadline, &rep);
    if (io != IO_OK) return io;
    bool ok = rep->type == REDIS_REPLY_STATUS && rep->len == 2 && memcmp(rep->str, "OK", 2) == 0;
    freeReplyObject(rep);
    return ok ? IO_OK : IO_AUTH;
}

static int connect_slot(sr_conn *c, sr_slot *s, uint64_t deadline, uint64_t epoch)
{
    uint64_t now = mono_ns();
    uint64_t cd = now + c->connect_timeout_ns;
    if (cd > deadline || cd < now) cd = deadline;
    redisContext *ctx = redisConnectNonBlock(c->host, c->port);
    if (!ctx) return IO_BROKEN;
    if (ctx->err) {
        redisFree(ctx);
        return IO_BROKEN;
    }
    int w = wait_fd(ctx->fd, POLLOUT, cd);
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (w <= 0 || getsockopt(ctx->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
        redisFree(ctx);
        return w == 0 ? IO_TIMEOUT : IO_BROKEN;
    }
    if (c->pass) {
        int a = auth(c, ctx, deadline);
        if (a != IO_OK) {
            redisFree(ctx);
            return a;
        }
    }
    s->ctx = ctx;
    s->epoch = epoch;
    add(&c->ct->connects);
    pthread_mutex_lock(&c->circ_mu);
    bool again = c->ever_connected;
    c->ever_connected = true;
    pthread_mutex_unlock(&c->circ_mu);
    if (again) add(&c->ct->reconnects);
    return IO_OK;
}

/* Append one RESP bulk string. */
static char *put_bulk(char *p, const char *s, size_t n)
{
    int k = sprintf(p, "$%zu\r\n", n);
    p += k;
    memcpy(p, s, n);
    p += n;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

static int send_all(redisContext *ctx, const char *buf, size_t len, uint64_t deadline)
{
    size_t off = 0;
    for (int rounds = 0; off < len && rounds < 1000000; rounds++) {
        ssize_t n = send(ctx->fd, buf + off, len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = wait_fd(ctx->fd, POLLOUT, deadline);
            if (w == 0) return IO_TIMEOUT;
            if (w < 0) return IO_BROKEN;
            continue;
        }
        return IO_BROKEN;
    }
    return off == len ? IO_OK : IO_TIMEOUT;
}

static int read_reply(redisContext *ctx, redisReply **out, uint64_t deadline)
{
    *out = NULL;
    for (int rounds = 0; rounds < 1000000; rounds++) {
        void *rep = NULL;
        if (redisGetReplyFromReader(ctx, &rep) != REDIS_OK) return IO_PROTOCOL;
        if (rep) {
            *out = rep;
            return IO_OK;
        }
        int w = wait_fd(ctx->fd, POLLIN, deadline);
        if (w == 0) return IO_TIMEOUT;
        if (w < 0) return IO_BROKEN;
        if (redisBufferRead(ctx) != REDIS_OK) return IO_BROKEN;
    }
    return IO_TIMEOUT;
}

/* Send argv as one command and read its reply; with `asking`, send ASKING
 * first in the same write and check its +OK. */
static int roundtrip2(redisContext *ctx, int argc, const char *const *argv,
                      const size_t *lens, uint64_t deadline, redisReply **out, bool asking)
{
    static const char asking_cmd[] = "*1\r\n$6\r\nASKING\r\n";
    size_t need = 32 + sizeof asking_cmd;
    for (int i = 0; i < argc; i++) need += lens[i] + 32;
    char stackbuf[2048];
    char *buf = need <= sizeof stackbuf ? stackbuf : sluice__malloc(need);
    if (!buf) return IO_BROKEN;
    char *p = buf;
    if (asking) {
        memcpy(p, asking_cmd, sizeof asking_cmd - 1);
        p += sizeof asking_cmd - 1;
    }
    p += sprintf(p, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) p = put_bulk(p, argv[i], lens[i]);
    int rc = send_all(ctx, buf, (size_t)(p - buf), deadline);
    if (buf != stackbuf) sluice__free(buf);
    if (rc != IO_OK) return rc;
    if (asking) {
        redisReply *a = NULL;
        rc = read_reply(ctx, &a, deadline);
        if (rc != IO_OK) return rc;
        bool ok = a->type == REDIS_REPLY_STATUS;
        freeReplyObject(a);
        if (!ok) return IO_PROTOCOL; /* the stream is still in step, but
                                       ASKING refused means a confused
                                       server: start afresh */
    }
    return read_reply(ctx, out, deadline);
}

static int roundtrip(redisContext *ctx, int argc, const char *const *argv,
                     const size_t *lens, uint64_t deadline, redisReply **out)
{
    return roundtrip2(ctx, argc, argv, lens, deadline, out, false);
}

static bool starts(const redisReply *r, const char *prefix)
{
    size_t n = strlen(prefix);
    return r->type == REDIS_REPLY_ERROR && r->len >= n && memcmp(r->str, prefix, n) == 0;
}

/* Take a slot and make sure it holds a live context of the current epoch,
 * honouring the circuit.  On failure returns the error code with the
 * counters updated and the slot released. */
static int begin(sr_conn *c, uint64_t deadline, sr_slot **slot, int *g, uint64_t *retry_at)
{
    *retry_at = 0;
    sr_slot *s = pool_get(c, deadline);
    if (!s) {
        add(&c->ct->err_pool);
        return SLUICE_ETIMEDOUT;
    }
    uint64_t epoch;
    *g = gate(c, mono_ns(), retry_at, &epoch);
    if (*g == GATE_REJECT) {
        pool_put(c, s);
        add(&c->ct->err_circuit);
        return SLUICE_EBACKEND;
    }
    if (s->ctx && (s->epoch != epoch || *g == GATE_PROBE)) discard(c, s);
    if (!s->ctx) {
        int rc = connect_slot(c, s, deadline, epoch);
        if (rc != IO_OK) {
            add(rc == IO_AUTH ? &c->ct->err_reply : &c->ct->err_connect);
            report(c, false, *g, retry_at);
            pool_put(c, s);
            return mono_ns() >= deadline ? SLUICE_ETIMEDOUT : SLUICE_EBACKEND;
        }
    }
    *slot = s;
    return 0;
}

/* Count an I/O failure, discard the context, release the slot. */
static int fail_io(sr_conn *c, sr_slot *s, int io, int g, uint64_t *retry_at)
{
    if (io == IO_TIMEOUT) add(&c->ct->err_timeout);
    else if (io == IO_PROTOCOL) add(&c->ct->err_protocol);
    else add(&c->ct->err_io);
    discard(c, s);
    report(c, false, g, retry_at);
    pool_put(c, s);
    return io == IO_TIMEOUT ? SLUICE_ETIMEDOUT : SLUICE_EBACKEND;
}

/* "MOVED 3999 127.0.0.1:6381", "MOVED 3999 :6381" (host empty), "ASK ...",
 * "TRYAGAIN ...", "CLUSTERDOWN ...": fill rd and return true; any other
 * reply: false.  A MOVED or ASK
 * whose slot or address does not parse is not a redirect (an error reply). */
static bool parse_redirect(const redisReply *rep, sr_redirect *rd)
{
    if (rep->type != REDIS_REPLY_ERROR) return false;
    rd->slot = -1;
    rd->port = 0;
    rd->host[0] = '\0';
    if (starts(rep, "TRYAGAIN")) return rd->kind = SR_RD_TRYAGAIN, true;
    if (starts(rep, "CLUSTERDOWN")) return rd->kind = SR_RD_CLUSTERDOWN, true;
    const char *p;
    if (starts(rep, "MOVED ")) rd->kind = SR_RD_MOVED, p = rep->str + 6;
    else if (starts(rep, "ASK ")) rd->kind = SR_RD_ASK, p = rep->str + 4;
    else return false;
    const char *end = rep->str + rep->len;
    /* the slot: 1 to 6 digits up to a space; the port: 1 to 5 digits up to
     * the end (sluice_parse_u64: no sign, leading zeros allowed) */
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    uint64_t slot, port;
    if (!sp || sp - p > 6 || sluice_parse_u64(p, (size_t)(sp - p), SR_NSLOTS - 1, &slot) != 0)
        return false;
    p = sp + 1;
    const char *colon = NULL; /* the last ':' (an IPv6 address has several) */
    for (const char *q = p; q < end; q++)
        if (*q == ':') colon = q;
    /* an empty host (`MOVED 3999 :6380`) is kept empty: the cluster layer
     * reads it as the host of the node that answered */
    if (!colon || (size_t)(colon - p) >= SR_HOST_MAX) return false;
    if (end - (colon + 1) > 5 ||
        sluice_parse_u64(colon + 1, (size_t)(end - (colon + 1)), 65535, &port) != 0 || port < 1)
        return false;
    memcpy(rd->host, p, (size_t)(colon - p));
    rd->host[colon - p] = '\0';
    rd->slot = (int)slot;
    rd->port = (int)port;
    return true;
}

int sluice__conn_eval(sr_conn *c, int which, const char *const *keys, const size_t *keylens,
                      int nkeys, const char *const *args, const size_t *arglens, int nargs,
                      uint64_t deadline, long long *out, int nout, uint64_t *retry_at,
                      bool asking, sr_redirect *rd)
{
    *retry_at = 0;
    if (nkeys < 1 || nkeys > SLUICE_COMPOSITE_MAX || nargs < 0 || 3 + nkeys + nargs > SR_EVAL_ARGS)
        return SLUICE_EINVAL; /* the callers' bounds: cannot happen */
    sr_slot *s;
    int g;
    int rc = begin(c, deadline, &s, &g, retry_at);
    if (rc != 0) return rc;

    const char *argv[SR_EVAL_ARGS];
    size_t lens[SR_EVAL_ARGS];
    const char *sha = sluice_redis_script_sha(which);
    char nk[4];
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = "EVALSHA", lens[0] = 7;
    argv[1] = sha, lens[1] = 40;
    argv[2] = nk, lens[2] = strlen(nk);
    for (int i = 0; i < nkeys; i++) argv[3 + i] = keys[i], lens[3 + i] = keylens[i];
    for (int i = 0; i < nargs; i++) argv[3 + nkeys + i] = args[i], lens[3 + nkeys + i] = arglens[i];
    const int argc = 3 + nkeys + nargs;

    redisReply *rep = NULL;
    add(&c->ct->round_trips);
    int io = roundtrip2(s->ctx, argc, argv, lens, deadline, &rep, asking);
    if (io == IO_OK && starts(rep, "NOSCRIPT")) {
        freeReplyObject(rep);
        rep = NULL;
        add(&c->ct->noscript);
        const char *src = sluice_redis_script_source(which);
        argv[0] = "EVAL", lens[0] = 4;
        argv[1] = src, lens[1] = strlen(src);
        add(&c->ct->round_trips);
        io = roundtrip2(s->ctx, argc, argv, lens, deadline, &rep, asking);
    }
    if (io != IO_OK) return fail_io(c, s, io, g, retry_at);

    int result = 0;
    if (rd && parse_redirect(rep, rd)) {
        result = SR_REDIRECTED; /* the node answered: the circuit sees a success */
    } else if (rep->type == REDIS_REPLY_ERROR) {
        add(&c->ct->err_reply);
        if (starts(rep, "READONLY") || starts(rep, "LOADING") || starts(rep, "MASTERDOWN"))
            discard(c, s);
        result = SLUICE_EBACKEND;
    } else if (rep->type != REDIS_REPLY_ARRAY || (int)rep->elements != nout) {
        add(&c->ct->err_protocol);
        discard(c, s);
        result = SLUICE_EBACKEND;
    } else {
        for (int i = 0; i < nout; i++) {
            if (rep->element[i]->type != REDIS_REPLY_INTEGER) {
                add(&c->ct->err_protocol);
                discard(c, s);
                result = SLUICE_EBACKEND;
                break;
            }
            out[i] = rep->element[i]->integer;
        }
    }
    freeReplyObject(rep);
    report(c, result >= 0, g, retry_at);
    pool_put(c, s);
    return result;
}

int sluice__conn_command(sr_conn *c, int argc, const char *const *argv, const size_t *lens,
                         uint64_t deadline, void **reply, uint64_t *retry_at)
{
    *reply = NULL;
    sr_slot *s;
    int g;
    int rc = begin(c, deadline, &s, &g, retry_at);
    if (rc != 0) return rc;
    redisReply *rep = NULL;
    int io = roundtrip(s->ctx, argc, argv, lens, deadline, &rep);
    if (io != IO_OK) return fail_io(c, s, io, g, retry_at);
    report(c, true, g, retry_at);
    pool_put(c, s);
    *reply = rep;
    return 0;
}

int sluice__conn_ping(sr_conn *c, uint64_t deadline, uint64_t *retry_at)
{
    sr_slot *s;
    int g;
    int rc = begin(c, deadline, &s, &g, retry_at);
    if (rc != 0) return rc;
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    redisReply *rep = NULL;
    add(&c->ct->round_trips);
    int io = roundtrip(s->ctx, 1, argv, lens, deadline, &rep);
    if (io != IO_OK) return fail_io(c, s, io, g, retry_at);
    int result = 0;
    if (rep->type == REDIS_REPLY_ERROR) {
        add(&c->ct->err_reply);
        result = SLUICE_EBACKEND;
    } else if (rep->type != REDIS_REPLY_STATUS) {
        add(&c->ct->err_protocol);
        discard(c, s);
        result = SLUICE_EBACKEND;
    }
    freeReplyObject(rep);
    report(c, result == 0, g, retry_at);
    pool_put(c, s);
    return result;
}
