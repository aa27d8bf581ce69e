/* module_server.c -- see module_server.h. */
#define _GNU_SOURCE
#include "module_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef TEST_REDIS_SERVER
#define TEST_REDIS_SERVER "redis-server"
#endif

#define MAX_SRV 8
static pid_t g_pids[MAX_SRV];

static void kill_all(void)
{
    for (int i = 0; i < MAX_SRV; i++)
        if (g_pids[i] > 0) {
            kill(g_pids[i], SIGKILL);
            waitpid(g_pids[i], NULL, 0);
            g_pids[i] = 0;
        }
}

static void track(pid_t pid, bool on)
{
    for (int i = 0; i < MAX_SRV; i++)
        if (on ? g_pids[i] == 0 : g_pids[i] == pid) {
            g_pids[i] = on ? pid : 0;
            return;
        }
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

int srv_free_port(int below)
{
    for (int i = 0; i < 200; i++) {
        int p = free_port();
        if (p > 0 && p < below) return p;
    }
    return -1;
}

void srv_nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

redisContext *srv_connect(int port)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

int srv_start(srv *s, const char *module, const char *modarg, const char *const *extra)
{
    static bool hooked;
    if (!hooked) {
        hooked = true;
        atexit(kill_all);
        signal(SIGPIPE, SIG_IGN);
    }
    if (!s->dir[0]) {
        snprintf(s->dir, sizeof s->dir, "/tmp/sluice-module-XXXXXX");
        if (!mkdtemp(s->dir)) {
            s->dir[0] = '\0';
            return -1;
        }
    }
    if (!s->port) s->port = free_port();
    const char *env = getenv("SLUICE_REDIS_SERVER");
    const char *exe = env && *env ? env : TEST_REDIS_SERVER;
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    const char *argv[48] = {exe, "--port", port, "--bind", "127.0.0.1", "--dir", s->dir,
                            "--daemonize", "no", "--loglevel", "warning", "--logfile", "log.txt",
                            "--loadmodule", module};
    int n = 15;
    if (modarg) argv[n++] = modarg;
    for (int i = 0; extra && extra[i] && n < 46; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) dup2(devnull, 0), dup2(devnull, 1), dup2(devnull, 2);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    track(pid, true);
    s->pid = pid;
    for (int i = 0; i < 1000; i++) { /* at most 10 s */
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            track(pid, false);
            s->pid = 0;
            return -1;
        }
        redisContext *c = srv_connect(s->port);
        if (c) {
            redisReply *r = redisCommand(c, "PING");
            bool ok = r && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
            if (ok) {
                s->c = c;
                return 0;
            }
            redisFree(c);
        }
        srv_nap_ms(10);
    }
    srv_kill(s);
    return -1;
}

void srv_kill(srv *s)
{
    if (s->c) redisFree(s->c), s->c = NULL;
    if (s->pid <= 0) return;
    kill(s->pid, SIGKILL);
    for (int i = 0; i < 500 && waitpid(s->pid, NULL, WNOHANG) != s->pid; i++) srv_nap_ms(10);
    track(s->pid, false);
    s->pid = 0;
}

void srv_stop(srv *s)
{
    srv_kill(s);
    if (s->dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
        if (system(cmd) != 0) fprintf(stderr, "module_server: could not remove %s\n", s->dir);
        s->dir[0] = '\0';
    }
    s->port = 0;
}
