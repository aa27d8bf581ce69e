/* module_server.h -- redis-servers with the module sluice.so loaded, for
 * test_redis_module and bench_redis_module.
 *
 * Each server runs on 127.0.0.1 on a free port (found by binding port 0),
 * in a private temporary directory, as a child of the calling process that
 * dies with it (PR_SET_PDEATHSIG) and is also killed at exit (atexit).
 * Every wait is bounded.
 */
#ifndef SLUICE_TEST_MODULE_SERVER_H
#define SLUICE_TEST_MODULE_SERVER_H

#include <sys/types.h>

#include <hiredis/hiredis.h>

typedef struct srv {
    pid_t pid;       /* 0 when not running */
    int port;        /* 0 before the first start: pick a free one */
    char dir[64];    /* its --dir, made at the first start; kept for a restart */
    redisContext *c; /* a connection while it runs (2-s timeouts) */
} srv;

/* Start redis-server (the path in $SLUICE_REDIS_SERVER, else the one CMake
 * found) on s->port in s->dir with --loadmodule `module` [modarg] and the
 * `extra` options (NULL-terminated, at most 30).  The log goes to
 * s->dir/log.txt.  Waits at most 10 s for PING.  0, or -1 when it does not
 * come up (a server that exits, e.g. refusing the module, is reaped). */
int srv_start(srv *s, const char *module, const char *modarg, const char *const *extra);

/* SIGKILL the server and reap it (at most 5 s); the directory stays. */
void srv_kill(srv *s);

/* srv_kill, then remove the directory; s can start afresh. */
void srv_stop(srv *s);

/* A connection to 127.0.0.1:port with 2-s timeouts, or NULL. */
redisContext *srv_connect(int port);

/* A free loopback port below `below` (a cluster node also listens on
 * port + 10000), or -1. */
int srv_free_port(int below);

void srv_nap_ms(long ms);

#endif
