/* redis_server.h -- a private redis-server for the tests and the benchmark.
 *
 * Started on 127.0.0.1 on a free port (found by binding port 0), with no
 * persistence (--save "" --appendonly no), as a child of the calling
 * process that dies with it (PR_SET_PDEATHSIG), and also killed at exit
 * (atexit) and on SIGINT/SIGTERM.  Every wait is bounded.
 */
#ifndef SLUICE_TEST_REDIS_SERVER_H
#define SLUICE_TEST_REDIS_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct test_redis {
    pid_t pid;  /* 0 when not running */
    int port;
    bool stopped; /* SIGSTOPped */
} test_redis;

/* Start a server (port 0: pick a free one; else that port, for a restart).
 * Waits (at most 10 s) until it answers PING.  Returns 0 or -1 with a
 * message on stderr. */
int test_redis_start(test_redis *s, int port);

/* The same with more redis-server arguments (a NULL-terminated list, at
 * most 40; NULL: none), e.g. {"--rename-command", "CLUSTER", "", NULL} or
 * the options of a cluster node.  Later arguments override the defaults
 * (--dir, --save ...). */
int test_redis_start_with(test_redis *s, int port, const char *const *extra);

/* SIGKILL the server and reap it (bounded).  No-op if not running. */
void test_redis_kill(test_redis *s);

/* Stop it for good: SIGCONT if stopped, SIGKILL, reap. */
void test_redis_stop(test_redis *s);

/* SIGSTOP / SIGCONT. */
void test_redis_freeze(test_redis *s);
void test_redis_thaw(test_redis *s);

/* Run one command given as argv (at most 16 words) on a fresh connection
 * with a 2-s timeout; writes an integer reply into *ival (if not NULL) and
 * a string/status reply into buf.  Returns 0, or -1 on any error. */
int test_redis_cmd(const test_redis *s, long long *ival, char *buf, size_t buflen,
                   int argc, const char **argv);

/* One server shared by every test of a file, started once for the group:
 * cmocka_run_group_tests(tests, test_redis_group_setup,
 * test_redis_group_teardown).  The setup returns test_redis_start()'s
 * answer (a failure fails the whole group); the teardown stops it. */
extern test_redis test_redis_shared;
int test_redis_group_setup(void **state);
int test_redis_group_teardown(void **state);

/* The path of the redis-server executable in use. */
const char *test_redis_server_path(void);

/* CLOCK_MONOTONIC in ns. */
uint64_t test_now_ns(void);

#endif
