/* testutil.c -- the tests' shared helpers (see testutil.h).
 *
 * The test allocator puts a header in front of each block: a magic number
 * (live or dead) and the size asked for, padded to max_align_t so the block
 * keeps malloc's alignment.  Its counters are C11 atomics, as some tests
 * allocate from several threads; the armed failure point (fail_at,
 * persistent) is atomic too, so reading it while another thread allocates
 * is no data race, though a test arms it only between allocations.
 */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sluice.h>

/* ------------------------------------------------------------------------ */
/* Memory and time                                                           */

size_t tu_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long vsz = 0, res = 0;
    if (fscanf(f, "%lu %lu", &vsz, &res) != 2) res = 0;
    fclose(f);
    long pg = sysconf(_SC_PAGESIZE);
    return (size_t)res * (size_t)(pg > 0 ? pg : 4096);
}

void tu_sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------------ */
/* The stress tests' environment                                             */

double tu_env_scale(double deflt)
{
    const char *sc = getenv("SLUICE_STRESS_SCALE");
    if (sc && *sc) {
        char *end;
        double v = strtod(sc, &end);
        if (end != sc && v > 0 && v < 1e6) return v;
    }
    return deflt;
}

size_t tu_scaled(double base, double scale)
{
    double v = base * scale;
    return v < 1.0 ? 1 : (size_t)(v + 0.5);
}

uint64_t tu_env_seed(void)
{
    const char *sd = getenv("SLUICE_TEST_SEED");
    return sd && *sd ? strtoull(sd, NULL, 0) : sluice_now_ns();
}

/* ------------------------------------------------------------------------ */
/* Random numbers                                                            */

uint64_t tu_xorshift64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

uint64_t tu_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t tu_splitmix64_below(uint64_t *state, uint64_t n)
{
    return n ? tu_splitmix64(state) % n : 0;
}

/* ------------------------------------------------------------------------ */
/* Errors seen by worker threads                                             */

void tu_errs_add(tu_errs *e, const char *fmt, ...)
{
    if (e->n++ > 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------ */
/* The test allocator                                                        */

#define MAGIC_LIVE 0x51ce0a11c0ffee11ULL
#define MAGIC_DEAD 0xdeadb10cdeadb10cULL

typedef union hdr {
    struct {
        uint64_t magic;
        size_t size;
    } h;
    max_align_t align;
} hdr;

static _Atomic long g_calls, g_fail_at = -1, g_failures, g_live;
static atomic_bool g_persistent;
static _Atomic size_t g_live_bytes, g_bytes;

static sluice_allocator g_saved; /* what tu_alloc_install() found */
static bool g_saved_valid;

/* Count the call; true when it is to fail. */
static bool fail_now(void)
{
    long i = atomic_fetch_add(&g_calls, 1);
    long at = atomic_load(&g_fail_at);
    if (at >= 0 && (i == at || (atomic_load(&g_persistent) && i > at))) {
        atomic_fetch_add(&g_failures, 1);
        return true;
    }
    return false;
}

static void *hand_out(hdr *h, size_t n)
{
    h->h.magic = MAGIC_LIVE;
    h->h.size = n;
    atomic_fetch_add(&g_live, 1);
    atomic_fetch_add(&g_live_bytes, n);
    atomic_fetch_add(&g_bytes, n);
    return h + 1;
}

void *tu_malloc(size_t size)
{
    if (fail_now()) return NULL;
    if (size > SIZE_MAX - sizeof(hdr)) return NULL;
    hdr *h = malloc(sizeof *h + size);
    return h ? hand_out(h, size) : NULL;
}

void *tu_calloc(size_t count, size_t size)
{
    if (fail_now()) return NULL;
    if (size && count > (SIZE_MAX - sizeof(hdr)) / size) return NULL;
    hdr *h = calloc(1, sizeof *h + count * size);
    return h ? hand_out(h, count * size) : NULL;
}

void tu_free(void *ptr)
{
    if (!ptr) return;
    hdr *h = (hdr *)ptr - 1;
    if (h->h.magic != MAGIC_LIVE) {
        fprintf(stderr, "testutil: %p freed through the hook, but the test allocator did not "
                        "hand it out (or it was freed already)\n", ptr);
        abort();
    }
    h->h.magic = MAGIC_DEAD;
    atomic_fetch_sub(&g_live, 1);
    atomic_fetch_sub(&g_live_bytes, h->h.size);
    free(h);
}

int tu_alloc_install(void)
{
    sluice_allocator now, a = {.malloc_fn = tu_malloc, .calloc_fn = tu_calloc, .free_fn = tu_free};
    sluice_get_allocator(&now);
    bool ours = now.malloc_fn == tu_malloc;
    atomic_store(&g_fail_at, -1);
    atomic_store(&g_persistent, false);
    atomic_store(&g_calls, 0);
    atomic_store(&g_failures, 0);
    atomic_store(&g_live, 0);
    atomic_store(&g_live_bytes, 0);
    atomic_store(&g_bytes, 0);
    int rc = sluice_set_allocator(&a);
    if (rc == 0 && !ours) {
        g_saved = now;
        g_saved_valid = true;
    }
    return rc;
}

int tu_alloc_uninstall(void)
{
    tu_alloc_disarm();
    int rc = sluice_set_allocator(g_saved_valid ? &g_saved : NULL);
    if (rc == 0) g_saved_valid = false;
    return rc;
}

void tu_alloc_arm(long n, bool persistent)
{
    atomic_store(&g_fail_at, -1);
    atomic_store(&g_calls, 0);
    atomic_store(&g_failures, 0);
    atomic_store(&g_persistent, persistent);
    atomic_store(&g_fail_at, n < 0 ? -1 : n);
}

void tu_alloc_disarm(void) { atomic_store(&g_fail_at, -1); }

long tu_alloc_calls(void) { return atomic_load(&g_calls); }
long tu_alloc_failures(void) { return atomic_load(&g_failures); }
long tu_alloc_live(void) { return atomic_load(&g_live); }
size_t tu_alloc_live_bytes(void) { return atomic_load(&g_live_bytes); }
size_t tu_alloc_bytes(void) { return atomic_load(&g_bytes); }

/* ------------------------------------------------------------------------ */
/* Prometheus tools                                                          */

/* Run `cmd` through the shell; its output (at most cap - 1 bytes kept) in
 * out; returns its exit status, or -1. */
static int run_capture(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = 0;
    int ch;
    while ((ch = fgetc(p)) != EOF)
        if (n + 1 < cap) out[n++] = (char)ch;
    out[n] = '\0';
    int st = pclose(p);
    return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

static const char tu_py_parse[] =
    "import sys\n"
    "from prometheus_client.parser import text_string_to_metric_families as f\n"
    "for fam in f(open(sys.argv[1], encoding='utf-8').read()):\n"
    "    for s in fam.samples:\n"
    "        print(s.name, repr(float(s.value)))\n";

int tu_check_exposition(const char *text, char *msg, size_t msglen)
{
    static char out[1 << 20];
    char path[] = "/tmp/sluice-expo.XXXXXX", cmd[512];
    int rc = 1;
    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        snprintf(msg, msglen, "promtool not found (Debian package prometheus)");
        return 2;
    }
    if (system("/usr/bin/python3 -c 'import prometheus_client.parser' >/dev/null 2>&1") != 0) {
        snprintf(msg, msglen, "python3-prometheus-client not found");
        return 2;
    }
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(msg, msglen, "mkstemp failed");
        return 1;
    }
    size_t len = strlen(text);
    bool wrote = write(fd, text, len) == (ssize_t)len;
    close(fd);
    if (!wrote) {
        snprintf(msg, msglen, "cannot write %s", path);
        goto out;
    }
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
    int st = run_capture(cmd, out, sizeof out);
    if (st != 0 || out[0]) {
        snprintf(msg, msglen, "promtool check metrics (status %d): %.300s", st, out);
        goto out;
    }
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c \"$(cat <<'EOF'\n%sEOF\n)\" %s 2>&1", tu_py_parse,
             path);
    st = run_capture(cmd, out, sizeof out);
    if (st != 0) {
        snprintf(msg, msglen, "the Python parser (status %d): %.300s", st, out);
        goto out;
    }
    /* the samples of the text, in order, against the parser's lines */
    const char *py = out;
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        if (!nl) break;
        if (*line != '#') {
            size_t nlen = strcspn(line, "{ ");
            const char *val = memchr(line, ' ', (size_t)(nl - line));
            const char *pnl = strchr(py, '\n');
            const char *psp = pnl ? memchr(py, ' ', (size_t)(pnl - py)) : NULL;
            if (!val || !psp || (size_t)(psp - py) != nlen || memcmp(py, line, nlen) != 0 ||
                strtod(val + 1, NULL) != strtod(psp + 1, NULL)) {
                snprintf(msg, msglen, "the Python parser reads %.80s as %.80s", line,
                         pnl ? py : "(nothing)");
                goto out;
            }
            py = pnl + 1;
        }
        line = nl + 1;
    }
    if (*py) {
        snprintf(msg, msglen, "the Python parser reads more samples: %.80s", py);
        goto out;
    }
    rc = 0;
out:
    unlink(path);
    return rc;
}
