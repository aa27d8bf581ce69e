/* server.c -- sluice-rls: the gRPC layer that unary calls need, on
 * libnghttp2, and the event loop.
 *
 * Map: gRPC helpers (status, grpc-message encoding, framing); streams
 * (headers, data, the call); nghttp2 callbacks; connections (read, write,
 * HTTP/1.1 sniffing, timeouts); workers; the server's life (new, run, stop,
 * drain).
 *
 * Threads.  N workers, each with its own epoll set.  All of them wait on the
 * one listening socket with EPOLLEXCLUSIVE, so a connection wakes one
 * worker, which owns it until it closes: a connection's nghttp2 session is
 * only ever touched by one thread.  Decisions go to the shared config,
 * whose tables are thread-safe; a reload swaps the whole config
 * (rls_server_swap_config, with the hand-over in config_enter).  The main
 * thread waits for a signal and calls rls_server_stop(), which writes an
 * eventfd every worker watches.
 *
 * A call.  HEADERS must say POST, a known :path and content-type
 * application/grpc[+proto|;...]; grpc-encoding other than identity is
 * refused (UNIMPLEMENTED) -- we never compress and never accept compressed
 * messages.  DATA is buffered up to the 5-byte prefix plus max_msg_bytes
 * (beyond: RESOURCE_EXHAUSTED, and the rest is dropped unbuffered); at
 * END_STREAM the buffer must hold exactly one frame: flag 0, a big-endian
 * length, that many bytes.  The answer is HEADERS (:status 200), one DATA
 * frame, and trailers with grpc-status (and grpc-message, percent-encoded);
 * an error is a trailers-only response.  A call is answered when it ends,
 * so nothing waits: grpc-timeout has nothing to bound and is ignored.
 *
 * Bounds.  max_conns connections (more are closed at accept);
 * max_streams concurrent streams per connection (nghttp2 refuses more);
 * buffered request bytes per connection at most 4 x max_msg_bytes (more:
 * RESOURCE_EXHAUSTED for the stream that went over); a connection that has
 * answered no call and written no byte for idle_ns is closed (so a client
 * trickling bytes, or never finishing its preface, cannot hold a slot),
 * checked once a second.
 *
 * Slow readers.  A connection whose socket refuses bytes (the client does
 * not read its answers) holds them in its buffer, and is not read again
 * until the socket has taken them all (conn_held: EPOLLIN disarmed), so
 * no more of its requests are decided and its sends block in its own
 * kernel.  What waits for it is bounded: the buffer (OUT_BATCH plus one
 * frame) and, in nghttp2, the answers of the calls that the read which
 * filled the socket decided -- at most max_streams, since a stream stays
 * open until its answer is written out.  A client that reads, however
 * slowly, makes progress (the socket takes bytes, or the sweep sees the
 * kernel's queue for it shrink: TIOCOUTQ).  If neither happens for
 * idle_ns the sweep resets the connection (SO_LINGER 0, as nginx's
 * reset_timedout_connection: the kernel frees what it holds for the
 * client, and the client learns without reading), counted as "stalled".
 * Bytes that are not the HTTP/2 preface get a plain HTTP/1.1 400 naming
 * the protocol, then the connection is closed (our SETTINGS wait for the
 * client's first bytes, so that reply is all such a client sees).
 *
 * The HTTP/1.1 port serves one request per connection: GETs (health,
 * config, metrics) and POST /json, whose body (Content-Length, at most
 * max_msg_bytes) is read into its own buffer, then decided by the same
 * decide() as a gRPC call.  A call's grpc-timeout sets a deadline when its
 * headers arrive; past it when the message is whole, the call is answered
 * DEADLINE_EXCEEDED without being decided (nothing spent).
 *
 * TLS (opts.tls_cert, OpenSSL when built with it): the gRPC port's bytes go
 * through io_recv/io_send, which drive the handshake (ALPN must pick h2;
 * with opts.tls_client_ca the client's certificate is verified in it,
 * tls_client_auth)
 * and SSL_read/SSL_write on the non-blocking socket; a write OpenSSL could
 * not finish is retried with the same bytes (conn_flush appends nothing
 * while some wait), and bytes OpenSSL holds already are read before epoll
 * is asked again.
 */
#define _GNU_SOURCE
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef SLUICE_RLS_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif
#include <nghttp2/nghttp2.h>

#include "grpc/health/v1/health.pb-c.h"
#include "json.h"
#include "rls.h"

#define PATH_RLS "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define PATH_HEALTH "/grpc.health.v1.Health/Check"
#define PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define READ_CHUNK 16384
#define READS_PER_EVENT 8
#define OUT_BATCH 65536
#define MAX_HEADER_LIST 16384

/* The latency histogram's upper bounds (ns), and as written (s). */
#define LAT_BUCKETS 14
static const uint64_t LAT_LE_NS[LAT_BUCKETS] = {1000,    2500,    5000,     10000,    25000,    50000,    100000,
                                                250000,  500000,  1000000,  2500000,  10000000, 100000000,
                                                1000000000};
static const char *const LAT_LE[LAT_BUCKETS] = {"1e-06",  "2.5e-06", "5e-06", "1e-05", "2.5e-05",
                                                "5e-05",  "0.0001",  "0.00025", "0.0005", "0.001",
                                                "0.0025", "0.01",    "0.1",   "1"};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec < 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void rls_server_opts_default(rls_server_opts *o)
{
    memset(o, 0, sizeof *o);
    o->host = "0.0.0.0";
    o->port = 8081;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    o->workers = n < 1 ? 1 : n > 256 ? 256 : (unsigned)n;
    o->max_conns = 4096;
    o->max_streams = 100;
    o->max_msg_bytes = 1u << 20;
    o->idle_ns = 60ull * 1000000000u;
    o->drain_ns = 5ull * 1000000000u;
    o->http_host = "0.0.0.0";
    o->http_port = 8080;
    o->headers = RLS_HEADERS_DRAFT;
}

typedef struct worker worker;
typedef struct conn conn;

static int decide(worker *w, const Envoy__Service__Ratelimit__V3__RateLimitRequest *rq, rls_answer *ans, char *msg,
                  size_t msglen);

struct rls_server {
    rls_server_opts o;
    _Atomic(rls_config *) cfg; /* swapped by rls_server_swap_config */
    pthread_mutex_t swap_mu;
    int lfd;
    int hfd;    /* HTTP/1.1 listener, or -1 */
    int stopfd; /* eventfd */
    void *tls;  /* SSL_CTX * for the gRPC port, or NULL: cleartext */
    uint16_t port, hport;
    /* Counters summed over the workers (relaxed: /metrics reads them). */
    atomic_uint_least64_t n_within, n_over, n_shadow, n_calls, n_errors;
    /* The latency of ShouldRateLimit's decision (config read, tables,
     * answer built; not the network), per bucket of LAT_LE_NS (the last:
     * beyond), and its sum in nanoseconds. */
    atomic_uint_least64_t lat_bucket[LAT_BUCKETS + 1], lat_sum_ns;
    atomic_size_t conns;
    /* Connections the idle sweep closed: idle (nothing waiting for the
     * client), stalled (answers waiting that the client did not read). */
    atomic_uint_least64_t n_closed_idle, n_closed_stalled;
    atomic_bool stopping;
    worker *workers;
};

struct worker {
    rls_server *s;
    _Atomic(rls_config *) using; /* the config a call of this worker reads, or NULL */
    pthread_t tid;
    int ep;
    conn *head;
    size_t nconns;
    unsigned char *scratch;
    char err[256];
};

struct conn {
    worker *w;
    int fd;
    nghttp2_session *h2;
    conn *prev, *next;
    uint64_t last_ns;    /* monotonic: accept, the last call answered, or
                          * the last bytes the socket took */
    size_t preface_seen; /* bytes of the preface matched so far */
    size_t buffered;     /* request bytes buffered over all streams */
    unsigned char *out;  /* frames to write: out[outoff .. outlen) */
    size_t outlen, outoff, outcap;
    size_t outq;         /* held: the kernel's unsent bytes at the last sweep */
    uint32_t events;     /* the epoll events armed: EPOLLIN unless held,
                          * EPOLLOUT while bytes wait (conn_flush) */
    bool closing;
    struct stream *streams; /* open streams (nghttp2_session_del does not
                             * close them: conn_close frees what is left) */
    bool http1;          /* the HTTP/1.1 port: h2 is NULL */
    void *ssl;           /* TLS (SSL *), or NULL: cleartext */
    bool tls_ready;      /* the handshake is done (ALPN h2) */
    bool tls_want_write; /* OpenSSL waits for the socket to take bytes */
    bool shut;           /* http1: answered and half-closed */
    char req[4096];      /* http1: the request head so far */
    size_t reqlen;
    char *body;          /* http1, POST /json: the body (bodywant bytes) */
    size_t bodylen, bodywant;
};

typedef struct stream stream;
struct stream {
    stream *prev, *next; /* the connection's open streams */
    int32_t id;
    int method; /* 0 unknown, 1 ShouldRateLimit, 2 Health/Check */
    bool post, ct_ok, ct_seen, too_big, conn_full, done;
    size_t hdr_bytes;
    char bad_encoding[32];
    uint64_t deadline_ns;   /* grpc-timeout: monotonic deadline, 0 when none */
    char timeout[16];       /* its value as sent, for messages */
    bool bad_timeout;       /* grpc-timeout malformed */
    char path[128];
    char ct[64];
    unsigned char *in;
    size_t inlen, incap;
    unsigned char *out; /* the framed answer */
    size_t outlen, outoff;
    int status;
    char msg[256];
};

/* ------------------------------------------------------------ gRPC bits */

/* grpc-message: percent-encode what is not printable ASCII, and '%'. */
static size_t pct_encode(const char *in, char *out, size_t outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 < outlen; p++) {
        if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    if (outlen)
        out[o < outlen ? o : outlen - 1] = 0;
    return o;
}

#define NV(n, v, vl) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE}

static ssize_t out_read(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                        nghttp2_data_source *src, void *user)
{
    (void)user;
    stream *st = src->ptr;
    size_t left = st->outlen - st->outoff;
    size_t n = left < len ? left : len;
    memcpy(buf, st->out + st->outoff, n);
    st->outoff += n;
    if (st->outoff == st->outlen) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        nghttp2_nv tr[] = {NV("grpc-status", "0", 1)};
        if (nghttp2_submit_trailer(h2, id, tr, 1) != 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

/* Answer with an error: a trailers-only response (or :status for HTTP
 * errors: 405, 415). */
static int answer_error(nghttp2_session *h2, stream *st, int http, int grpc, const char *msg)
{
    char code[12], enc[768], hs[4];
    snprintf(code, sizeof code, "%d", grpc);
    snprintf(hs, sizeof hs, "%d", http);
    size_t el = pct_encode(msg, enc, sizeof enc);
    nghttp2_nv nv[] = {
        NV(":status", hs, strlen(hs)),
        NV("content-type", "application/grpc", 16),
        NV("grpc-status", code, strlen(code)),
        NV("grpc-message", enc, el),
    };
    st->done = true;
    return nghttp2_submit_response(h2, st->id, nv, 4, NULL);
}

static int answer_message(nghttp2_session *h2, stream *st, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    st->out = malloc(n + 5);
    if (!st->out)
        return answer_error(h2, st, 200, RLS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    st->out[0] = 0;
    st->out[1] = (unsigned char)(n >> 24);
    st->out[2] = (unsigned char)(n >> 16);
    st->out[3] = (unsigned char)(n >> 8);
    st->out[4] = (unsigned char)n;
    protobuf_c_message_pack(m, st->out + 5);
    st->outlen = n + 5;
    st->outoff = 0;
    nghttp2_nv nv[] = {NV(":status", "200", 3), NV("content-type", "application/grpc", 16)};
    nghttp2_data_provider dp;
    dp.source.ptr = st;
    dp.read_callback = out_read;
    st->done = true;
    return nghttp2_submit_response(h2, st->id, nv, 2, &dp);
}

/* ------------------------------------------------------------ the call */

/* The config for one call.  A worker announces the config it reads in its
 * `using` slot, then checks that it is still the current one; a swap
 * publishes the new config, then waits until no slot holds the old one
 * before freeing it (both sides sequentially consistent: either the swap
 * sees the slot, or the worker sees the new config and tries again). */
static rls_config *config_enter(worker *w)
{
    for (;;) {
        rls_config *c = atomic_load(&w->s->cfg);
        atomic_store(&w->using, c);
        if (atomic_load(&w->s->cfg) == c)
            return c;
    }
}

static void config_leave(worker *w) { atomic_store_explicit(&w->using, NULL, memory_order_release); }

/* grpc-timeout, as gRPC over HTTP/2 defines it: 1 to 8 digits, then H, M,
 * S, m, u or n.  *ns saturates at UINT64_MAX (8 digits of hours do not fit
 * 64 bits of nanoseconds).  Returns 0, or -1 when malformed. */
static int parse_grpc_timeout(const uint8_t *v, size_t n, uint64_t *ns)
{
    if (n < 2 || n > 9)
        return -1;
    uint64_t x = 0;
    if (sluice_parse_u64((const char *)v, n - 1, 99999999u, &x) != 0)
        return -1;
    uint64_t unit;
    switch (v[n - 1]) {
    case 'H': unit = 3600000000000ull; break;
    case 'M': unit = 60000000000ull; break;
    case 'S': unit = 1000000000ull; break;
    case 'm': unit = 1000000ull; break;
    case 'u': unit = 1000ull; break;
    case 'n': unit = 1ull; break;
    default: return -1;
    }
    *ns = x > UINT64_MAX / unit ? UINT64_MAX : x * unit;
    return 0;
}

static int do_call(conn *c, stream *st)
{
    nghttp2_session *h2 = c->h2;
    worker *w = c->w;
    char msg[300];
    if (!st->post)
        return answer_error(h2, st, 405, RLS_GRPC_UNIMPLEMENTED, "only POST carries gRPC calls");
    if (!st->ct_ok) {
        snprintf(msg, sizeof msg, "content-type '%s' is not application/grpc", st->ct_seen ? st->ct : "(none)");
        return answer_error(h2, st, 415, RLS_GRPC_INTERNAL, msg);
    }
    if (st->method == 0) {
        snprintf(msg, sizeof msg, "unknown method '%s'", st->path);
        return answer_error(h2, st, 200, RLS_GRPC_UNIMPLEMENTED, msg);
    }
    if (st->bad_timeout) { /* as grpc-go answers it */
        snprintf(msg, sizeof msg, "malformed grpc-timeout '%s' (want 1 to 8 digits and H, M, S, m, u or n)",
                 st->timeout);
        return answer_error(h2, st, 200, RLS_GRPC_INTERNAL, msg);
    }
    if (st->bad_encoding[0]) {
        snprintf(msg, sizeof msg, "grpc-encoding '%s' is not supported: send uncompressed messages (identity)",
                 st->bad_encoding);
        return answer_error(h2, st, 200, RLS_GRPC_UNIMPLEMENTED, msg);
    }
    if (st->too_big) {
        if (st->conn_full)
            snprintf(msg, sizeof msg, "this connection's calls in progress hold more than %zu bytes",
                     4 * (w->s->o.max_msg_bytes + 5));
        else
            snprintf(msg, sizeof msg, "request message larger than %zu bytes", w->s->o.max_msg_bytes);
        return answer_error(h2, st, 200, RLS_GRPC_RESOURCE_EXHAUSTED, msg);
    }
    if (st->inlen < 5) {
        snprintf(msg, sizeof msg, "%s: %zu bytes, a gRPC frame needs 5 before the message",
                 st->inlen ? "truncated gRPC frame" : "no request message", st->inlen);
        return answer_error(h2, st, 200, RLS_GRPC_INTERNAL, msg);
    }
    size_t len = ((size_t)st->in[1] << 24) | ((size_t)st->in[2] << 16) | ((size_t)st->in[3] << 8) | st->in[4];
    if (st->in[0] != 0) {
        snprintf(msg, sizeof msg, "compressed-flag %u on a message, with no grpc-encoding", st->in[0]);
        return answer_error(h2, st, 200, st->in[0] == 1 ? RLS_GRPC_UNIMPLEMENTED : RLS_GRPC_INTERNAL, msg);
    }
    if (len > w->s->o.max_msg_bytes) {
        snprintf(msg, sizeof msg, "request message of %zu bytes, larger than %zu", len, w->s->o.max_msg_bytes);
        return answer_error(h2, st, 200, RLS_GRPC_RESOURCE_EXHAUSTED, msg);
    }
    if (st->inlen - 5 != len) {
        snprintf(msg, sizeof msg, "%s gRPC frame: the prefix says %zu bytes, %zu came",
                 st->inlen - 5 < len ? "truncated" : "more than one message in a unary call, or a bad", len,
                 st->inlen - 5);
        return answer_error(h2, st, 200, RLS_GRPC_INTERNAL, msg);
    }
    if (st->method == 2) {
        Grpc__Health__V1__HealthCheckRequest *rq =
            grpc__health__v1__health_check_request__unpack(NULL, len, st->in + 5);
        if (!rq)
            return answer_error(h2, st, 200, RLS_GRPC_INVALID_ARGUMENT, "malformed HealthCheckRequest protobuf");
        bool known = !rq->service[0] || !strcmp(rq->service, "envoy.service.ratelimit.v3.RateLimitService");
        if (!known) {
            snprintf(msg, sizeof msg, "unknown service '%.200s'", rq->service);
            grpc__health__v1__health_check_request__free_unpacked(rq, NULL);
            return answer_error(h2, st, 200, 5 /* NOT_FOUND */, msg);
        }
        grpc__health__v1__health_check_request__free_unpacked(rq, NULL);
        Grpc__Health__V1__HealthCheckResponse rs = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        rs.status = atomic_load(&w->s->stopping) ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                                                 : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
        return answer_message(h2, st, &rs.base);
    }
    Envoy__Service__Ratelimit__V3__RateLimitRequest *rq =
        envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, len, st->in + 5);
    if (!rq)
        return answer_error(h2, st, 200, RLS_GRPC_INVALID_ARGUMENT, "malformed RateLimitRequest protobuf");
    if (rls_request_check_strings(st->in + 5, len, msg, sizeof msg) != RLS_GRPC_OK) {
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(rq, NULL);
        return answer_error(h2, st, 200, RLS_GRPC_INVALID_ARGUMENT, msg);
    }
    /* The caller's deadline passed while the message came: it has given up
     * on the answer (Envoy then applies failure_mode_deny), so the request
     * must not spend the limits. */
    if (st->deadline_ns != 0 && mono_ns() >= st->deadline_ns) {
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(rq, NULL);
        snprintf(msg, sizeof msg, "the deadline (grpc-timeout %s) passed before the call was decided; nothing spent",
                 st->timeout);
        return answer_error(h2, st, 200, RLS_GRPC_DEADLINE_EXCEEDED, msg);
    }
    rls_answer ans;
    int code = decide(w, rq, &ans, msg, sizeof msg);
    int rc = code == RLS_GRPC_OK ? answer_message(h2, st, &ans.resp.base) : answer_error(h2, st, 200, code, msg);
    config_leave(w); /* only now: the answer named the config's strings until it was packed */
    if (code == RLS_GRPC_OK)
        rls_answer_release(&ans); /* packed: its dynamic_metadata goes */
    envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(rq, NULL);
    return rc;
}

/* Decide one request on the current config (gRPC and POST /json), and
 * count it: totals, the latency histogram.  Returns the gRPC status, with
 * the config still entered: the answer points into it (a limit's name), so
 * the caller calls config_leave() once the answer is packed or written --
 * before, a reload could free those strings under it (found by
 * test_reload_under_load_redis: a name of freed bytes in an answer). */
static int decide(worker *w, const Envoy__Service__Ratelimit__V3__RateLimitRequest *rq, rls_answer *ans, char *msg,
                  size_t msglen)
{
    rls_config *cfg = config_enter(w);
    rls_counts counts = {0, 0, 0};
    unsigned flags = (w->s->o.shadow_all ? RLS_SHADOW_ALL : 0) | (w->s->o.quota_all ? RLS_QUOTA_ALL : 0) |
                     (w->s->o.dynamic_metadata ? RLS_DYNAMIC_METADATA : 0) | w->s->o.headers;
    uint64_t t0 = mono_ns();
    int code = rls_should_rate_limit(cfg, rq, real_ns(), flags, w->scratch, ans, &counts, msg, msglen);
    uint64_t took = mono_ns() - t0;
    rls_server *sv = w->s;
    size_t b = 0;
    while (b < LAT_BUCKETS && took > LAT_LE_NS[b])
        b++;
    atomic_fetch_add_explicit(&sv->lat_bucket[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sv->lat_sum_ns, took, memory_order_relaxed);
    atomic_fetch_add_explicit(&sv->n_calls, 1, memory_order_relaxed);
    if (code != RLS_GRPC_OK)
        atomic_fetch_add_explicit(&sv->n_errors, 1, memory_order_relaxed);
    if (counts.within_limit)
        atomic_fetch_add_explicit(&sv->n_within, counts.within_limit, memory_order_relaxed);
    if (counts.over_limit)
        atomic_fetch_add_explicit(&sv->n_over, counts.over_limit, memory_order_relaxed);
    if (counts.shadow_refusals)
        atomic_fetch_add_explicit(&sv->n_shadow, counts.shadow_refusals, memory_order_relaxed);
    return code;
}

/* ------------------------------------------------------ nghttp2 callbacks */

static int cb_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
    conn *c = user;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    stream *st = calloc(1, sizeof *st);
    if (!st)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    st->id = f->hd.stream_id;
    nghttp2_session_set_stream_user_data(h2, st->id, st);
    st->next = c->streams;
    if (c->streams)
        c->streams->prev = st;
    c->streams = st;
    return 0;
}

static void stream_free(conn *c, stream *st)
{
    if (st->prev)
        st->prev->next = st->next;
    else
        c->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    c->buffered -= st->inlen;
    free(st->in);
    free(st->out);
    free(st);
}

static int cb_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
    (void)flags;
    (void)user;
    if (f->hd.type != NGHTTP2_HEADERS)
        return 0;
    stream *st = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!st || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    /* The header list we advertise (SETTINGS_MAX_HEADER_LIST_SIZE, counted
     * as RFC 9113 counts it): past it, the stream is reset. */
    st->hdr_bytes += namelen + valuelen + 32;
    if (st->hdr_bytes > MAX_HEADER_LIST)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
#define IS(s) (namelen == sizeof(s) - 1 && memcmp(name, s, namelen) == 0)
    if (IS(":method")) {
        st->post = valuelen == 4 && memcmp(value, "POST", 4) == 0;
    } else if (IS(":path")) {
        size_t n = valuelen < sizeof st->path - 1 ? valuelen : sizeof st->path - 1;
        memcpy(st->path, value, n);
        st->path[n] = 0;
        if (valuelen == sizeof PATH_RLS - 1 && memcmp(value, PATH_RLS, valuelen) == 0)
            st->method = 1;
        else if (valuelen == sizeof PATH_HEALTH - 1 && memcmp(value, PATH_HEALTH, valuelen) == 0)
            st->method = 2;
    } else if (IS("content-type")) {
        size_t n = valuelen < sizeof st->ct - 1 ? valuelen : sizeof st->ct - 1;
        memcpy(st->ct, value, n);
        st->ct[n] = 0;
        st->ct_seen = true;
        st->ct_ok = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
                    (valuelen == 16 || value[16] == '+' || value[16] == ';');
    } else if (IS("grpc-timeout")) {
        size_t n = valuelen < sizeof st->timeout - 1 ? valuelen : sizeof st->timeout - 1;
        memcpy(st->timeout, value, n);
        st->timeout[n] = 0;
        uint64_t t;
        if (parse_grpc_timeout(value, valuelen, &t) < 0) {
            st->bad_timeout = true;
        } else {
            uint64_t now = mono_ns();
            st->deadline_ns = t > UINT64_MAX - now ? 0 : now + t; /* beyond the clock's reach: none */
        }
    } else if (IS("grpc-encoding")) {
        if (!(valuelen == 8 && memcmp(value, "identity", 8) == 0)) {
            size_t n = valuelen < sizeof st->bad_encoding - 1 ? valuelen : sizeof st->bad_encoding - 1;
            memcpy(st->bad_encoding, value, n);
            st->bad_encoding[n] = 0;
            if (n == 0)
                strcpy(st->bad_encoding, "(empty)");
        }
    }
#undef IS
    return 0;
}

static int cb_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *user)
{
    (void)flags;
    conn *c = user;
    stream *st = nghttp2_session_get_stream_user_data(h2, id);
    if (!st || st->too_big || st->done)
        return 0;
    size_t max = c->w->s->o.max_msg_bytes + 5;
    if (st->inlen + len > max || c->buffered + len > 4 * max) {
        st->too_big = true;
        st->conn_full = st->inlen + len <= max;
        c->buffered -= st->inlen;
        free(st->in);
        st->in = NULL;
        st->inlen = st->incap = 0;
        return 0;
    }
    if (st->inlen + len > st->incap) {
        size_t cap = st->incap ? st->incap : 256;
        while (cap < st->inlen + len)
            cap *= 2;
        if (cap > max)
            cap = max;
        unsigned char *p = realloc(st->in, cap);
        if (!p) {
            st->too_big = true;
            return 0;
        }
        st->in = p;
        st->incap = cap;
    }
    memcpy(st->in + st->inlen, data, len);
    st->inlen += len;
    c->buffered += len;
    return 0;
}

static int cb_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
    conn *c = user;
    if ((f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS) || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    stream *st = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!st || st->done)
        return 0;
    c->last_ns = mono_ns();
    int rc = do_call(c, st);
    c->buffered -= st->inlen;
    free(st->in);
    st->in = NULL;
    st->inlen = st->incap = 0;
    return rc == 0 ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int cb_stream_close(nghttp2_session *h2, int32_t id, uint32_t error_code, void *user)
{
    (void)error_code;
    conn *c = user;
    stream *st = nghttp2_session_get_stream_user_data(h2, id);
    if (!st)
        return 0;
    nghttp2_session_set_stream_user_data(h2, id, NULL);
    stream_free(c, st);
    return 0;
}

/* ----------------------------------------------------------- connections */

/* The socket's bytes, through TLS when the connection has it: > 0 bytes,
 * 0 the peer closed, -1 would block (EPOLLIN, or EPOLLOUT when
 * c->tls_want_write), -2 a failure. */
#ifdef SLUICE_RLS_TLS
static ssize_t tls_wait(conn *c, int r)
{
    int e = SSL_get_error(c->ssl, r);
    ERR_clear_error();
    if (e == SSL_ERROR_WANT_READ)
        return -1;
    if (e == SSL_ERROR_WANT_WRITE) {
        c->tls_want_write = true;
        return -1;
    }
    return e == SSL_ERROR_ZERO_RETURN ? 0 : -2;
}

/* Drive the handshake: 1 done (and the client chose h2), else as io_recv. */
static ssize_t tls_handshake(conn *c)
{
    if (c->tls_ready)
        return 1;
    c->tls_want_write = false;
    int r = SSL_do_handshake(c->ssl);
    if (r != 1)
        return tls_wait(c, r);
    const unsigned char *p = NULL;
    unsigned len = 0;
    SSL_get0_alpn_selected(c->ssl, &p, &len);
    if (len != 2 || memcmp(p, "h2", 2) != 0)
        return -2; /* the ALPN callback refused others; no ALPN at all ends here */
    c->tls_ready = true;
    return 1;
}
#endif

static ssize_t io_recv(conn *c, void *buf, size_t n)
{
#ifdef SLUICE_RLS_TLS
    if (c->ssl) {
        ssize_t h = tls_handshake(c);
        if (h != 1)
            return h;
        c->tls_want_write = false;
        int r = SSL_read(c->ssl, buf, n > 1u << 30 ? 1 << 30 : (int)n);
        return r > 0 ? r : tls_wait(c, r);
    }
#endif
    for (;;) {
        ssize_t r = recv(c->fd, buf, n, 0);
        if (r >= 0)
            return r;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? -1 : -2;
    }
}

/* Bytes still inside TLS, read from the socket already (epoll will not
 * tell of them). */
static bool io_pending(conn *c)
{
#ifdef SLUICE_RLS_TLS
    return c->ssl && c->tls_ready && SSL_pending(c->ssl) > 0;
#else
    (void)c;
    return false;
#endif
}

/* As io_recv, for sending: bytes taken, -1 would block, -2 a failure.
 * Through TLS a retry must offer the same bytes: conn_flush appends
 * nothing while some wait. */
static ssize_t io_send(conn *c, const void *p, size_t n)
{
#ifdef SLUICE_RLS_TLS
    if (c->ssl) {
        ssize_t h = tls_handshake(c);
        if (h != 1)
            return h == 0 ? -2 : h;
        c->tls_want_write = false;
        int r = SSL_write(c->ssl, p, n > 1u << 30 ? 1 << 30 : (int)n);
        if (r > 0)
            return r;
        ssize_t w = tls_wait(c, r);
        return w == 0 ? -2 : w;
    }
#endif
    for (;;) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w >= 0)
            return w;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? -1 : -2;
    }
}

static void conn_close(conn *c)
{
    worker *w = c->w;
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
#ifdef SLUICE_RLS_TLS
    SSL_free(c->ssl);
#endif
    close(c->fd);
    if (c->h2)
        nghttp2_session_del(c->h2); /* calls no callback: the open streams are ours to free */
    while (c->streams)
        stream_free(c, c->streams);
    free(c->out);
    free(c->body);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    w->nconns--;
    atomic_fetch_sub(&w->s->conns, 1);
    free(c);
}

/* Does the connection hold bytes its socket refused (the client is not
 * reading as fast as it is answered)?  Then it is not read (conn_flush
 * disarms EPOLLIN) until they have gone. */
static bool conn_held(const conn *c) { return c->outoff < c->outlen; }

/* Flush what nghttp2 has to send: its frames are gathered in the
 * connection's buffer (up to OUT_BATCH bytes, so one send(2) carries many
 * answers), then written; what the socket does not take waits for
 * EPOLLOUT, and nghttp2 is asked for more only once it has gone.  Returns
 * -1 when the connection is done. */
static int conn_flush(conn *c)
{
    for (;;) {
        while (c->h2 && c->outlen < OUT_BATCH && !(c->ssl && c->outoff < c->outlen)) {
            const uint8_t *p;
            ssize_t n = nghttp2_session_mem_send(c->h2, &p);
            if (n < 0)
                return -1;
            if (n == 0)
                break;
            if (c->outlen + (size_t)n > c->outcap) {
                size_t cap = c->outcap ? c->outcap : 16384;
                while (cap < c->outlen + (size_t)n)
                    cap *= 2;
                unsigned char *b = realloc(c->out, cap);
                if (!b)
                    return -1;
                c->out = b;
                c->outcap = cap;
            }
            memcpy(c->out + c->outlen, p, (size_t)n);
            c->outlen += (size_t)n;
        }
        if (c->outoff == c->outlen)
            break;
        ssize_t w = c->http1 ? send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL)
                             : io_send(c, c->out + c->outoff, c->outlen - c->outoff);
        if (c->http1 && w < 0)
            w = errno == EINTR ? 0 : errno == EAGAIN || errno == EWOULDBLOCK ? -1 : -2;
        if (w == -1)
            break;
        if (w < 0)
            return -1;
        if (w > 0)
            c->last_ns = mono_ns(); /* progress: the idle bound starts again */
        c->outoff += (size_t)w;
        if (c->outoff < c->outlen)
            break; /* the socket is full */
        c->outoff = c->outlen = 0;
    }
#ifdef SLUICE_RLS_TLS
    if (c->ssl && !c->tls_ready && tls_handshake(c) == -2)
        return -1;
#endif
    bool held = conn_held(c);
    bool pending = held || c->tls_want_write;
    if (!pending && c->http1 && c->closing && !c->shut) {
        /* Answered: half-close, and read the client's end until it closes
         * (closing at once, with its bytes unread, would reset the
         * connection and could lose the answer). */
        shutdown(c->fd, SHUT_WR);
        c->shut = true;
    }
    if (!pending && !c->http1 && !nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2))
        return -1;
    /* Held bytes: the client is not reading its answers, so nothing more
     * is read from it (no call decided) until the socket takes them. */
    uint32_t events = (held ? 0 : EPOLLIN) | (pending ? EPOLLOUT : 0);
    if (events != c->events) {
        struct epoll_event ev = {.events = events, .data.ptr = c};
        epoll_ctl(c->w->ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->events = events;
    }
    return 0;
}

static void http1_refuse(conn *c)
{
    static const char body[] = "sluice-rls: this port speaks gRPC over HTTP/2 with prior knowledge, not HTTP/1.1\n";
    char resp[512];
    int n = snprintf(resp, sizeof resp,
                     "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     sizeof body - 1, body);
    if (n > 0) {
        ssize_t s = c->ssl ? io_send(c, resp, (size_t)n) : send(c->fd, resp, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)s;
    }
}

/* ------------------------------------------------------- HTTP/1.1 port */

static int out_append(conn *c, const char *p, size_t n)
{
    if (c->outlen + n > c->outcap) {
        size_t cap = c->outcap ? c->outcap : 4096;
        while (cap < c->outlen + n)
            cap *= 2;
        unsigned char *b = realloc(c->out, cap);
        if (!b)
            return -1;
        c->out = b;
        c->outcap = cap;
    }
    memcpy(c->out + c->outlen, p, n);
    c->outlen += n;
    return 0;
}

static int http1_respond(conn *c, int status, const char *reason, const char *ctype, const char *body, size_t len)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     status, reason, ctype, len);
    c->closing = true;
    if (n < 0 || out_append(c, head, (size_t)n) < 0 || out_append(c, body, len) < 0)
        return -1;
    return conn_flush(c);
}

/* An error of POST /json: {"error": msg}. */
static int http1_json_error(conn *c, int status, const char *reason, const char *msg)
{
    char buf[1024];
    size_t n = rls_json_error(msg, buf, sizeof buf);
    return http1_respond(c, status, reason, "application/json", buf, n < sizeof buf ? n : 0);
}

/* POST /json with its whole body: decode, decide, answer as
 * envoyproxy/ratelimit does (200 OK, 429 OVER_LIMIT, 400 bad JSON or a
 * request ShouldRateLimit refuses, the response's JSON as the body). */
static int http1_json(conn *c)
{
    rls_json_req *jr = calloc(1, sizeof *jr);
    rls_answer *ans = malloc(sizeof *ans);
    size_t cap = 1u << 20;
    char *buf = malloc(cap);
    char msg[256];
    int rc;
    if (!jr || !ans || !buf) {
        rc = http1_json_error(c, 500, "Internal Server Error", "out of memory");
    } else if (rls_json_parse(c->body, c->bodylen, jr, msg, sizeof msg) < 0) {
        rc = http1_json_error(c, 400, "Bad Request", msg);
    } else {
        int code = decide(c->w, &jr->req, ans, msg, sizeof msg);
        size_t n = code == RLS_GRPC_OK ? rls_json_response(&ans->resp, buf, cap) : 0;
        config_leave(c->w); /* only now: the answer named the config's strings until it was written */
        if (code == RLS_GRPC_OK)
            rls_answer_release(ans);
        if (code == RLS_GRPC_INVALID_ARGUMENT)
            rc = http1_json_error(c, 400, "Bad Request", msg);
        else if (code == RLS_GRPC_UNAVAILABLE) /* the Redis backend could not decide */
            rc = http1_json_error(c, 503, "Service Unavailable", msg);
        else if (code != RLS_GRPC_OK)
            rc = http1_json_error(c, 500, "Internal Server Error", msg);
        else if (n >= cap)
            rc = http1_json_error(c, 500, "Internal Server Error", "the response does not fit 1 MiB");
        else if (ans->resp.overall_code == ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT)
            rc = http1_respond(c, 429, "Too Many Requests", "application/json", buf, n);
        else
            rc = http1_respond(c, 200, "OK", "application/json", buf, n);
    }
    if (jr)
        rls_json_req_free(jr);
    free(jr);
    free(ans);
    free(buf);
    free(c->body);
    c->body = NULL;
    return rc;
}

/* The head of POST /json has come (headlen bytes of c->req): take its
 * Content-Length, keep what of the body came with it, and answer once the
 * whole body is here (http1_read). */
static int http1_json_start(conn *c, size_t headlen)
{
    size_t max = c->w->s->o.max_msg_bytes;
    bool have_len = false;
    size_t len = 0;
    const char *line = memmem(c->req, headlen, "\r\n", 2);
    while (line && (size_t)(line + 2 - c->req) < headlen) {
        line += 2;
        const char *eol = memmem(line, headlen - (size_t)(line - c->req), "\r\n", 2);
        if (!eol)
            break;
        size_t ll = (size_t)(eol - line);
        if (ll >= 18 && strncasecmp(line, "transfer-encoding:", 18) == 0) {
            static const char b[] = "POST /json takes a Content-Length body, not a Transfer-Encoding\n";
            return http1_respond(c, 411, "Length Required", "text/plain", b, sizeof b - 1);
        }
        if (ll >= 15 && strncasecmp(line, "content-length:", 15) == 0) {
            const char *p = line + 15;
            while (p < eol && (*p == ' ' || *p == '\t'))
                p++;
            const char *digits = p;
            while (p < eol && *p >= '0' && *p <= '9')
                p++;
            uint64_t v = 0;
            int pe = sluice_parse_u64(digits, (size_t)(p - digits), UINT64_MAX, &v);
            if (pe == SLUICE_ERANGE) /* past 2^64 - 1: too large, as any past max */
                v = UINT64_MAX;
            while (p < eol && (*p == ' ' || *p == '\t'))
                p++;
            if ((pe != 0 && pe != SLUICE_ERANGE) || p != eol || have_len) {
                static const char b[] = "bad or repeated Content-Length\n";
                return http1_respond(c, 400, "Bad Request", "text/plain", b, sizeof b - 1);
            }
            have_len = true;
            len = (uint64_t)(size_t)v == v ? (size_t)v : SIZE_MAX; /* too large: said below */
        }
        line = eol;
    }
    if (!have_len) {
        static const char b[] = "POST /json needs a Content-Length\n";
        return http1_respond(c, 411, "Length Required", "text/plain", b, sizeof b - 1);
    }
    if (len > max) {
        char b[128];
        int n = snprintf(b, sizeof b, "a body of %zu bytes, larger than %zu (SLUICE_RLS_MAX_MSG_BYTES)\n", len, max);
        return http1_respond(c, 413, "Payload Too Large", "text/plain", b, n > 0 ? (size_t)n : 0);
    }
    c->body = malloc(len + 1);
    if (!c->body)
        return -1;
    size_t have = c->reqlen - headlen;
    c->bodylen = have < len ? have : len;
    memcpy(c->body, c->req + headlen, c->bodylen);
    c->bodywant = len;
    return c->bodylen == len ? http1_json(c) : 0;
}

/* envoyproxy/ratelimit's HTTP endpoints that need no JSON: GET
 * /healthcheck, /rlconfig, and /metrics (Prometheus text, version 0.0.4).
 * One request per connection (Connection: close); its head must fit
 * 4 KiB and arrive before the idle bound. */
static int http1_request(conn *c)
{
    rls_server *s = c->w->s;
    char *end = memmem(c->req, c->reqlen, "\r\n\r\n", 4);
    if (!end) {
        if (c->reqlen == sizeof c->req) {
            static const char b[] = "request head larger than 4096 bytes\n";
            return http1_respond(c, 431, "Request Header Fields Too Large", "text/plain", b, sizeof b - 1);
        }
        return 0;
    }
    c->last_ns = mono_ns();
    bool get = c->reqlen >= 4 && memcmp(c->req, "GET ", 4) == 0;
    bool post = !get && c->reqlen >= 5 && memcmp(c->req, "POST ", 5) == 0;
    const char *path = get ? c->req + 4 : post ? c->req + 5 : "";
    size_t pl = get || post ? strcspn(path, " \r\n") : 0; /* stops at the head's end at the latest */
#define PATH_IS(p) (pl == sizeof(p) - 1 && memcmp(path, p, pl) == 0)
    if (post && PATH_IS("/json"))
        return http1_json_start(c, (size_t)(end + 4 - c->req));
    if (!get) {
        static const char b[] = "only GET is served here (/healthcheck, /rlconfig, /metrics), and POST /json\n";
        return http1_respond(c, 405, "Method Not Allowed", "text/plain", b, sizeof b - 1);
    }
    if (PATH_IS("/healthcheck")) {
        if (atomic_load(&s->stopping))
            return http1_respond(c, 503, "Service Unavailable", "text/plain", "draining\n", 9);
        return http1_respond(c, 200, "OK", "text/plain", "OK\n", 3);
    }
    if (PATH_IS("/rlconfig")) {
        size_t cap = 1u << 20;
        char *buf = malloc(cap);
        if (!buf)
            return -1;
        rls_config *cfg = config_enter(c->w);
        size_t n = rls_config_dump(cfg, buf, cap);
        config_leave(c->w);
        int rc = http1_respond(c, 200, "OK", "text/plain", buf, n);
        free(buf);
        return rc;
    }
    if (PATH_IS("/metrics")) {
        size_t cap = 4u << 20;
        char *buf = malloc(cap);
        if (!buf)
            return -1;
        int n = snprintf(buf, cap,
            "# HELP sluice_rls_calls_total ShouldRateLimit calls answered.\n"
            "# TYPE sluice_rls_calls_total counter\n"
            "sluice_rls_calls_total %llu\n"
            "# HELP sluice_rls_call_errors_total ShouldRateLimit calls answered with a gRPC error.\n"
            "# TYPE sluice_rls_call_errors_total counter\n"
            "sluice_rls_call_errors_total %llu\n"
            "# HELP sluice_rls_descriptors_total Descriptors with a limit, by answer.\n"
            "# TYPE sluice_rls_descriptors_total counter\n"
            "sluice_rls_descriptors_total{code=\"ok\"} %llu\n"
            "sluice_rls_descriptors_total{code=\"over_limit\"} %llu\n"
            "# HELP sluice_rls_shadow_refusals_total Refusals that shadow mode answered OK.\n"
            "# TYPE sluice_rls_shadow_refusals_total counter\n"
            "sluice_rls_shadow_refusals_total %llu\n"
            "# HELP sluice_rls_connections Open connections.\n"
            "# TYPE sluice_rls_connections gauge\n"
            "sluice_rls_connections %zu\n"
            "# HELP sluice_rls_connections_closed_total Connections closed by the idle bound, by reason.\n"
            "# TYPE sluice_rls_connections_closed_total counter\n"
            "sluice_rls_connections_closed_total{reason=\"idle\"} %llu\n"
            "sluice_rls_connections_closed_total{reason=\"stalled\"} %llu\n",
            (unsigned long long)atomic_load_explicit(&s->n_calls, memory_order_relaxed),
            (unsigned long long)atomic_load_explicit(&s->n_errors, memory_order_relaxed),
            (unsigned long long)atomic_load_explicit(&s->n_within, memory_order_relaxed),
            (unsigned long long)atomic_load_explicit(&s->n_over, memory_order_relaxed),
            (unsigned long long)atomic_load_explicit(&s->n_shadow, memory_order_relaxed),
            atomic_load(&s->conns),
            (unsigned long long)atomic_load_explicit(&s->n_closed_idle, memory_order_relaxed),
            (unsigned long long)atomic_load_explicit(&s->n_closed_stalled, memory_order_relaxed));
        size_t off = n < 0 || (size_t)n >= cap ? cap : (size_t)n;
        /* The histogram: cumulative buckets, then _sum and _count. */
        static const char hh[] = "# HELP sluice_rls_decision_seconds ShouldRateLimit's decision time (not the network).\n"
                                 "# TYPE sluice_rls_decision_seconds histogram\n";
        if (off < cap && cap - off > sizeof hh) {
            memcpy(buf + off, hh, sizeof hh);
            off += sizeof hh - 1;
        } else {
            off = cap;
        }
        uint64_t cum = 0;
        for (size_t b = 0; b <= LAT_BUCKETS && off < cap; b++) {
            cum += atomic_load_explicit(&s->lat_bucket[b], memory_order_relaxed);
            int m = snprintf(buf + off, cap - off, "sluice_rls_decision_seconds_bucket{le=\"%s\"} %llu\n",
                             b < LAT_BUCKETS ? LAT_LE[b] : "+Inf", (unsigned long long)cum);
            off = m < 0 || (size_t)m >= cap - off ? cap : off + (size_t)m;
        }
        if (off < cap) {
            uint64_t sum = atomic_load_explicit(&s->lat_sum_ns, memory_order_relaxed);
            int m = snprintf(buf + off, cap - off,
                             "sluice_rls_decision_seconds_sum %llu.%09llu\nsluice_rls_decision_seconds_count %llu\n",
                             (unsigned long long)(sum / 1000000000u), (unsigned long long)(sum % 1000000000u),
                             (unsigned long long)cum);
            off = m < 0 || (size_t)m >= cap - off ? cap : off + (size_t)m;
        }
        if (off < cap) {
            rls_config *cfg = config_enter(c->w);
            off += rls_config_write_metrics(cfg, buf + off, cap - off);
            config_leave(c->w);
        }
        if (off >= cap) {
            free(buf);
            static const char b[] = "the metrics do not fit 4 MiB\n";
            return http1_respond(c, 500, "Internal Server Error", "text/plain", b, sizeof b - 1);
        }
        int rc = http1_respond(c, 200, "OK", "text/plain; version=0.0.4", buf, off);
        free(buf);
        return rc;
    }
#undef PATH_IS
    static const char b[] = "not found: this port serves /healthcheck, /rlconfig, /metrics\n";
    return http1_respond(c, 404, "Not Found", "text/plain", b, sizeof b - 1);
}

static int http1_read(conn *c)
{
    if (c->closing) { /* answered: drop what else comes */
        char junk[4096];
        ssize_t n = recv(c->fd, junk, sizeof junk, 0);
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ? -1 : conn_flush(c);
    }
    if (c->body) { /* POST /json: the rest of the body */
        ssize_t n = recv(c->fd, c->body + c->bodylen, c->bodywant - c->bodylen, 0);
        if (n == 0)
            return -1;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        c->bodylen += (size_t)n;
        return c->bodylen == c->bodywant ? http1_json(c) : 0;
    }
    ssize_t n = recv(c->fd, c->req + c->reqlen, sizeof c->req - c->reqlen, 0);
    if (n == 0)
        return -1;
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    c->reqlen += (size_t)n;
    return http1_request(c);
}

/* Read what the socket has; returns -1 when the connection is done. */
static int conn_read(conn *c)
{
    if (c->http1)
        return http1_read(c);
    unsigned char buf[READ_CHUNK];
    for (int i = 0; i < READS_PER_EVENT || io_pending(c); i++) {
        ssize_t n = io_recv(c, buf, sizeof buf);
        if (n == 0 || n == -2)
            return -1;
        if (n < 0)
            break;
        if (c->preface_seen < sizeof PREFACE - 1) {
            size_t m = sizeof PREFACE - 1 - c->preface_seen;
            if (m > (size_t)n)
                m = (size_t)n;
            if (memcmp(buf, &PREFACE[c->preface_seen], m) != 0) {
                http1_refuse(c);
                return -1;
            }
            c->preface_seen += m;
        }
        ssize_t r = nghttp2_session_mem_recv(c->h2, buf, (size_t)n);
        if (r < 0)
            return -1;
        if ((size_t)n < sizeof buf && !c->ssl)
            break;
    }
    return conn_flush(c);
}

static nghttp2_session_callbacks *g_callbacks;
static nghttp2_option *g_option;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_callbacks(void)
{
    if (nghttp2_session_callbacks_new(&g_callbacks) != 0 || nghttp2_option_new(&g_option) != 0)
        return;
    nghttp2_session_callbacks_set_on_begin_headers_callback(g_callbacks, cb_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(g_callbacks, cb_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(g_callbacks, cb_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(g_callbacks, cb_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(g_callbacks, cb_stream_close);
    nghttp2_option_set_max_continuations(g_option, 8);
    nghttp2_option_set_max_outbound_ack(g_option, 1000);
    nghttp2_option_set_max_settings(g_option, 32);
}

static void conn_accept(worker *w, bool http1)
{
    rls_server *s = w->s;
    for (int i = 0; i < 64; i++) {
        int fd = accept4(http1 ? s->hfd : s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN: another worker took it; others: try later */
        if (atomic_fetch_add(&s->conns, 1) >= s->o.max_conns || atomic_load(&s->stopping)) {
            atomic_fetch_sub(&s->conns, 1);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn *c = calloc(1, sizeof *c);
        if (c && http1) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
            c->events = EPOLLIN;
            c->w = w;
            c->fd = fd;
            c->http1 = true;
            c->last_ns = mono_ns();
            if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
                free(c);
                close(fd);
                atomic_fetch_sub(&s->conns, 1);
                continue;
            }
            c->next = w->head;
            if (w->head)
                w->head->prev = c;
            w->head = c;
            w->nconns++;
            continue;
        }
        if (!c || nghttp2_session_server_new2(&c->h2, g_callbacks, c, g_option) != 0) {
            free(c);
            close(fd);
            atomic_fetch_sub(&s->conns, 1);
            continue;
        }
        c->w = w;
        c->fd = fd;
        c->events = EPOLLIN;
        c->last_ns = mono_ns();
#ifdef SLUICE_RLS_TLS
        if (s->tls && (!(c->ssl = SSL_new(s->tls)) || SSL_set_fd(c->ssl, fd) != 1)) {
            SSL_free(c->ssl);
            nghttp2_session_del(c->h2);
            free(c);
            close(fd);
            atomic_fetch_sub(&s->conns, 1);
            continue;
        }
        if (c->ssl)
            SSL_set_accept_state(c->ssl);
#endif
        nghttp2_settings_entry iv[] = {
            {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, s->o.max_streams},
            {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST},
        };
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 2) != 0 ||
            epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            nghttp2_session_del(c->h2);
#ifdef SLUICE_RLS_TLS
            SSL_free(c->ssl);
#endif
            free(c);
            close(fd);
            atomic_fetch_sub(&s->conns, 1);
            continue;
        }
        c->next = w->head;
        if (w->head)
            w->head->prev = c;
        w->head = c;
        w->nconns++;
        /* Our SETTINGS go out with the first answer to the client's bytes,
         * once they began as the HTTP/2 preface: an HTTP/1.1 client gets
         * a plain HTTP/1.1 error, not a binary frame first. */
    }
}

/* --------------------------------------------------------------- workers */

static void *worker_main(void *arg)
{
    worker *w = arg;
    rls_server *s = w->s;
    struct epoll_event evs[64];
    bool draining = false;
    uint64_t drain_end = 0, next_sweep = mono_ns() + 1000000000u;
    for (;;) {
        int n = epoll_wait(w->ep, evs, 64, 200);
        if (n < 0 && errno != EINTR) {
            snprintf(w->err, sizeof w->err, "epoll_wait: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &s->lfd || p == &s->hfd) {
                if (!draining)
                    conn_accept(w, p == &s->hfd);
                continue;
            }
            if (p == &s->stopfd)
                continue;
            conn *c = p;
            uint32_t e = evs[i].events;
            int rc = 0;
            bool held = conn_held(c);
            if (held && (e & (EPOLLHUP | EPOLLERR)))
                rc = -1; /* gone, with whoever would read the answers */
            else if (!held && (e & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                rc = conn_read(c);
            if (rc == 0 && (e & EPOLLOUT)) {
                bool want = c->tls_want_write;
                rc = conn_flush(c);
                /* Read again once the held bytes have gone (what TLS read
                 * already, epoll will not report), or for an SSL_read that
                 * waited for the socket to take bytes. */
                if (rc == 0 && (held || want) && !conn_held(c))
                    rc = conn_read(c);
            }
            if (rc < 0)
                conn_close(c);
        }
        uint64_t now = mono_ns();
        if (!draining && atomic_load(&s->stopping)) {
            draining = true;
            drain_end = now + s->o.drain_ns;
            epoll_ctl(w->ep, EPOLL_CTL_DEL, s->lfd, NULL);
            if (s->hfd >= 0)
                epoll_ctl(w->ep, EPOLL_CTL_DEL, s->hfd, NULL);
            epoll_ctl(w->ep, EPOLL_CTL_DEL, s->stopfd, NULL);
            for (conn *c = w->head, *nx; c; c = nx) {
                nx = c->next;
                if (c->http1)
                    continue; /* one request each: it ends by itself */
                nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->h2),
                                      NGHTTP2_NO_ERROR, NULL, 0);
                if (conn_flush(c) < 0)
                    conn_close(c);
            }
        }
        if (draining && (w->nconns == 0 || now >= drain_end))
            break;
        if (now >= next_sweep) {
            next_sweep = now + 1000000000u;
            for (conn *c = w->head, *nx; c; c = nx) {
                nx = c->next;
                int q;
                if (conn_held(c) && ioctl(c->fd, TIOCOUTQ, &q) == 0 && q >= 0) {
                    /* Progress the socket made by itself: the kernel's
                     * queue for a client that reads slowly shrank (EPOLLOUT
                     * waits until much of a large send buffer is free). */
                    if ((size_t)q < c->outq)
                        c->last_ns = now;
                    c->outq = (size_t)q;
                }
                /* last_ns may be after now: a flush of the drain, above */
                if (now > c->last_ns && now - c->last_ns > s->o.idle_ns) {
                    if (conn_held(c)) {
                        /* Stalled: answers the client has not read for
                         * the idle bound.  A reset (SO_LINGER 0, as
                         * nginx's reset_timedout_connection): the kernel
                         * drops what it holds for the client at once,
                         * and the client learns without reading. */
                        struct linger lg = {.l_onoff = 1, .l_linger = 0};
                        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
                        atomic_fetch_add_explicit(&s->n_closed_stalled, 1, memory_order_relaxed);
                    } else {
                        /* A GOAWAY first, so a client that was about to
                         * send knows the calls past it were not processed. */
                        if (c->h2 && nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                                                           nghttp2_session_get_last_proc_stream_id(c->h2),
                                                           NGHTTP2_NO_ERROR, NULL, 0) == 0)
                            (void)conn_flush(c);
                        atomic_fetch_add_explicit(&s->n_closed_idle, 1, memory_order_relaxed);
                    }
                    conn_close(c);
                }
            }
        }
    }
    while (w->head)
        conn_close(w->head);
    return NULL;
}

/* ------------------------------------------------------------ the server */

/* Bind and listen on host:port (numeric), non-blocking; the port bound
 * in *bound. */
static int listen_on(const char *host, uint16_t port, const char *what, int *fd, uint16_t *bound, char *err,
                     size_t errlen)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(port);
        sl = sizeof *a4;
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(port);
        sl = sizeof *a6;
    } else {
        snprintf(err, errlen, "%s '%s' is not a numeric IPv4 or IPv6 address", what, host);
        return -1;
    }
    int one = 1;
    *fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (*fd < 0 || setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(*fd, (struct sockaddr *)&ss, sl) != 0 || listen(*fd, 1024) != 0) {
        snprintf(err, errlen, "cannot listen on %s port %u: %s", host, (unsigned)port, strerror(errno));
        return -1;
    }
    sl = sizeof ss;
    getsockname(*fd, (struct sockaddr *)&ss, &sl);
    *bound = ntohs(ss.ss_family == AF_INET ? a4->sin_port : a6->sin6_port);
    return 0;
}

#ifdef SLUICE_RLS_TLS
/* ALPN: h2 or nothing (gRPC is HTTP/2). */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned inlen, void *arg)
{
    (void)ssl;
    (void)arg;
    static const unsigned char h2[] = {2, 'h', '2'};
    unsigned char *sel = NULL;
    if (SSL_select_next_proto(&sel, outlen, h2, sizeof h2, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}
#endif

#ifdef SLUICE_RLS_TLS
/* Client certificates (mTLS; envoyproxy/ratelimit's GRPC_CLIENT_TLS_CACERT
 * and GRPC_CLIENT_TLS_SAN).  Every client must present a certificate that
 * OpenSSL's verify chains to a CA of o->tls_client_ca (those only, not the
 * system's: the Go server also trusts its system pool), valid now, for
 * client use (the ssl_client purpose: an extendedKeyUsage, when present,
 * holds clientAuth, as Go requires); the CertificateRequest names those CAs.
 * With o->tls_client_san the verify also checks the name, as Go's
 * VerifyHostname does: an IP address (optionally in [ ]) against the IP
 * SANs only, anything else against the DNS SANs, case-insensitively, a `*`
 * only as a whole left-most label matching one label, never the subject's
 * CN.  A failure is an alert in the handshake: no HTTP/2 byte is read.
 * Returns NULL, or what failed (OpenSSL's reason is on its error queue). */
static const char *tls_client_auth(SSL_CTX *ctx, const rls_server_opts *o)
{
    static const unsigned char sid[] = "sluice-rls";
    if (SSL_CTX_load_verify_locations(ctx, o->tls_client_ca, NULL) != 1)
        return "cannot load the client CA certificates";
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(o->tls_client_ca);
    if (!names)
        return "no CA certificate in the client CA file";
    SSL_CTX_set_client_CA_list(ctx, names); /* the context owns them */
    /* a resumed session keeps its verified client; the id context is
     * what OpenSSL needs to resume one with verification on */
    if (SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1) != 1 ||
        SSL_CTX_set_purpose(ctx, X509_PURPOSE_SSL_CLIENT) != 1)
        return "cannot set up client verification";
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    const char *san = o->tls_client_san;
    if (!san)
        return NULL;
    X509_VERIFY_PARAM *vp = SSL_CTX_get0_param(ctx);
    char ip[64];
    size_t n = strlen(san);
    if (n >= 3 && san[0] == '[' && san[n - 1] == ']' && n - 2 < sizeof ip) {
        memcpy(ip, san + 1, n - 2);
        ip[n - 2] = '\0';
    } else if (n < sizeof ip) {
        memcpy(ip, san, n + 1);
    } else {
        ip[0] = '\0';
    }
    unsigned char bin[16];
    if (inet_pton(AF_INET, ip, bin) == 1 || inet_pton(AF_INET6, ip, bin) == 1)
        return X509_VERIFY_PARAM_set1_ip_asc(vp, ip) == 1 ? NULL : "cannot set the client SAN";
    X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NEVER_CHECK_SUBJECT | X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    return X509_VERIFY_PARAM_set1_host(vp, san, n) == 1 ? NULL : "cannot set the client SAN";
}
#endif

/* The gRPC port's TLS context: TLS 1.2 or later, the certificate chain
 * and key from PEM files, ALPN h2; client certificates when asked
 * (tls_client_auth).  -1 with the reason (file and OpenSSL's words) in
 * err. */
static int tls_setup(rls_server *s, const rls_server_opts *o, char *err, size_t errlen)
{
#ifdef SLUICE_RLS_TLS
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    const char *what = "out of memory", *file = "";
    if (ctx && o->tls_client_san && !o->tls_client_ca)
        what = "a client SAN needs the client CA file";
    else if (ctx && !SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION))
        what = "TLS 1.2";
    else if (ctx && SSL_CTX_use_certificate_chain_file(ctx, o->tls_cert) != 1)
        what = "cannot load the certificate chain", file = o->tls_cert;
    else if (ctx && SSL_CTX_use_PrivateKey_file(ctx, o->tls_key ? o->tls_key : "", SSL_FILETYPE_PEM) != 1)
        what = "cannot load the private key", file = o->tls_key ? o->tls_key : "";
    else if (ctx && SSL_CTX_check_private_key(ctx) != 1)
        what = "the private key does not match the certificate", file = o->tls_key;
    else if (ctx && o->tls_client_ca && (what = tls_client_auth(ctx, o)) != NULL)
        file = o->tls_client_ca;
    else if (ctx) {
        SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
        SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
        s->tls = ctx;
        return 0;
    }
    char why[160] = "";
    unsigned long e = ERR_get_error();
    if (e)
        ERR_error_string_n(e, why, sizeof why);
    ERR_clear_error();
    snprintf(err, errlen, "TLS: %s %.200s%s%s%s", what, file, e ? " (" : "", why, e ? ")" : "");
    SSL_CTX_free(ctx);
    return -1;
#else
    (void)s;
    (void)o;
    snprintf(err, errlen, "TLS: this sluice-rls was built without OpenSSL (libssl-dev)");
    return -1;
#endif
}

rls_server *rls_server_new(const rls_server_opts *o, rls_config *cfg, char *err, size_t errlen)
{
    pthread_once(&g_once, init_callbacks);
    if (!g_callbacks || !g_option) {
        snprintf(err, errlen, "nghttp2: out of memory");
        rls_config_free(cfg);
        return NULL;
    }
    if (o->workers < 1 || o->workers > 256 || o->max_conns < 1 || o->max_streams < 1 || o->max_msg_bytes < 1 ||
        o->max_msg_bytes > (64u << 20)) {
        snprintf(err, errlen, "bad server options (workers 1..256, max_conns >= 1, max_streams >= 1, "
                              "max_msg_bytes 1..64 MiB)");
        rls_config_free(cfg);
        return NULL;
    }
    rls_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        rls_config_free(cfg);
        return NULL;
    }
    s->o = *o;
    atomic_init(&s->cfg, cfg);
    pthread_mutex_init(&s->swap_mu, NULL);
    s->lfd = s->hfd = s->stopfd = -1;
    s->hfd = -1;
    if (listen_on(o->host, o->port, "GRPC_HOST", &s->lfd, &s->port, err, errlen) < 0 ||
        (o->http_port >= 0 &&
         listen_on(o->http_host ? o->http_host : "0.0.0.0", (uint16_t)o->http_port, "HOST", &s->hfd, &s->hport, err,
                   errlen) < 0)) {
        rls_server_free(s);
        return NULL;
    }
    if (o->tls_cert && tls_setup(s, o, err, errlen) < 0) {
        rls_server_free(s);
        return NULL;
    }
    s->stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->workers = calloc(o->workers, sizeof *s->workers);
    if (s->stopfd < 0 || !s->workers) {
        snprintf(err, errlen, "eventfd or memory: %s", strerror(errno));
        rls_server_free(s);
        return NULL;
    }
    for (unsigned i = 0; i < o->workers; i++) {
        worker *w = &s->workers[i];
        w->s = s;
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        w->scratch = malloc(RLS_SCRATCH_BYTES);
        struct epoll_event el = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &s->lfd};
        struct epoll_event es = {.events = EPOLLIN, .data.ptr = &s->stopfd};
        struct epoll_event eh = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &s->hfd};
        if (w->ep < 0 || !w->scratch || epoll_ctl(w->ep, EPOLL_CTL_ADD, s->lfd, &el) != 0 ||
            epoll_ctl(w->ep, EPOLL_CTL_ADD, s->stopfd, &es) != 0 ||
            (s->hfd >= 0 && epoll_ctl(w->ep, EPOLL_CTL_ADD, s->hfd, &eh) != 0)) {
            snprintf(err, errlen, "worker %u: %s", i, strerror(errno));
            rls_server_free(s);
            return NULL;
        }
    }
    return s;
}

uint16_t rls_server_port(const rls_server *s) { return s->port; }
uint16_t rls_server_http_port(const rls_server *s) { return s->hfd >= 0 ? s->hport : 0; }

void rls_server_swap_config(rls_server *s, rls_config *cfg)
{
    pthread_mutex_lock(&s->swap_mu);
    rls_config *old = atomic_exchange(&s->cfg, cfg);
    for (unsigned i = 0; i < s->o.workers; i++) {
        /* A call lasts microseconds: wait for the ones on the old config. */
        while (atomic_load(&s->workers[i].using) == old) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
    pthread_mutex_unlock(&s->swap_mu);
    rls_config_free(old);
}

rls_config *rls_server_config(rls_server *s) { return atomic_load(&s->cfg); }

void rls_server_stop(rls_server *s)
{
    atomic_store(&s->stopping, true);
    uint64_t one = 1;
    ssize_t n = write(s->stopfd, &one, sizeof one);
    (void)n;
}

int rls_server_run(rls_server *s, char *err, size_t errlen)
{
    unsigned started = 0;
    for (; started < s->o.workers; started++) {
        if (pthread_create(&s->workers[started].tid, NULL, worker_main, &s->workers[started]) != 0)
            break;
    }
    if (started < s->o.workers)
        rls_server_stop(s);
    int rc = started < s->o.workers ? -1 : 0;
    if (rc)
        snprintf(err, errlen, "could not start worker %u", started);
    for (unsigned i = 0; i < started; i++) {
        pthread_join(s->workers[i].tid, NULL);
        if (s->workers[i].err[0] && rc == 0) {
            snprintf(err, errlen, "worker %u: %s", i, s->workers[i].err);
            rc = -1;
        }
    }
    return rc;
}

void rls_server_free(rls_server *s)
{
    if (!s)
        return;
    for (unsigned i = 0; s->workers && i < s->o.workers; i++) {
        if (s->workers[i].ep > 0)
            close(s->workers[i].ep);
        free(s->workers[i].scratch);
    }
    free(s->workers);
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->hfd >= 0)
        close(s->hfd);
    if (s->stopfd >= 0)
        close(s->stopfd);
#ifdef SLUICE_RLS_TLS
    SSL_CTX_free(s->tls);
#endif
    rls_config_free(atomic_load(&s->cfg));
    pthread_mutex_destroy(&s->swap_mu);
    free(s);
}
