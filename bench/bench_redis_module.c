/* bench_redis_module.c -- the Redis module sluice.so against the Lua
 * script of libsluice-redis, on the same redis-server, through
 * redis-benchmark (Debian's, which sends any command).
 *
 * One redis-server on a free loopback port, without persistence, with
 * --loadmodule sluice.so.  For 1 and 50 connections, N requests each:
 *
 *   PING                                  the server's own ceiling
 *   token-bucket 100/s on one hot key     nearly every request refused:
 *                                         the overload case
 *     Lua:    EVALSHA <sha> 1 KEY 1 1 10000 1000000 1 1
 *     module: SLUICE.ACQUIRE KEY "token-bucket 100/s"
 *             SLUICE.THROTTLE KEY 99 100 1
 *   token-bucket 10^9/s on 100000 random keys   every request admitted:
 *                                         a write (and an expiry) each
 *     Lua:    EVALSHA <sha> 1 KEY 1 1000 1 1000000000 1 1
 *     module: SLUICE.ACQUIRE KEY "token-bucket 1000000000/s"
 *
 * The Lua arguments are the script's (q_us, a, b, cap, need, want) for that
 * spec at q = 1 us, as libsluice-redis sends them with lease_max = 0 (one
 * decision per round trip).  Each command is checked once by hand before
 * it is timed.  The table gives redis-benchmark's requests/s and p50, the
 * server's own time per call (usec_per_call of INFO commandstats, reset
 * before each run: what the command costs Redis's one thread, and so what
 * bounds its throughput, little disturbed by a loaded client machine), and
 * the module's ratios to Lua (target >= 2).
 *
 *   build/bench/bench_redis_module [-n N] [--module PATH]
 *   build/bench/bench_redis_module --print-script    (the Lua script, for SCRIPT LOAD)
 *
 * Environment: SLUICE_REDIS_SERVER, SLUICE_REDIS_BENCHMARK override the
 * programs CMake found.  Loopback only; the server is killed at the end.
 */
#define _GNU_SOURCE
#include <sluice/redis.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "module_server.h"

#ifndef TEST_MODULE_PATH
#define TEST_MODULE_PATH "sluice.so"
#endif
#ifndef TEST_REDIS_BENCHMARK
#define TEST_REDIS_BENCHMARK "redis-benchmark"
#endif

typedef struct result {
    double rps, p50_ms;
    double usec_per_call; /* the server's own time per call (INFO commandstats) */
} result;

/* cmdstat_<name>:...,usec_per_call=X from INFO commandstats; 0 if absent. */
static double usec_per_call(redisContext *c, const char *name)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    double v = 0;
    if (r && r->type == REDIS_REPLY_STRING) {
        char pat[64];
        snprintf(pat, sizeof pat, "cmdstat_%s:", name);
        const char *l = strstr(r->str, pat);
        const char *u = l ? strstr(l, "usec_per_call=") : NULL;
        if (u) v = atof(u + strlen("usec_per_call="));
    }
    if (r) freeReplyObject(r);
    return v;
}

/* Run redis-benchmark with `args` (NULL-terminated) and read its CSV row. */
static int run_bench(int port, long n, int conns, long keyspace, const char *const *args,
                     result *out)
{
    const char *env = getenv("SLUICE_REDIS_BENCHMARK");
    const char *exe = env && *env ? env : TEST_REDIS_BENCHMARK;
    char ports[16], ns[24], cs[16], rs[24];
    snprintf(ports, sizeof ports, "%d", port);
    snprintf(ns, sizeof ns, "%ld", n);
    snprintf(cs, sizeof cs, "%d", conns);
    snprintf(rs, sizeof rs, "%ld", keyspace);
    const char *argv[40] = {exe, "-h", "127.0.0.1", "-p", ports, "-n", ns, "-c", cs, "--csv"};
    int k = 10;
    if (keyspace > 0) argv[k++] = "-r", argv[k++] = rs;
    for (int i = 0; args[i] && k < 38; i++) argv[k++] = args[i];
    argv[k] = NULL;
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execvp(exe, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[1024];
    int rc = -1;
    while (f && fgets(line, sizeof line, f)) {
        /* "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",... */
        if (strncmp(line, "\"test\"", 6) == 0) continue;
        char *p = line;
        double v[5] = {0};
        int field = 0;
        while (*p && field < 5) {
            char *q = strchr(p, '"');
            if (!q) break;
            char *e = strchr(q + 1, '"');
            if (!e) break;
            v[field++] = atof(q + 1);
            p = e + 1;
        }
        if (field == 5) {
            out->rps = v[1];
            out->p50_ms = v[4];
            rc = 0;
        }
    }
    if (f) fclose(f);
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = -1;
    return rc;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t r = a % b;
        a = b, b = r;
    }
    return a;
}

/* The token-bucket script's arguments at q = 1 us for L per W ns, burst B. */
static void lua_args(uint64_t L, uint64_t W, uint64_t B, char a[24], char b[24], char cap[24])
{
    const uint64_t g = gcd(1000 * L, W);
    snprintf(a, 24, "%llu", (unsigned long long)(1000 * L / g));
    snprintf(b, 24, "%llu", (unsigned long long)(W / g));
    snprintf(cap, 24, "%llu", (unsigned long long)(B * (W / g)));
}

/* One call by hand: the reply must be an array of n integers, its first
 * (ok / allowed / limited) equal to `first` when first >= 0. */
static bool check(redisContext *c, const char *const *args, size_t n, long long first)
{
    int argc = 0;
    while (args[argc]) argc++;
    char key[64];
    const char *argv[16];
    for (int i = 0; i < argc && i < 16; i++) {
        argv[i] = args[i];
        if (strstr(args[i], "__rand_int__")) {
            snprintf(key, sizeof key, "check:%d", i);
            argv[i] = key;
        }
    }
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == n &&
              r->element[0]->type == REDIS_REPLY_INTEGER &&
              (first < 0 || r->element[0]->integer == first);
    if (!ok) fprintf(stderr, "bench_redis_module: %s: unexpected reply%s%s\n", args[0],
                     r && r->type == REDIS_REPLY_ERROR ? ": " : "",
                     r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    if (r) freeReplyObject(r);
    return ok;
}

int main(int argc, char **argv)
{
    long n = 200000;
    const char *module = TEST_MODULE_PATH;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) n = atol(argv[++i]);
        else if (strcmp(argv[i], "--module") == 0 && i + 1 < argc) module = argv[++i];
        else if (strcmp(argv[i], "--print-script") == 0) {
            fputs(sluice_redis_script_source(0), stdout);
            return 0;
        } else {
            fprintf(stderr, "usage: bench_redis_module [-n N] [--module PATH] | --print-script\n");
            return 2;
        }
    }
    if (n < 1000) n = 1000;
    srv s = {0};
    const char *extra[] = {"--save", "", "--appendonly", "no", NULL};
    if (srv_start(&s, module, NULL, extra) != 0) {
        fprintf(stderr, "bench_redis_module: cannot start redis-server with %s\n", module);
        return 1;
    }
    redisReply *r = redisCommand(s.c, "SCRIPT LOAD %s", sluice_redis_script_source(0));
    if (!r || r->type != REDIS_REPLY_STRING || strcmp(r->str, sluice_redis_script_sha(0)) != 0) {
        fprintf(stderr, "bench_redis_module: SCRIPT LOAD failed\n");
        srv_stop(&s);
        return 1;
    }
    freeReplyObject(r);
    const char *sha = sluice_redis_script_sha(0);
    char a1[24], b1[24], c1[24], a2[24], b2[24], c2[24];
    lua_args(100, 1000000000, 100, a1, b1, c1);
    lua_args(1000000000, 1000000000, 1000000000, a2, b2, c2);

    const char *ping[] = {"PING", NULL};
    const char *lua_hot[] = {"EVALSHA", sha, "1", "lua:hot", "1", a1, b1, c1, "1", "1", NULL};
    const char *mod_hot[] = {"SLUICE.ACQUIRE", "mod:hot", "token-bucket 100/s", NULL};
    const char *thr_hot[] = {"SLUICE.THROTTLE", "thr:hot", "99", "100", "1", NULL};
    const char *lua_all[] = {"EVALSHA", sha, "1", "lua:__rand_int__", "1", a2, b2, c2, "1", "1", NULL};
    const char *mod_all[] = {"SLUICE.ACQUIRE", "mod:__rand_int__", "token-bucket 1000000000/s", NULL};
    if (!check(s.c, lua_hot, 4, 1) || !check(s.c, mod_hot, 4, 1) || !check(s.c, thr_hot, 5, 0) ||
        !check(s.c, lua_all, 4, 1) || !check(s.c, mod_all, 4, 1)) {
        srv_stop(&s);
        return 1;
    }

    static const struct {
        const char *label, *spec, *stat;
        int which; /* index into cmds */
        long keys;
        bool lua;
    } rows[] = {
        {"PING", "-", "ping", 0, 0, false},
        {"Lua EVALSHA (libsluice-redis script)", "token-bucket 100/s, 1 hot key", "evalsha", 1, 0, true},
        {"SLUICE.ACQUIRE", "token-bucket 100/s, 1 hot key", "sluice.acquire", 2, 0, false},
        {"SLUICE.THROTTLE 99 100 1", "token-bucket 100/s, 1 hot key", "sluice.throttle", 3, 0, false},
        {"Lua EVALSHA (libsluice-redis script)", "token-bucket 10^9/s, 10^5 keys", "evalsha", 4, 100000, true},
        {"SLUICE.ACQUIRE", "token-bucket 10^9/s, 10^5 keys", "sluice.acquire", 5, 100000, false},
    };
    const char *const *cmds[] = {ping, lua_hot, mod_hot, thr_hot, lua_all, mod_all};
    const int conns[2] = {1, 50};
    result res[2][6];
    printf("redis-benchmark -n %ld, one redis-server on loopback, module %s\n\n", n, module);
    printf("| command | limit, keys | conns | requests/s | p50 ms | vs Lua | server us/call | vs Lua |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
    int failed = 0;
    for (int ci = 0; ci < 2; ci++) {
        for (int i = 0; i < 6; i++) {
            freeReplyObject(redisCommand(s.c, "CONFIG RESETSTAT"));
            if (run_bench(s.port, n, conns[ci], rows[i].keys, cmds[rows[i].which], &res[ci][i]) != 0) {
                fprintf(stderr, "bench_redis_module: redis-benchmark failed for %s\n", rows[i].label);
                failed = 1;
                res[ci][i] = (result){0, 0, 0};
            }
            res[ci][i].usec_per_call = usec_per_call(s.c, rows[i].stat);
            const int lua = i <= 3 ? 1 : 4;
            char ratio[32] = "", sratio[32] = "";
            if (i >= 2 && i != 4 && res[ci][lua].rps > 0)
                snprintf(ratio, sizeof ratio, "%.2fx", res[ci][i].rps / res[ci][lua].rps);
            if (i >= 2 && i != 4 && res[ci][i].usec_per_call > 0)
                snprintf(sratio, sizeof sratio, "%.1fx",
                         res[ci][lua].usec_per_call / res[ci][i].usec_per_call);
            printf("| %s | %s | %d | %.0f | %.3f | %s | %.2f | %s |\n", rows[i].label, rows[i].spec,
                   conns[ci], res[ci][i].rps, res[ci][i].p50_ms, ratio, res[ci][i].usec_per_call, sratio);
        }
    }
    printf("\n");
    for (int ci = 0; ci < 2; ci++) {
        const double hot = res[ci][1].rps > 0 ? res[ci][2].rps / res[ci][1].rps : 0;
        const double all = res[ci][4].rps > 0 ? res[ci][5].rps / res[ci][4].rps : 0;
        const double shot = res[ci][2].usec_per_call > 0 ? res[ci][1].usec_per_call / res[ci][2].usec_per_call : 0;
        const double sall = res[ci][5].usec_per_call > 0 ? res[ci][4].usec_per_call / res[ci][5].usec_per_call : 0;
        printf("%2d conns: module/Lua requests/s %.2fx (hot key, refusals), %.2fx (admissions), "
               "target >= 2x; server time per call Lua/module %.1fx, %.1fx; module at %.0f%% of PING\n",
               conns[ci], hot, all, shot, sall,
               res[ci][0].rps > 0 ? 100 * res[ci][2].rps / res[ci][0].rps : 0);
    }
    srv_stop(&s);
    return failed;
}
