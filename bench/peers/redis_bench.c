/* redis_bench.c -- Redis + Lua token bucket for bench/peers/run.sh.
 *
 * Calls the GCRA token-bucket script of bench/peers/bucket.lua, already
 * loaded with SCRIPT LOAD (its SHA1 is --sha), through
 *
 *     EVALSHA <sha> 1 <key> <T_us> <burst>
 *
 * on a redis-server at 127.0.0.1:--port (loopback only), over hiredis.
 *
 *   allowed  T = 1 us, burst = 10^9: more than the server can ever serve,
 *            so every call is admitted (and writes the key)
 *   denied   T = 86400000000 us (1/d), burst = 1, one call first: every
 *            timed call is refused (and writes nothing)
 *
 * Connections: 1 (one request at a time, blocking: write the command, read
 * the reply) and --conns (default 50) connections on one key, driven from
 * this one thread with poll(), each with exactly one request in flight
 * (unpipelined, as redis-benchmark -c 50 does).  Every repetition uses a
 * fresh key.  Each repetition runs --ms milliseconds, with a hard cap on the
 * requests and a 5-s read timeout; ns per decision is the wall time divided
 * by the replies received.  Output, one line per repetition:
 *
 *   sample redis-lua <connections> <path> <ns_per_decision> <decisions> <allowed> <denied>
 *
 * then one `median redis-lua <connections> <path> <ns>` line per scenario.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#define MAX_CONNS 256
#define MAX_REQUESTS 20000000u /* a hard cap on one repetition */
#define IO_TIMEOUT_MS 5000

static const char *g_sha;
static int g_port;
static unsigned g_key_seq;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, const redisContext *c)
{
    fprintf(stderr, "redis_bench: %s%s%s\n", what, c && c->err ? ": " : "",
            c && c->err ? c->errstr : "");
    exit(1);
}

typedef struct scenario {
    int conns;
    bool allowed_path;
    double ns[64];
    int nsamples;
} scenario;

static const char *arg_t(const scenario *s) { return s->allowed_path ? "1" : "86400000000"; }
static const char *arg_b(const scenario *s) { return s->allowed_path ? "1000000000" : "1"; }

static redisContext *connect_one(void)
{
    struct timeval tv = {IO_TIMEOUT_MS / 1000, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", g_port, tv);
    if (!c || c->err)
        die("cannot connect to 127.0.0.1", c);
    if (redisSetTimeout(c, tv) != REDIS_OK)
        die("cannot set the socket timeout", c);
    return c;
}

/* 1 for an allowed reply, 0 for a denied one; exits on anything else. */
static int decision_of(redisReply *r)
{
    if (!r)
        die("no reply", NULL);
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "redis_bench: server error: %s\n", r->str);
        exit(1);
    }
    if (r->type != REDIS_REPLY_INTEGER || (r->integer != 0 && r->integer != 1)) {
        fprintf(stderr, "redis_bench: unexpected reply type %d\n", r->type);
        exit(1);
    }
    int d = (int)r->integer;
    freeReplyObject(r);
    return d;
}

static void send_cmd(redisContext *c, const scenario *s, const char *key)
{
    if (redisAppendCommand(c, "EVALSHA %s 1 %s %s %s", g_sha, key, arg_t(s), arg_b(s)) != REDIS_OK)
        die("redisAppendCommand", c);
    int done = 0;
    for (int i = 0; i < 1000 && !done; i++)
        if (redisBufferWrite(c, &done) != REDIS_OK)
            die("write", c);
    if (!done)
        die("write did not complete", c);
}

static int call_blocking(redisContext *c, const scenario *s, const char *key)
{
    void *r = NULL;
    send_cmd(c, s, key);
    if (redisGetReply(c, &r) != REDIS_OK)
        die("read", c);
    return decision_of(r);
}

/* One repetition; returns ns per decision. */
static double run_once(scenario *s, redisContext **cs, uint64_t dur_ns, bool print)
{
    char key[96];
    snprintf(key, sizeof key, "sluice-peers:%s:%d:%u:%ld", s->allowed_path ? "allowed" : "denied",
             s->conns, g_key_seq++, (long)time(NULL));
    if (!s->allowed_path && call_blocking(cs[0], s, key) != 1)
        die("the first call on a fresh denied-path key was refused", NULL);

    uint64_t n = 0, ok = 0, t0 = mono_ns(), t = t0;
    if (s->conns == 1) {
        while (n < MAX_REQUESTS) {
            ok += (uint64_t)call_blocking(cs[0], s, key);
            n++;
            if ((n & 15) == 0 && (t = mono_ns()) - t0 >= dur_ns)
                break;
        }
        t = mono_ns();
    } else {
        struct pollfd pfd[MAX_CONNS];
        int active = s->conns;
        uint64_t sent = 0;
        for (int i = 0; i < s->conns; i++) {
            pfd[i] = (struct pollfd){.fd = cs[i]->fd, .events = POLLIN};
            send_cmd(cs[i], s, key);
            sent++;
        }
        while (active > 0) {
            int pr = poll(pfd, (nfds_t)s->conns, IO_TIMEOUT_MS);
            if (pr < 0 && errno == EINTR)
                continue;
            if (pr <= 0)
                die(pr == 0 ? "no reply within the timeout" : "poll failed", NULL);
            for (int i = 0; i < s->conns; i++) {
                if (!(pfd[i].revents & (POLLIN | POLLERR | POLLHUP)))
                    continue;
                if (redisBufferRead(cs[i]) != REDIS_OK)
                    die("read", cs[i]);
                for (;;) {
                    void *r = NULL;
                    if (redisGetReplyFromReader(cs[i], &r) != REDIS_OK)
                        die("protocol error", cs[i]);
                    if (!r)
                        break;
                    ok += (uint64_t)decision_of(r);
                    n++;
                    t = mono_ns();
                    if (t - t0 < dur_ns && sent < MAX_REQUESTS) {
                        send_cmd(cs[i], s, key);
                        sent++;
                    } else {
                        pfd[i].fd = -1; /* this connection is done */
                        active--;
                    }
                }
            }
        }
        t = mono_ns();
    }
    double ns = (double)(t - t0) / (double)n;
    if (print)
        printf("sample redis-lua %d %s %.3f %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", s->conns,
               s->allowed_path ? "allowed" : "denied", ns, n, ok, n - ok);
    fflush(stdout);
    return ns;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long arg_long(const char *opt, const char *v, long lo, long hi)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) {
        fprintf(stderr, "redis_bench: %s wants a number in %ld..%ld\n", opt, lo, hi);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    long reps = 5, ms = 200, warm_ms = 100, conns = 50;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--port"))
            g_port = (int)arg_long("--port", v, 1, 65535), i++;
        else if (!strcmp(argv[i], "--sha"))
            g_sha = v, i++;
        else if (!strcmp(argv[i], "--reps"))
            reps = arg_long("--reps", v, 1, 64), i++;
        else if (!strcmp(argv[i], "--ms"))
            ms = arg_long("--ms", v, 1, 10000), i++;
        else if (!strcmp(argv[i], "--warmup-ms"))
            warm_ms = arg_long("--warmup-ms", v, 0, 10000), i++;
        else if (!strcmp(argv[i], "--conns"))
            conns = arg_long("--conns", v, 2, MAX_CONNS), i++;
        else
            g_port = 0, i = argc;
    }
    if (!g_port || !g_sha || strlen(g_sha) != 40) {
        fprintf(stderr, "usage: redis_bench --port P --sha SHA1 [--reps N] [--ms MS] "
                        "[--warmup-ms MS] [--conns N]\n");
        return 2;
    }
    redisContext *cs[MAX_CONNS];
    for (long i = 0; i < conns; i++)
        cs[i] = connect_one();
    scenario sc[4] = {
        {.conns = 1, .allowed_path = true},
        {.conns = 1, .allowed_path = false},
        {.conns = (int)conns, .allowed_path = true},
        {.conns = (int)conns, .allowed_path = false},
    };
    for (int i = 0; i < 4 && warm_ms > 0; i++)
        run_once(&sc[i], cs, (uint64_t)warm_ms * 1000000u, false);
    for (long r = 0; r < reps; r++)
        for (int i = 0; i < 4; i++)
            sc[i].ns[sc[i].nsamples++] = run_once(&sc[i], cs, (uint64_t)ms * 1000000u, true);
    for (int i = 0; i < 4; i++) {
        scenario *s = &sc[i];
        qsort(s->ns, (size_t)s->nsamples, sizeof s->ns[0], cmp_double);
        int n = s->nsamples;
        double med = n % 2 ? s->ns[n / 2] : (s->ns[n / 2 - 1] + s->ns[n / 2]) / 2;
        printf("median redis-lua %d %s %.3f\n", s->conns, s->allowed_path ? "allowed" : "denied",
               med);
    }
    for (long i = 0; i < conns; i++)
        redisFree(cs[i]);
    return 0;
}
