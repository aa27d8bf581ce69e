/* main.c -- sluice-rls: Envoy's global rate limit service on sluice.
 *
 *   sluice-rls                 serve (settings from the environment)
 *   sluice-rls --check DIR     load DIR's *.yaml as the server would; print
 *                              "ok: D domains, L limits" or FILE:LINE: reason
 *                              (exit 0 or 2)
 *
 * Environment, as envoyproxy/ratelimit names it where it can:
 *   GRPC_HOST (0.0.0.0), GRPC_PORT (8081; 0 = any free port),
 *   RUNTIME_ROOT (/srv/runtime_data/current), RUNTIME_SUBDIRECTORY
 *   (ratelimit): the config is every *.yaml of RUNTIME_ROOT/
 *   RUNTIME_SUBDIRECTORY/config;  SHADOW_MODE (false);
 * and sluice-rls's own: SLUICE_RLS_WORKERS (one per CPU),
 * SLUICE_RLS_MAX_KEYS (65536 keys per limit), SLUICE_RLS_MAX_CONNS (4096),
 * SLUICE_RLS_MAX_MSG_BYTES (1048576), SLUICE_RLS_IDLE_SECONDS (60).
 *
 * Once listening it prints "sluice-rls: listening on HOST:PORT" on stdout
 * (tests read the port there).  SIGTERM or SIGINT: graceful shutdown
 * (server.c), exit 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "server.h"

static int env_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t *out)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || v[0] == '-' || x < lo || x > hi) {
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
    if (getenv("GRPC_HOST") && *getenv("GRPC_HOST"))
        o.host = getenv("GRPC_HOST");
    if (env_u64("GRPC_PORT", 0, 65535, &port) < 0 || env_u64("SLUICE_RLS_WORKERS", 1, 256, &workers) < 0 ||
        env_u64("SLUICE_RLS_MAX_CONNS", 1, 1u << 20, &conns) < 0 ||
        env_u64("SLUICE_RLS_MAX_MSG_BYTES", 64, 64u << 20, &msg) < 0 ||
        env_u64("SLUICE_RLS_IDLE_SECONDS", 1, 86400, &idle) < 0 || env_bool("SHADOW_MODE", &o.shadow_all) < 0)
        return 2;
    o.port = (uint16_t)port;
    o.workers = (unsigned)workers;
    o.max_conns = (size_t)conns;
    o.max_msg_bytes = (size_t)msg;
    o.idle_ns = idle * 1000000000ull;

    const char *root = getenv("RUNTIME_ROOT");
    const char *sub = getenv("RUNTIME_SUBDIRECTORY");
    char dir[4096];
    if ((size_t)snprintf(dir, sizeof dir, "%s/%s/config", root && *root ? root : "/srv/runtime_data/current",
                         sub && *sub ? sub : "ratelimit") >= sizeof dir) {
        fprintf(stderr, "sluice-rls: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY too long\n");
        return 2;
    }
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
    printf("sluice-rls: listening on %s:%u (%zu domains, %zu limits, %u workers)\n", o.host,
           (unsigned)rls_server_port(s), rls_config_domains(cfg), rls_config_limits(cfg), o.workers);
    fflush(stdout);

    pthread_t runner;
    struct run_arg ra = {s, 0, {0}};
    if (pthread_create(&runner, NULL, run_thread, &ra) != 0) {
        fprintf(stderr, "sluice-rls: cannot start the server thread\n");
        rls_server_free(s);
        return 1;
    }
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "sluice-rls: signal %d: draining\n", sig);
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
