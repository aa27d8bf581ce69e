/* bench_wheel.c -- sluice_wheel beside a binary heap, at 10^6 pending timers.
 *
 * For the lead: add to bench/CMakeLists.txt
 *
 *   add_executable(bench_wheel bench_wheel.c)
 *   target_link_libraries(bench_wheel PRIVATE sluice_static)
 *   set_target_properties(bench_wheel PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
 *
 * What it measures, for both structures, on the same timers (the same
 * pseudo-random deadlines, uniform over 0 .. --span-ms, default 60 s; tick
 * 1 ms):
 *
 *   fill          schedule N timers (default 10^6) into an empty structure
 *                 (memory grows: page faults included)
 *   cancel        cancel K timers (default 2*10^5) picked uniformly among the
 *                 N pending, in random order (cold: each touches memory not
 *                 used lately)
 *   schedule      schedule K new timers, N - K -> N pending (memory grown;
 *                 the nodes reused are those the cancels freed, now cold)
 *   replace       K times: cancel a random pending timer, schedule a new one
 *                 (the steady state of a server holding ~N timeouts: a cold
 *                 cancel, then a schedule into the node it freed), per pair
 *   sched+cancel  K pairs: schedule one, cancel it at once (a timeout that is
 *                 almost always cancelled: the common case for request
 *                 deadlines), with N pending
 *   expiry        advance through the span in 1-ms steps until all N have
 *                 fired (ns per timer fired, the advance calls included)
 *   bytes         the structure's live allocation per pending timer (the
 *                 wheel's through sluice_set_allocator; the heap's is its own
 *                 node pool plus array capacity), and the RSS growth from
 *                 empty to N pending, per timer
 *
 * The heap is written here for the comparison, as event loops write theirs
 * (libuv's timer heap, Go's runtime timers, most others): a binary min-heap
 * of 16-byte entries (deadline, sequence, node) so that comparisons touch
 * only the array, with each node holding its heap index for O(log n)
 * cancel; nodes in a chunked pool with a free list and generation-checked
 * 64-bit ids, as the wheel's, so neither side calls malloc per timer.  Ties
 * are broken by scheduling order, as in the wheel.  It takes no lock; the
 * wheel takes its mutex on every call (the "mutex" row is that cost).
 *
 * Times are the measuring thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so
 * that a loaded machine's other processes do not count; their effect on
 * the caches still does.  Each measurement is repeated --runs times
 * (default 5), wheel and heap
 * alternating (which goes first alternates too); the table shows medians.
 * Every run checks its results: each cancel succeeds, every remaining timer
 * fires exactly once, the heap's in deadline order.
 *
 * A floor row: one dependent load at a random place in a 48-MB array (a
 * pointer chase), the memory latency of this machine for a timer's node that
 * is not in cache.  A cold cancel needs about two of them in sequence in
 * either structure (the node, then its list neighbours or heap path).
 *
 *   bench_wheel [--runs R] [--n N] [--k K] [--span-ms MS]
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* malloc_trim */

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <sluice.h>

#define MS 1000000ULL

/* The measuring thread's CPU time: time the machine gives to other
 * processes (this is often a shared, loaded machine) does not count. */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, res = 0;
    if (fscanf(f, "%lu %lu", &size, &res) != 2) res = 0;
    fclose(f);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

static void trim(void)
{
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

static void die(const char *what)
{
    fprintf(stderr, "bench_wheel: %s\n", what);
    exit(1);
}

/* ------------------------------------------------------------------------ */
/* Counting allocator for the wheel's bytes                                  */

typedef union hdr {
    size_t size;
    max_align_t align;
} hdr;
static size_t live_bytes;

static void *count_malloc(size_t n)
{
    hdr *h = malloc(sizeof *h + n);
    if (!h) return NULL;
    h->size = n;
    live_bytes += n;
    return h + 1;
}

static void *count_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = count_malloc(n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

static void count_free(void *p)
{
    if (!p) return;
    hdr *h = (hdr *)p - 1;
    live_bytes -= h->size;
    free(h);
}

/* ------------------------------------------------------------------------ */
/* The binary heap                                                           */

typedef void (*timer_fn)(void *arg, uint64_t id, uint64_t now);

typedef struct hnode {
    uint64_t deadline;
    timer_fn fn;
    void *arg;
    uint32_t pos;   /* index in the heap array; UINT32_MAX when free */
    uint32_t gen;   /* generation; next free node when free (below) */
} hnode;

typedef struct hentry {
    uint64_t deadline;
    uint32_t seq;   /* tie-break: scheduling order (wraps after 2^32) */
    uint32_t node;
} hentry;

#define HCHUNK_BITS 12
#define HCHUNK (1u << HCHUNK_BITS)

typedef struct heap {
    hentry *a;
    uint32_t n, cap;
    hnode **chunks;
    uint32_t nchunks, chunk_cap;
    uint32_t free_head;
    uint32_t seq;
    size_t bytes;
} heap;

static inline hnode *hnode_at(heap *h, uint32_t i)
{
    return &h->chunks[i >> HCHUNK_BITS][i & (HCHUNK - 1)];
}

static inline bool hless(const hentry *x, const hentry *y)
{
    return x->deadline < y->deadline ||
           (x->deadline == y->deadline && (int32_t)(x->seq - y->seq) < 0);
}

static inline void hset(heap *h, uint32_t i, hentry e)
{
    h->a[i] = e;
    hnode_at(h, e.node)->pos = i;
}

static void sift_up(heap *h, uint32_t i)
{
    hentry e = h->a[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!hless(&e, &h->a[p])) break;
        hset(h, i, h->a[p]);
        i = p;
    }
    hset(h, i, e);
}

static void sift_down(heap *h, uint32_t i)
{
    hentry e = h->a[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && hless(&h->a[c + 1], &h->a[c])) c++;
        if (!hless(&h->a[c], &e)) break;
        hset(h, i, h->a[c]);
        i = c;
    }
    hset(h, i, e);
}

static void heap_init(heap *h)
{
    memset(h, 0, sizeof *h);
    h->free_head = UINT32_MAX;
}

static void heap_fini(heap *h)
{
    for (uint32_t c = 0; c < h->nchunks; c++) free(h->chunks[c]);
    free(h->chunks);
    free(h->a);
    memset(h, 0, sizeof *h);
}

static uint32_t hnode_alloc(heap *h)
{
    if (h->free_head == UINT32_MAX) {
        if (h->nchunks == h->chunk_cap) {
            uint32_t nc = h->chunk_cap ? 2 * h->chunk_cap : 16;
            hnode **t = realloc(h->chunks, nc * sizeof *t);
            if (!t) die("out of memory");
            h->bytes += (nc - h->chunk_cap) * sizeof *t;
            h->chunks = t;
            h->chunk_cap = nc;
        }
        hnode *c = malloc(HCHUNK * sizeof *c);
        if (!c) die("out of memory");
        h->bytes += HCHUNK * sizeof *c;
        uint32_t base = h->nchunks << HCHUNK_BITS;
        for (uint32_t k = 0; k < HCHUNK; k++) {
            c[k].pos = UINT32_MAX;
            c[k].gen = 1;
            c[k].deadline = k + 1 < HCHUNK ? base + k + 1 : UINT32_MAX; /* free link */
        }
        h->chunks[h->nchunks++] = c;
        h->free_head = base;
    }
    uint32_t i = h->free_head;
    h->free_head = (uint32_t)hnode_at(h, i)->deadline;
    return i;
}

static void hnode_free(heap *h, uint32_t i, hnode *n)
{
    n->pos = UINT32_MAX;
    n->gen++;
    n->deadline = h->free_head;
    h->free_head = i;
}

static uint64_t heap_schedule(heap *h, uint64_t deadline, timer_fn fn, void *arg)
{
    if (h->n == h->cap) {
        uint32_t nc = h->cap ? 2 * h->cap : 1024;
        hentry *a = realloc(h->a, nc * sizeof *a);
        if (!a) die("out of memory");
        h->bytes += (nc - h->cap) * sizeof *a;
        h->a = a;
        h->cap = nc;
    }
    uint32_t i = hnode_alloc(h);
    hnode *n = hnode_at(h, i);
    n->deadline = deadline;
    n->fn = fn;
    n->arg = arg;
    h->a[h->n] = (hentry){deadline, h->seq++, i};
    n->pos = h->n++;
    sift_up(h, n->pos);
    return (uint64_t)n->gen << 32 | i;
}

static void heap_remove_at(heap *h, uint32_t pos)
{
    h->n--;
    if (pos == h->n) return;
    hentry last = h->a[h->n];
    hentry gone = h->a[pos];
    hset(h, pos, last);
    if (hless(&last, &gone)) sift_up(h, pos);
    else sift_down(h, pos);
}

static int heap_cancel(heap *h, uint64_t id)
{
    uint32_t i = (uint32_t)id, gen = (uint32_t)(id >> 32);
    if ((i >> HCHUNK_BITS) >= h->nchunks) return -1;
    hnode *n = hnode_at(h, i);
    if (n->pos == UINT32_MAX || n->gen != gen) return -1;
    heap_remove_at(h, n->pos);
    hnode_free(h, i, n);
    return 0;
}

static size_t heap_advance(heap *h, uint64_t now)
{
    size_t fired = 0;
    while (h->n > 0 && h->a[0].deadline <= now) {
        uint32_t i = h->a[0].node;
        hnode *n = hnode_at(h, i);
        timer_fn fn = n->fn;
        void *arg = n->arg;
        uint64_t id = (uint64_t)n->gen << 32 | i;
        heap_remove_at(h, 0);
        hnode_free(h, i, n);
        fn(arg, id, now);
        fired++;
    }
    return fired;
}

/* ------------------------------------------------------------------------ */
/* The runs                                                                  */

enum { M_FILL, M_CANCEL, M_SCHED, M_REPLACE, M_PAIR, M_EXPIRY, M_BYTES, M_RSS, NMETRICS };
static const char *const metric_name[NMETRICS] = {
    "fill 0 -> N, ns/schedule",
    "cancel at N pending (random), ns",
    "schedule at N pending, ns",
    "replace: cancel random + schedule",
    "schedule + cancel pair at N, ns",
    "expiry, ns per timer fired",
    "bytes per pending timer (alloc)",
    "bytes per pending timer (RSS)",
};

typedef struct cfg {
    size_t n, k;
    uint64_t span_ns;
    int runs;
} cfg;

static size_t fired_count;
static uint64_t last_fire_deadline_ok;
static void on_fire_wheel(void *arg, sluice_timer_id id, uint64_t now)
{
    (void)arg, (void)id, (void)now;
    fired_count++;
}
/* the heap's callback checks order: arg carries the deadline */
static uint64_t heap_last;
static void on_fire_heap(void *arg, uint64_t id, uint64_t now)
{
    (void)id;
    uint64_t d = (uint64_t)(uintptr_t)arg;
    if (d > now || d < heap_last) last_fire_deadline_ok = 0;
    heap_last = d;
    fired_count++;
}

/* K random distinct positions among [0, total), into pick[0..k) */
static void pick_random(uint64_t *ids, size_t total, size_t k)
{
    for (size_t i = 0; i < k; i++) { /* partial Fisher-Yates */
        size_t j = i + rnd() % (total - i);
        uint64_t t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
}

static double per(uint64_t ns, size_t ops) { return ops ? (double)ns / (double)ops : 0; }

static void run_wheel(const cfg *c, uint64_t seed, uint64_t *deadlines, uint64_t *ids, double *out)
{
    sluice_allocator a = {.malloc_fn = count_malloc, .calloc_fn = count_calloc, .free_fn = count_free};
    if (sluice_set_allocator(&a) != 0) die("sluice_set_allocator");
    trim();
    size_t rss0 = rss_bytes();
    char err[128];
    const uint64_t t0 = 1000 * MS;
    sluice_wheel *w = sluice_wheel_new(MS, 4 * c->n, t0, err, sizeof err);
    if (!w) die(err);
    size_t base = live_bytes;

    uint64_t s = now_ns();
    for (size_t i = 0; i < c->n; i++)
        if (sluice_wheel_schedule(w, deadlines[i], on_fire_wheel, NULL, &ids[i]) != 0) die("schedule");
    out[M_FILL] = per(now_ns() - s, c->n);
    out[M_BYTES] = (double)(live_bytes - base) / (double)c->n;
    out[M_RSS] = (double)(rss_bytes() - rss0) / (double)c->n;

    rng_state = seed ^ 0xC0FFEE;
    pick_random(ids, c->n, c->k);
    s = now_ns();
    for (size_t i = 0; i < c->k; i++)
        if (sluice_wheel_cancel(w, ids[i]) != 0) die("cancel");
    out[M_CANCEL] = per(now_ns() - s, c->k);

    s = now_ns();
    for (size_t i = 0; i < c->k; i++)
        if (sluice_wheel_schedule(w, deadlines[c->n + i], on_fire_wheel, NULL, &ids[i]) != 0)
            die("schedule");
    out[M_SCHED] = per(now_ns() - s, c->k);

    pick_random(ids, c->n, c->k);
    s = now_ns();
    for (size_t i = 0; i < c->k; i++) {
        if (sluice_wheel_cancel(w, ids[i]) != 0 ||
            sluice_wheel_schedule(w, deadlines[c->n + i], on_fire_wheel, NULL, &ids[i]) != 0)
            die("replace");
    }
    out[M_REPLACE] = per(now_ns() - s, c->k);

    s = now_ns();
    for (size_t i = 0; i < c->k; i++) {
        sluice_timer_id id;
        if (sluice_wheel_schedule(w, deadlines[i], on_fire_wheel, NULL, &id) != 0 ||
            sluice_wheel_cancel(w, id) != 0)
            die("pair");
    }
    out[M_PAIR] = per(now_ns() - s, c->k);
    if (sluice_wheel_pending(w) != c->n) die("wheel pending count");

    fired_count = 0;
    s = now_ns();
    for (uint64_t t = t0; t <= t0 + c->span_ns + MS; t += MS) sluice_wheel_advance(w, t);
    out[M_EXPIRY] = per(now_ns() - s, fired_count);
    if (fired_count != c->n || sluice_wheel_pending(w) != 0) die("wheel: not every timer fired");
    sluice_wheel_free(w);
    sluice_set_allocator(NULL);
}

static void run_heap(const cfg *c, uint64_t seed, uint64_t *deadlines, uint64_t *ids, double *out)
{
    trim();
    size_t rss0 = rss_bytes();
    const uint64_t t0 = 1000 * MS;
    heap h;
    heap_init(&h);

    uint64_t s = now_ns();
    for (size_t i = 0; i < c->n; i++)
        ids[i] = heap_schedule(&h, deadlines[i], on_fire_heap, (void *)(uintptr_t)deadlines[i]);
    out[M_FILL] = per(now_ns() - s, c->n);
    out[M_BYTES] = (double)h.bytes / (double)c->n;
    out[M_RSS] = (double)(rss_bytes() - rss0) / (double)c->n;

    rng_state = seed ^ 0xC0FFEE;
    pick_random(ids, c->n, c->k);
    s = now_ns();
    for (size_t i = 0; i < c->k; i++)
        if (heap_cancel(&h, ids[i]) != 0) die("heap cancel");
    out[M_CANCEL] = per(now_ns() - s, c->k);

    s = now_ns();
    for (size_t i = 0; i < c->k; i++) {
        uint64_t d = deadlines[c->n + i];
        ids[i] = heap_schedule(&h, d, on_fire_heap, (void *)(uintptr_t)d);
    }
    out[M_SCHED] = per(now_ns() - s, c->k);

    pick_random(ids, c->n, c->k);
    s = now_ns();
    for (size_t i = 0; i < c->k; i++) {
        uint64_t d = deadlines[c->n + i];
        if (heap_cancel(&h, ids[i]) != 0) die("heap replace");
        ids[i] = heap_schedule(&h, d, on_fire_heap, (void *)(uintptr_t)d);
    }
    out[M_REPLACE] = per(now_ns() - s, c->k);

    s = now_ns();
    for (size_t i = 0; i < c->k; i++) {
        uint64_t id = heap_schedule(&h, deadlines[i], on_fire_heap, (void *)(uintptr_t)deadlines[i]);
        if (heap_cancel(&h, id) != 0) die("heap pair");
    }
    out[M_PAIR] = per(now_ns() - s, c->k);
    if (h.n != c->n) die("heap count");

    fired_count = 0;
    heap_last = 0;
    last_fire_deadline_ok = 1;
    s = now_ns();
    for (uint64_t t = t0; t <= t0 + c->span_ns + MS; t += MS) heap_advance(&h, t);
    out[M_EXPIRY] = per(now_ns() - s, fired_count);
    if (fired_count != c->n || h.n != 0 || !last_fire_deadline_ok) die("heap: wrong firing");
    heap_fini(&h);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double mutex_ns(void)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    enum { ITERS = 5000000 };
    uint64_t s = now_ns();
    for (int i = 0; i < ITERS; i++) {
        pthread_mutex_lock(&m);
        __asm__ volatile("" ::: "memory");
        pthread_mutex_unlock(&m);
    }
    return per(now_ns() - s, ITERS);
}

/* ns per dependent load at random places in a 48-MB array (Sattolo's
 * cycle, so the chase visits every element once). */
static double chase_ns(void)
{
    enum { NE = 48 << 20 >> 3 };
    uint64_t *a = malloc(NE * sizeof *a);
    if (!a) die("out of memory");
    for (uint64_t i = 0; i < NE; i++) a[i] = i;
    rng_state = 0x1234567;
    for (uint64_t i = NE - 1; i > 0; i--) {
        uint64_t j = rnd() % i, t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
    enum { STEPS = 2000000 };
    uint64_t p = 0, s = now_ns();
    for (int i = 0; i < STEPS; i++) p = a[p];
    double r = per(now_ns() - s, STEPS);
    if (p == NE) die("impossible"); /* keep p alive */
    free(a);
    return r;
}

static size_t parse_size(const char *s, const char *name)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || v < 1) {
        fprintf(stderr, "bench_wheel: bad %s \"%s\"\n", name, s);
        exit(2);
    }
    return (size_t)v;
}

int main(int argc, char **argv)
{
    cfg c = {1000000, 200000, 60000 * MS, 5};
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--runs")) c.runs = (int)parse_size(argv[++i], "--runs");
        else if (i + 1 < argc && !strcmp(argv[i], "--n")) c.n = parse_size(argv[++i], "--n");
        else if (i + 1 < argc && !strcmp(argv[i], "--k")) c.k = parse_size(argv[++i], "--k");
        else if (i + 1 < argc && !strcmp(argv[i], "--span-ms"))
            c.span_ns = parse_size(argv[++i], "--span-ms") * MS;
        else {
            fprintf(stderr, "usage: bench_wheel [--runs R] [--n N] [--k K] [--span-ms MS]\n");
            return 2;
        }
    }
    if (c.k > c.n) c.k = c.n;
    size_t total = c.n + c.k;
    uint64_t *deadlines = malloc(total * sizeof *deadlines);
    uint64_t *ids = malloc(total * sizeof *ids);
    double (*res)[2][NMETRICS] = malloc((size_t)c.runs * sizeof *res);
    if (!deadlines || !ids || !res) die("out of memory");
    memset(ids, 0, total * sizeof *ids);

    printf("bench_wheel: N = %zu pending, K = %zu ops measured, deadlines uniform over %.0f s, "
           "tick 1 ms, %d runs (medians)\n",
           c.n, c.k, (double)c.span_ns / 1e9, c.runs);
    fflush(stdout);
    for (int r = 0; r < c.runs; r++) {
        uint64_t seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(r + 1);
        rng_state = seed;
        for (size_t i = 0; i < total; i++) deadlines[i] = 1000 * MS + rnd() % c.span_ns;
        if (r % 2 == 0) {
            run_wheel(&c, seed, deadlines, ids, res[r][0]);
            run_heap(&c, seed, deadlines, ids, res[r][1]);
        } else {
            run_heap(&c, seed, deadlines, ids, res[r][1]);
            run_wheel(&c, seed, deadlines, ids, res[r][0]);
        }
        fprintf(stderr, "  run %d/%d done\n", r + 1, c.runs);
    }
    double med[2][NMETRICS];
    double *col = malloc((size_t)c.runs * sizeof *col);
    if (!col) die("out of memory");
    for (int s = 0; s < 2; s++) {
        for (int m = 0; m < NMETRICS; m++) {
            for (int r = 0; r < c.runs; r++) col[r] = res[r][s][m];
            med[s][m] = median(col, c.runs);
        }
    }
    static const char *const target[NMETRICS] = {"", "<= 50", "<= 50", "< heap", "", "", "<= 64", ""};
    double floor_ns = chase_ns();
    printf("\n| %-34s | %9s | %9s | %6s | %s\n", "metric", "wheel", "heap", "w/h", "target (wheel)");
    printf("|%s|%s|%s|%s|%s\n", "------------------------------------", "-----------",
           "-----------", "--------", "------");
    for (int m = 0; m < NMETRICS; m++) {
        printf("| %-34s | %9.1f | %9.1f | %6.2f | %s\n", metric_name[m], med[0][m], med[1][m],
               med[1][m] > 0 ? med[0][m] / med[1][m] : 0, target[m]);
    }
    double sc_w = med[0][M_SCHED] + med[0][M_CANCEL], sc_h = med[1][M_SCHED] + med[1][M_CANCEL];
    printf("| %-34s | %9.1f | %9.1f | %6.2f | %s\n", "schedule + cancel (rows 2 + 3)", sc_w,
           sc_h, sc_w / sc_h, "< heap");
    printf("| %-34s | %9.1f | %9s | %6s | %s\n", "floor: 1 dependent load in 48 MB", floor_ns, "",
           "", "");
    printf("\nuncontended pthread mutex lock + unlock (taken by every wheel call, not by the "
           "heap): %.1f ns\n", mutex_ns());
    free(col);
    free(res);
    free(ids);
    free(deadlines);
    return 0;
}
