/* main.c -- sluice-rls: Envoy's global rate limit service on sluice.
 *
 *   sluice-rls                 serve (settings from the environment)
 *   sluice-rls --check DIR     load DIR's *.yaml as the server would; print
 *                              "ok: D domains, L limits" or FILE:LINE: reason
 *                              (exit 0 or 2)
 *
 * Environment, as envoyproxy/ratelimit names it where it can:
 *   GRPC_HOST (0.0.0.0), GRPC_PORT (8081; 0 = any free port),
 *   HOST (0.0.0.0), PORT (8080; "off": none): HTTP/1.1 GET /healthcheck,
 *   /rlconfig, /metrics,
 *   RUNTIME_ROOT (/srv/runtime_data/current), RUNTIME_SUBDIRECTORY
 *   (ratelimit): the config is every *.yaml of RUNTIME_ROOT/
 *   RUNTIME_SUBDIRECTORY/config;  SHADOW_MODE (false); QUOTA_MODE (false);
 *   RESPONSE_DYNAMIC_METADATA (false); GRPC_SERVER_USE_TLS (false) with
 *   GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (PEM files: TLS with ALPN h2
 *   on the gRPC port), GRPC_CLIENT_TLS_CACERT (PEM CAs: every client must
 *   present a certificate they issued, mTLS) and GRPC_CLIENT_TLS_SAN (a SAN
 *   the client certificate must carry; needs the CA file);
 * and sluice-rls's own: SLUICE_RLS_WORKERS (one per CPU),
 * SLUICE_RLS_MAX_KEYS (65536 keys per limit), SLUICE_RLS_MAX_CONNS (4096),
 * SLUICE_RLS_MAX_MSG_BYTES (1048576), SLUICE_RLS_IDLE_SECONDS (60),
 * SLUICE_RLS_SHARED_DIR (unset: tables in this process; a directory: the
 * tables are regions there, shared by every sluice-rls that names it),
 * REDIS_URL (unset: tables in this process; HOST:PORT: every limit in
 * Redis, redis_backend.c) with REDIS_SOCKET_TYPE, REDIS_TYPE, REDIS_AUTH,
 * REDIS_POOL_SIZE, CACHE_KEY_PREFIX and SLUICE_RLS_REDIS_FAILURE, _LEASE_MAX,
 * _PROCESSES, _TIMEOUT_MS (redis_backend.h),
 * SLUICE_RLS_RELOAD_MS (1000; 0: never reload), SLUICE_RLS_HEADERS (draft:
 * RateLimit-Policy, RateLimit, Retry-After; legacy: envoyproxy/ratelimit's
 * X-RateLimit-*; both; off), LIMIT_RESPONSE_HEADERS_ENABLED (true adds
 * legacy, as envoyproxy/ratelimit names it).
 *
 * Reload.  The main thread takes a signature of the config directory (its
 * real path, so a swapped RUNTIME_ROOT symlink counts, and each YAML file's
 * name, inode, size and mtime) when inotify reports a change and, as the
 * fallback, every SLUICE_RLS_RELOAD_MS; when it changes, the directory is
 * loaded anew.  inotify watches the config directory's real path (a file
 * written and closed, renamed in or out, created, deleted: `mv` into place,
 * a ConfigMap's `..data` symlink swap) and the directory that holds
 * RUNTIME_ROOT (a swap of that symlink); the watch follows the real path
 * after each check.  Without inotify (no instance left, a file system that
 * has none) the period alone serves, as before.  Signals come through a
 * signalfd polled with the inotify descriptor.  A good config takes over the
 * counters of the old one (rls_config_adopt) and is swapped in for the
 * next call; a bad one is reported (FILE:LINE: reason, on stderr) and the
 * old config stays.
 *
 * Once listening it prints "sluice-rls: listening on HOST:PORT (...), http
 * PORT" on stdout (tests read the ports there).  SIGTERM or SIGINT: graceful shutdown
 * (server.c), exit 0.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "redis_backend.h"
#include "rls.h"
#include "server.h"

static int env_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t *out)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    uint64_t x = 0;
    if (sluice_parse_u64(v, strlen(v), hi, &x) != 0 || x < lo) { /* digits only: no sign, no space */
        fprintf(stderr, "sluice-rls: %s='%s' is not an integer from %llu to %llu\n", name, v,
                (unsigned long long)lo, (unsigned long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int env_bool(const char *name, bool *out)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "TRUE") || !strcmp(v, "True")) {
        *out = true;
        return 0;
    }
    if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "FALSE") || !strcmp(v, "False")) {
        *out = false;
        return 0;
    }
    fprintf(stderr, "sluice-rls: %s='%s' is not true or false\n", name, v);
    return -1;
}

/* FNV-1a over the directory's identity and its YAML files' metadata. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t dir_signature(const char *dir)
{
    uint64_t h = 1469598103934665603ull;
    char real[PATH_MAX];
    if (!realpath(dir, real))
        return h;
    h = fnv(h, real, strlen(real));
    DIR *d = opendir(real);
    if (!d)
        return h;
    struct dirent *e;
    uint64_t sum = 0; /* order-free: readdir's order may change */
    for (int i = 0; i < 100000 && (e = readdir(d)) != NULL; i++) {
        size_t l = strlen(e->d_name);
        if (e->d_name[0] == '.' || !((l > 5 && !strcmp(e->d_name + l - 5, ".yaml")) ||
                                     (l > 4 && !strcmp(e->d_name + l - 4, ".yml"))))
            continue;
        struct stat st;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", real, e->d_name);
        uint64_t f = fnv(1469598103934665603ull, e->d_name, l);
        if (stat(path, &st) == 0) {
            f = fnv(f, &st.st_ino, sizeof st.st_ino);
            f = fnv(f, &st.st_size, sizeof st.st_size);
            f = fnv(f, &st.st_mtim, sizeof st.st_mtim);
        }
        sum += f;
    }
    closedir(d);
    return fnv(h, &sum, sizeof sum);
}

/* The inotify watches of the config: fd < 0 when inotify is not in use. */
typedef struct cfg_watch {
    int fd;
    int wd_dir, wd_parent;
    char real[PATH_MAX]; /* the config directory's real path being watched */
} cfg_watch;

#define WATCH_MASK                                                                                             \
    (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_ATTRIB | IN_DELETE_SELF |       \
     IN_MOVE_SELF | IN_ONLYDIR)

/* Watch the config directory's real path (again, when it changed). */
static void watch_follow(cfg_watch *w, const char *dir)
{
    char real[PATH_MAX];
    if (w->fd < 0 || !realpath(dir, real) || (w->wd_dir >= 0 && !strcmp(real, w->real)))
        return;
    if (w->wd_dir >= 0)
        inotify_rm_watch(w->fd, w->wd_dir); /* may be gone already: no matter */
    w->wd_dir = inotify_add_watch(w->fd, real, WATCH_MASK);
    snprintf(w->real, sizeof w->real, "%s", real);
}

/* Start watching: the config directory, and the directory that holds
 * RUNTIME_ROOT (where a deployment swaps that symlink).  On failure the
 * period alone serves, and stderr says why. */
static void watch_start(cfg_watch *w, const char *dir, const char *root, uint64_t reload_ms)
{
    w->wd_dir = w->wd_parent = -1;
    w->real[0] = 0;
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->fd < 0) {
        fprintf(stderr, "sluice-rls: inotify unavailable (%s): the config directory is checked every %llu ms\n",
                strerror(errno), (unsigned long long)reload_ms);
        return;
    }
    watch_follow(w, dir);
    if (w->wd_dir < 0)
        fprintf(stderr, "sluice-rls: cannot watch %s (%s): it is checked every %llu ms\n", dir, strerror(errno),
                (unsigned long long)reload_ms);
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", root);
    size_t l = strlen(parent);
    while (l > 1 && parent[l - 1] == '/')
        parent[--l] = 0;
    char *slash = strrchr(parent, '/');
    if (slash) {
        slash[slash == parent ? 1 : 0] = 0;
        w->wd_parent = inotify_add_watch(w->fd, parent, WATCH_MASK & ~(unsigned)IN_ONLYDIR);
    }
}

/* Read (and drop) the queued events; true if there were any. */
static bool watch_drain(cfg_watch *w)
{
    bool any = false;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (int i = 0; w->fd >= 0 && i < 64; i++) { /* bounded: the rest wakes the next poll */
        ssize_t n = read(w->fd, buf, sizeof buf);
        if (n <= 0)
            break;
        any = true;
    }
    return any;
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec < 0 ? 0 : (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct run_arg {
    rls_server *s;
    int rc;
    char err[256];
};

/* The workers run under a thread of their own, so that main can wait for
 * a signal. */
static void *run_thread(void *arg)
{
    struct run_arg *ra = arg;
    ra->rc = rls_server_run(ra->s, ra->err, sizeof ra->err);
    return NULL;
}

int main(int argc, char **argv)
{
    char err[1024];
    uint64_t max_keys = 65536;
    if (env_u64("SLUICE_RLS_MAX_KEYS", 1, 1u << 30, &max_keys) < 0)
        return 2;
    if (argc == 3 && !strcmp(argv[1], "--check")) {
        rls_config *cfg = rls_config_load_dir(argv[2], 16, err, sizeof err);
        if (!cfg) {
            fprintf(stderr, "%s\n", err);
            return 2;
        }
        printf("ok: %zu domains, %zu limits\n", rls_config_domains(cfg), rls_config_limits(cfg));
        rls_config_free(cfg);
        return 0;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: sluice-rls [--check DIR]  (settings from the environment: docs/rls.md)\n");
        return 2;
    }
    rls_server_opts o;
    rls_server_opts_default(&o);
    uint64_t port = o.port, workers = o.workers, conns = o.max_conns, msg = o.max_msg_bytes, idle = 60;
    uint64_t reload_ms = 1000;
    if (getenv("GRPC_HOST") && *getenv("GRPC_HOST"))
        o.host = getenv("GRPC_HOST");
    if (getenv("HOST") && *getenv("HOST"))
        o.http_host = getenv("HOST");
    uint64_t http_port = 8080;
    const char *pv = getenv("PORT");
    if (pv && !strcmp(pv, "off"))
        o.http_port = -1;
    else if (env_u64("PORT", 0, 65535, &http_port) < 0)
        return 2;
    else
        o.http_port = (int)http_port;
    if (env_u64("GRPC_PORT", 0, 65535, &port) < 0 || env_u64("SLUICE_RLS_WORKERS", 1, 256, &workers) < 0 ||
        env_u64("SLUICE_RLS_MAX_CONNS", 1, 1u << 20, &conns) < 0 ||
        env_u64("SLUICE_RLS_MAX_MSG_BYTES", 64, 64u << 20, &msg) < 0 ||
        env_u64("SLUICE_RLS_IDLE_SECONDS", 1, 86400, &idle) < 0 || env_bool("SHADOW_MODE", &o.shadow_all) < 0 ||
        env_bool("QUOTA_MODE", &o.quota_all) < 0 || env_bool("RESPONSE_DYNAMIC_METADATA", &o.dynamic_metadata) < 0 ||
        env_u64("SLUICE_RLS_RELOAD_MS", 0, 3600000, &reload_ms) < 0)
        return 2;
    const char *hv = getenv("SLUICE_RLS_HEADERS");
    if (hv && *hv) {
        if (!strcmp(hv, "draft"))
            o.headers = RLS_HEADERS_DRAFT;
        else if (!strcmp(hv, "legacy"))
            o.headers = RLS_HEADERS_LEGACY;
        else if (!strcmp(hv, "both"))
            o.headers = RLS_HEADERS_DRAFT | RLS_HEADERS_LEGACY;
        else if (!strcmp(hv, "off"))
            o.headers = 0;
        else {
            fprintf(stderr, "sluice-rls: SLUICE_RLS_HEADERS='%s' is not draft, legacy, both or off\n", hv);
            return 2;
        }
    }
    bool legacy = false;
    if (env_bool("LIMIT_RESPONSE_HEADERS_ENABLED", &legacy) < 0)
        return 2;
    if (legacy)
        o.headers |= RLS_HEADERS_LEGACY;
    o.port = (uint16_t)port;
    o.workers = (unsigned)workers;
    o.max_conns = (size_t)conns;
    o.max_msg_bytes = (size_t)msg;
    o.idle_ns = idle * 1000000000ull;

    /* TLS, with envoyproxy/ratelimit's names */
    bool tls = false;
    if (env_bool("GRPC_SERVER_USE_TLS", &tls) < 0)
        return 2;
    if (tls) {
        o.tls_cert = getenv("GRPC_SERVER_TLS_CERT");
        o.tls_key = getenv("GRPC_SERVER_TLS_KEY");
        if (!o.tls_cert || !*o.tls_cert || !o.tls_key || !*o.tls_key) {
            fprintf(stderr, "sluice-rls: GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY\n");
            return 2;
        }
    }
    /* client certificates (mTLS): only on a TLS port, the SAN only with a CA */
    const char *ca = getenv("GRPC_CLIENT_TLS_CACERT"), *san = getenv("GRPC_CLIENT_TLS_SAN");
    o.tls_client_ca = ca && *ca ? ca : NULL;
    o.tls_client_san = san && *san ? san : NULL;
    if ((o.tls_client_ca || o.tls_client_san) && !tls) {
        fprintf(stderr, "sluice-rls: %s is set but GRPC_SERVER_USE_TLS is not true (client certificates need TLS)\n",
                o.tls_client_ca ? "GRPC_CLIENT_TLS_CACERT" : "GRPC_CLIENT_TLS_SAN");
        return 2;
    }
    if (o.tls_client_san && !o.tls_client_ca) {
        fprintf(stderr, "sluice-rls: GRPC_CLIENT_TLS_SAN='%s' needs GRPC_CLIENT_TLS_CACERT (no client certificate is "
                        "asked without it)\n", o.tls_client_san);
        return 2;
    }
    const char *root = getenv("RUNTIME_ROOT");
    const char *sub = getenv("RUNTIME_SUBDIRECTORY");
    char dir[4096];
    if ((size_t)snprintf(dir, sizeof dir, "%s/%s/config", root && *root ? root : "/srv/runtime_data/current",
                         sub && *sub ? sub : "ratelimit") >= sizeof dir) {
        fprintf(stderr, "sluice-rls: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY too long\n");
        return 2;
    }
    uint64_t sig = dir_signature(dir);
    const char *shared = getenv("SLUICE_RLS_SHARED_DIR");
    if (rls_config_use_shared_dir(shared) < 0) {
        fprintf(stderr, "sluice-rls: SLUICE_RLS_SHARED_DIR is too long\n");
        return 2;
    }
    rls_redis_settings rs;
    if (rls_redis_from_env(&rs, err, sizeof err) < 0) {
        fprintf(stderr, "sluice-rls: %s\n", err);
        return 2;
    }
    if (rs.on && shared && *shared) {
        fprintf(stderr, "sluice-rls: REDIS_URL and SLUICE_RLS_SHARED_DIR are both set; choose one backend\n");
        return 2;
    }
    rls_redis_use(&rs);
    rls_config *cfg = rls_config_load_dir(dir, (size_t)max_keys, err, sizeof err);
    if (!cfg) {
        fprintf(stderr, "sluice-rls: %s\n", err);
        return 2;
    }
    /* Signals are taken by this thread only: block them before the workers
     * start (they inherit the mask), then wait for one. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    rls_server *s = rls_server_new(&o, cfg, err, sizeof err);
    if (!s) {
        fprintf(stderr, "sluice-rls: %s\n", err);
        return 2;
    }
    printf("sluice-rls: listening on %s:%u (%zu domains, %zu limits, %u workers), http %u\n", o.host,
           (unsigned)rls_server_port(s), rls_config_domains(rls_server_config(s)),
           rls_config_limits(rls_server_config(s)), o.workers, (unsigned)rls_server_http_port(s));
    fflush(stdout);

    pthread_t runner;
    struct run_arg ra = {s, 0, {0}};
    if (pthread_create(&runner, NULL, run_thread, &ra) != 0) {
        fprintf(stderr, "sluice-rls: cannot start the server thread\n");
        rls_server_free(s);
        return 1;
    }
    int signo = -1;
    cfg_watch watch = {.fd = -1, .wd_dir = -1, .wd_parent = -1};
    if (reload_ms > 0)
        watch_start(&watch, dir, root && *root ? root : "/srv/runtime_data/current", reload_ms);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    while (signo < 0) {
        if (sfd < 0 || reload_ms == 0) { /* no signalfd: the signals alone, or polling alone */
            if (reload_ms == 0) {
                if (sigwait(&set, &signo) != 0)
                    signo = -1;
                continue;
            }
            struct timespec ts = {(time_t)(reload_ms / 1000), (long)(reload_ms % 1000) * 1000000L};
            signo = sigtimedwait(&set, NULL, &ts);
            if (signo >= 0)
                break;
        } else {
            struct pollfd pf[2] = {{.fd = sfd, .events = POLLIN}, {.fd = watch.fd, .events = POLLIN}};
            int pr = poll(pf, watch.fd >= 0 ? 2 : 1, (int)reload_ms);
            if (pr < 0 && errno != EINTR) {
                fprintf(stderr, "sluice-rls: poll: %s\n", strerror(errno));
                break;
            }
            if (pr > 0 && (pf[0].revents & POLLIN)) {
                struct signalfd_siginfo si;
                if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                    signo = (int)si.ssi_signo;
                    break;
                }
            }
            if (pr > 0 && (pf[1].revents & POLLIN))
                watch_drain(&watch);
        }
        watch_follow(&watch, dir);
        uint64_t now_sig = dir_signature(dir);
        if (now_sig == sig)
            continue;
        sig = now_sig;
        rls_config *nw = rls_config_load_dir(dir, (size_t)max_keys, err, sizeof err);
        if (!nw) {
            fprintf(stderr, "sluice-rls: reload refused, the old config stays: %s\n", err);
            continue;
        }
        size_t kept = rls_config_adopt(nw, rls_server_config(s), realtime_ns());
        size_t nd = rls_config_domains(nw), nl = rls_config_limits(nw);
        rls_server_swap_config(s, nw);
        fprintf(stderr, "sluice-rls: reloaded: %zu domains, %zu limits, %zu kept their counters\n", nd, nl, kept);
    }
    if (sfd >= 0)
        close(sfd);
    if (watch.fd >= 0)
        close(watch.fd);
    fprintf(stderr, "sluice-rls: signal %d: draining\n", signo);
    rls_server_stop(s);
    pthread_join(runner, NULL);
    rls_server_free(s);
    if (ra.rc != 0) {
        fprintf(stderr, "sluice-rls: %s\n", ra.err);
        return 1;
    }
    fprintf(stderr, "sluice-rls: stopped\n");
    return 0;
}
