/* redis_server.c -- see redis_server.h. */
#define _GNU_SOURCE
#include "redis_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#ifndef TEST_REDIS_SERVER
#define TEST_REDIS_SERVER "redis-server"
#endif

#define MAX_SERVERS 16
static pid_t g_pids[MAX_SERVERS];
static bool g_hooked;

uint64_t test_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

const char *test_redis_server_path(void)
{
    const char *e = getenv("SLUICE_REDIS_SERVER");
    return e && *e ? e : TEST_REDIS_SERVER;
}

static void kill_all(void)
{
    for (int i = 0; i < MAX_SERVERS; i++)
        if (g_pids[i] > 0) {
            kill(g_pids[i], SIGCONT);
            kill(g_pids[i], SIGKILL);
            waitpid(g_pids[i], NULL, 0);
            g_pids[i] = 0;
        }
}

static void on_signal(int sig)
{
    for (int i = 0; i < MAX_SERVERS; i++)
        if (g_pids[i] > 0) {
            kill(g_pids[i], SIGCONT);
            kill(g_pids[i], SIGKILL);
        }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void track(pid_t pid, bool on)
{
    for (int i = 0; i < MAX_SERVERS; i++)
        if (on ? g_pids[i] == 0 : g_pids[i] == pid) {
            g_pids[i] = on ? pid : 0;
            return;
        }
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static bool ping(int port)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return false;
    }
    redisSetTimeout(c, tv);
    redisReply *r = redisCommand(c, "PING");
    bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok;
}

static void reap(pid_t pid)
{
    for (int i = 0; i < 500; i++) { /* at most 5 s */
        pid_t w = waitpid(pid, NULL, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD)) return;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
}

static int start_on(test_redis *s, int port, const char *const *extra)
{
    char portbuf[16];
    snprintf(portbuf, sizeof portbuf, "%d", port);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        const char *path = test_redis_server_path();
        const char *argv[64] = {path, "--port", portbuf, "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", "/tmp", "--daemonize", "no",
                                "--loglevel", "warning", "--protected-mode", "yes"};
        int argc = 17;
        for (int i = 0; extra && extra[i] && argc < 63; i++) argv[argc++] = extra[i];
        argv[argc] = NULL;
        execvp(path, (char *const *)argv);
        fprintf(stderr, "test_redis: cannot run %s: %s (apt-get install redis-server)\n", path,
                strerror(errno));
        _exit(127);
    }
    track(pid, true);
    s->pid = pid;
    s->port = port;
    s->stopped = false;
    for (int i = 0; i < 1000; i++) { /* at most 10 s */
        if (ping(port)) return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            track(pid, false);
            s->pid = 0;
            return -1;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    test_redis_kill(s);
    return -1;
}

int test_redis_start(test_redis *s, int port) { return test_redis_start_with(s, port, NULL); }

int test_redis_start_with(test_redis *s, int port, const char *const *extra)
{
    if (!g_hooked) {
        g_hooked = true;
        atexit(kill_all);
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        signal(SIGPIPE, SIG_IGN);
    }
    for (int attempt = 0; attempt < 5; attempt++) {
        int p = port ? port : free_port();
        if (p > 0 && start_on(s, p, extra) == 0) return 0;
        if (port) {
            struct timespec ts = {0, 100000000};
            nanosleep(&ts, NULL);
        }
    }
    fprintf(stderr, "test_redis: could not start %s\n", test_redis_server_path());
    return -1;
}

void test_redis_kill(test_redis *s)
{
    if (s->pid <= 0) return;
    kill(s->pid, SIGCONT);
    kill(s->pid, SIGKILL);
    reap(s->pid);
    track(s->pid, false);
    s->pid = 0;
    s->stopped = false;
}

void test_redis_stop(test_redis *s) { test_redis_kill(s); }

void test_redis_freeze(test_redis *s)
{
    if (s->pid > 0 && kill(s->pid, SIGSTOP) == 0) s->stopped = true;
}

void test_redis_thaw(test_redis *s)
{
    if (s->pid > 0 && kill(s->pid, SIGCONT) == 0) s->stopped = false;
}

int test_redis_cmd(const test_redis *s, long long *ival, char *buf, size_t buflen, int argc,
                   const char **argv)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return -1;
    }
    redisSetTimeout(c, tv);
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    int rc = -1;
    if (r) {
        if (r->type == REDIS_REPLY_INTEGER) {
            if (ival) *ival = r->integer;
            rc = 0;
        } else if (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) {
            if (buf && buflen) snprintf(buf, buflen, "%s", r->str);
            rc = 0;
        } else if (r->type == REDIS_REPLY_NIL || r->type == REDIS_REPLY_ARRAY) {
            if (buf && buflen) buf[0] = '\0';
            if (ival) *ival = r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;
            rc = 0;
        } else if (r->type == REDIS_REPLY_ERROR) {
            if (buf && buflen) snprintf(buf, buflen, "%s", r->str);
        }
        freeReplyObject(r);
    }
    redisFree(c);
    return rc;
}

test_redis test_redis_shared;

int test_redis_group_setup(void **state)
{
    (void)state;
    return test_redis_start(&test_redis_shared, 0);
}

int test_redis_group_teardown(void **state)
{
    (void)state;
    test_redis_stop(&test_redis_shared);
    return 0;
}
