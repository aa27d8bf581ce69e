/* demo.c -- `sluice demo`: the fixed window's boundary burst, through every
 * algorithm.
 *
 * The scenario is the classic argument against the fixed window: with a
 * limit of 100 per second, 100 requests arrive in the last 10 ms of one
 * second and 100 more in the first 10 ms of the next.  Each window sees only
 * 100, so a fixed window admits all 200 within 20 ms.  A steady overload
 * (300/s for 5 s) follows, to show each algorithm's long-run behaviour.
 *
 * Time is simulated: every decision goes through sluice_try_acquire_at()
 * with the request's own time, so the demo never sleeps and its output is
 * the same on every run and every machine.
 *
 * For each algorithm the table shows the requests admitted, how many of the
 * 200 edge requests got through, the most admitted in any 1-second window
 * (exact: a two-pointer scan over the admitted times, window [s, s + 1 s)),
 * and the longest wait_ns.  For the leaky-bucket shaper a request proceeds
 * at t + wait_ns, so its "in any second" count is over those times.
 *
 * With --svg FILE the same times are drawn (svg.c): one lane per algorithm,
 * the requests let through in the second before each instant, against the
 * limit.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice.h>

#include "cli.h"

#define DEMO_LIMIT 100u                      /* permits per second */
#define DEMO_SEC_NS 1000000000ULL
#define DEMO_MS_NS 1000000ULL
#define DEMO_EDGE_N 100u                     /* requests on each side of 1 s */
#define DEMO_EDGE_START_NS (990 * DEMO_MS_NS) /* 0.990 s */
#define DEMO_EDGE_STEP_NS (10 * DEMO_MS_NS / DEMO_EDGE_N) /* 100 us */
#define DEMO_EDGE_END_NS (1010 * DEMO_MS_NS)  /* 1.010 s */
#define DEMO_STEADY_START_NS (2 * DEMO_SEC_NS)
#define DEMO_STEADY_RATE 300u                /* requests per second */
#define DEMO_STEADY_SECS 5u
#define DEMO_TOTAL (2 * DEMO_EDGE_N + DEMO_STEADY_RATE * DEMO_STEADY_SECS)

static const char *const demo_specs[] = {
    "fixed-window 100/s",
    "sliding-log 100/s",
    "sliding-wheel 100/s",
    "sliding-approx 100/s",
    "token-bucket 100/s",
    "leaky-bucket 100/s",
    "leaky-bucket 100/s nodelay",
};
#define DEMO_NSPECS (sizeof demo_specs / sizeof demo_specs[0])

/* What one algorithm did with the scenario. */
typedef struct demo_row {
    size_t admitted;          /* of DEMO_TOTAL */
    size_t edge_admitted;     /* of the 2 * DEMO_EDGE_N boundary requests */
    size_t max_in_window;     /* most proceed times in any [s, s + 1 s) */
    uint64_t max_window_from; /* s of the first such window, ns */
    uint64_t max_wait_ns;
    uint64_t min_gap_ns;      /* least gap between consecutive proceed times */
} demo_row;

static void demo_usage(FILE *out)
{
    fprintf(out,
            "usage: sluice demo [--svg FILE] [--help]\n"
            "\n"
            "Runs the fixed window's \"boundary burst\" through every algorithm at\n"
            "100/s: 100 requests in [0.990 s, 1.000 s), 100 in [1.000 s, 1.010 s),\n"
            "then 300/s for 5 s from 2.000 s, on simulated time (no sleeping), and\n"
            "prints what each algorithm admitted.\n"
            "\n"
            "  --svg FILE   also draw it: one lane per algorithm, the requests\n"
            "               admitted in the second before each instant, against\n"
            "               the limit (an SVG picture, written to FILE)\n");
}

/* The arrival times of the scenario, increasing, into t[DEMO_TOTAL]. */
static void demo_scenario(uint64_t *t)
{
    size_t n = 0;
    for (uint64_t i = 0; i < 2 * DEMO_EDGE_N; i++)
        t[n++] = DEMO_EDGE_START_NS + i * DEMO_EDGE_STEP_NS;
    for (uint64_t i = 0; i < (uint64_t)DEMO_STEADY_RATE * DEMO_STEADY_SECS; i++)
        t[n++] = DEMO_STEADY_START_NS + i * DEMO_SEC_NS / DEMO_STEADY_RATE;
}

static int demo_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Fill row->max_in_window, ->max_window_from and ->min_gap_ns from the n
 * proceed times in p (sorted here).  Two pointers: for each j, i is the
 * first time with p[j] - p[i] < 1 s, so [p[i], p[i] + 1 s) holds j - i + 1. */
static void demo_scan(uint64_t *p, size_t n, demo_row *row)
{
    qsort(p, n, sizeof *p, demo_cmp_u64);
    row->max_in_window = 0;
    row->max_window_from = 0;
    row->min_gap_ns = UINT64_MAX;
    size_t i = 0;
    for (size_t j = 0; j < n; j++) {
        while (p[j] - p[i] >= DEMO_SEC_NS)
            i++;
        if (j - i + 1 > row->max_in_window) {
            row->max_in_window = j - i + 1;
            row->max_window_from = p[i];
        }
        if (j > 0 && p[j] - p[j - 1] < row->min_gap_ns)
            row->min_gap_ns = p[j] - p[j - 1];
    }
}

/* Run the scenario through `spec`.  Returns 0, or 1 after a message. */
static int demo_run(const char *spec, const uint64_t *t, uint64_t *proceed,
                    demo_row *row)
{
    char err[256];
    sluice_limiter *lim = sluice_limiter_new(spec, err, sizeof err);
    if (lim == NULL) {
        fprintf(stderr, "sluice demo: spec \"%s\" refused: %s\n", spec, err);
        return 1;
    }
    memset(row, 0, sizeof *row);
    for (size_t k = 0; k < DEMO_TOTAL; k++) {
        sluice_result res;
        if (!sluice_try_acquire_at(lim, 1, t[k], &res))
            continue;
        proceed[row->admitted++] = t[k] + res.wait_ns;
        if (k < 2 * DEMO_EDGE_N)
            row->edge_admitted++;
        if (res.wait_ns > row->max_wait_ns)
            row->max_wait_ns = res.wait_ns;
    }
    sluice_limiter_free(lim);
    demo_scan(proceed, row->admitted, row);
    return 0;
}

/* A short line for the picture, from the numbers alone. */
static void demo_note(const demo_row *row, char *buf, size_t len)
{
    const double ms = (double)DEMO_MS_NS;
    if (row->max_wait_ns > 0)
        snprintf(buf, len, "smooths the burst: one every %.0f ms or more, up to %.0f ms late",
                 (double)row->min_gap_ns / ms, (double)row->max_wait_ns / ms);
    else if (row->max_in_window > DEMO_LIMIT && row->max_window_from < DEMO_EDGE_END_NS)
        snprintf(buf, len, "%zu through within 20 ms at the window edge: %.1f\u00d7 the limit",
                 row->edge_admitted, (double)row->max_in_window / DEMO_LIMIT);
    else if (row->max_in_window > DEMO_LIMIT)
        snprintf(buf, len, "%zu in the second from %.0f s: the whole burst, then the rate",
                 row->max_in_window, (double)row->max_window_from / (double)DEMO_SEC_NS);
    else
        snprintf(buf, len, "never more than %zu in any second", row->max_in_window);
}

/* Draw what every algorithm let through (svg.c) into `path`. */
static int demo_svg(FILE *f, const char *path, const uint64_t *t,
                    uint64_t (*proceed)[DEMO_TOTAL], const demo_row *rows)
{
    sluice_cli_lane offered = {"requests offered", NULL, t, DEMO_TOTAL};
    sluice_cli_lane lanes[DEMO_NSPECS];
    char notes[DEMO_NSPECS][120];
    for (size_t s = 0; s < DEMO_NSPECS; s++) {
        demo_note(&rows[s], notes[s], sizeof notes[s]);
        lanes[s] = (sluice_cli_lane){demo_specs[s], notes[s], proceed[s], rows[s].admitted};
    }
    const sluice_cli_svg svg = {
        .title = "The boundary burst at 100/s, through every algorithm",
        .subtitle = "100 requests in the last 10 ms of a second, 100 in the first 10 ms "
                    "of the next, then 300/s for 5 s (sluice demo)",
        .legend = "Each lane: requests let through in the second before each instant "
                  "(the shaper: when they leave). Dashed: the limit, 100. Red: above it.",
        .limit = DEMO_LIMIT,
        .window_ns = DEMO_SEC_NS,
        .t_end_ns = 9 * DEMO_SEC_NS,
        .mark_from_ns = DEMO_EDGE_START_NS,
        .mark_to_ns = DEMO_EDGE_END_NS,
        .mark_label = "edge burst",
        .note_at_ns = DEMO_EDGE_END_NS + 60 * DEMO_MS_NS,
        .offered = &offered,
        .lanes = lanes,
        .nlanes = DEMO_NSPECS,
    };
    return sluice_cli_svg_write(&svg, f, path);
}

/* One line, written from the numbers alone. */
static void demo_verdict(const demo_row *row, char *buf, size_t len)
{
    double ms = (double)DEMO_MS_NS;
    if (row->max_wait_ns > 0) {
        snprintf(buf, len,
                 "smooths the burst: requests leave >= %.1f ms apart "
                 "(%zu in any second), up to %.0f ms late",
                 (double)row->min_gap_ns / ms, row->max_in_window,
                 (double)row->max_wait_ns / ms);
    } else if (row->max_in_window > DEMO_LIMIT &&
               row->max_window_from < DEMO_EDGE_END_NS) {
        snprintf(buf, len,
                 "lets %.1fx the limit through at the window edge "
                 "(%zu in 20 ms)",
                 (double)row->max_in_window / DEMO_LIMIT, row->edge_admitted);
    } else if (row->max_in_window > DEMO_LIMIT) {
        snprintf(buf, len,
                 "takes %zu of the edge burst, but lets %zu through in "
                 "the second from %.3f s (%.2fx the limit)",
                 row->edge_admitted, row->max_in_window,
                 (double)row->max_window_from / (double)DEMO_SEC_NS,
                 (double)row->max_in_window / DEMO_LIMIT);
    } else {
        snprintf(buf, len,
                 "never more than %zu in any second (edge: %zu in 20 ms)",
                 row->max_in_window, row->edge_admitted);
    }
}

/* The shaper through the timing wheel: a burst of DEMO_SHAPE_N requests at
 * one instant, each made with sluice_queue_acquire_at(), and a wheel of 1-ms
 * ticks advanced by hand every 0.1 ms of simulated time: the callbacks are
 * the moments the requests are let go. */
#define DEMO_SHAPE_N 12u
#define DEMO_SHAPE_SPEC "leaky-bucket 100/s capacity=12"

typedef struct demo_grants {
    size_t n;
    uint64_t at[DEMO_SHAPE_N];
} demo_grants;

static void demo_on_grant(void *arg, uint64_t id, uint64_t now_ns)
{
    (void)id;
    demo_grants *g = arg;
    if (g->n < DEMO_SHAPE_N) g->at[g->n++] = now_ns;
}

static int demo_shaper(void)
{
    char err[256];
    const uint64_t t0 = 1000 * DEMO_MS_NS;
    sluice_limiter *lim = sluice_limiter_new(DEMO_SHAPE_SPEC, err, sizeof err);
    sluice_wheel *w = lim ? sluice_wheel_new(DEMO_MS_NS, 1024, t0, err, sizeof err) : NULL;
    sluice_queue *q = w ? sluice_queue_new(lim, w, DEMO_SHAPE_N, err, sizeof err) : NULL;
    int rc = q ? 0 : 1;
    if (!q) fprintf(stderr, "sluice demo: %s\n", err);
    demo_grants g = {0, {0}};
    for (unsigned k = 0; rc == 0 && k < DEMO_SHAPE_N; k++) {
        rc = sluice_queue_acquire_at(q, 1, t0, demo_on_grant, &g, NULL);
        if (rc != 0) fprintf(stderr, "sluice demo: queued acquire refused: %s\n", sluice_strerror(rc));
    }
    if (rc != 0) {
        sluice_queue_free(q);
        sluice_wheel_free(w);
        sluice_limiter_free(lim);
        return 1;
    }
    for (uint64_t t = t0; g.n < DEMO_SHAPE_N && t < t0 + 2000 * DEMO_MS_NS; t += DEMO_MS_NS / 10)
        sluice_wheel_advance(w, t);
    printf("\nThe shaper through the timing wheel: %u requests at once into \"%s\",\n"
           "each asked through a sluice_queue; a wheel of 1-ms ticks lets them go at\n",
           DEMO_SHAPE_N, DEMO_SHAPE_SPEC);
    for (size_t k = 0; k < g.n; k++)
        printf("%s+%.0f ms", k ? ", " : "  ", (double)(g.at[k] - t0) / (double)DEMO_MS_NS);
    printf("\n  one every 10 ms, the constant 100/s, each within a tick\n"
           "  of its contract wait_ns.\n");
    sluice_queue_free(q);
    sluice_wheel_free(w);
    sluice_limiter_free(lim);
    return g.n == DEMO_SHAPE_N ? 0 : 1;
}

int sluice_cli_demo(int argc, char **argv)
{
    const char *svg_path = NULL;
    /* argv[0] is the subcommand's name. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            demo_usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--svg") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0') {
                fprintf(stderr, "sluice demo: --svg needs a FILE (try --help)\n");
                return 2;
            }
            svg_path = argv[++i];
            continue;
        }
        fprintf(stderr, "sluice demo: unknown argument \"%s\" (try --help)\n",
                argv[i]);
        return 2;
    }

    FILE *svg = NULL; /* opened first: a bad FILE stops the demo before it prints */
    if (svg_path != NULL && (svg = fopen(svg_path, "w")) == NULL) {
        fprintf(stderr, "sluice demo: cannot open \"%s\" for writing\n", svg_path);
        return 2;
    }
    static uint64_t t[DEMO_TOTAL], proceed[DEMO_NSPECS][DEMO_TOTAL];
    demo_row rows[DEMO_NSPECS];
    demo_scenario(t);
    for (size_t s = 0; s < DEMO_NSPECS; s++)
        if (demo_run(demo_specs[s], t, proceed[s], &rows[s]) != 0) {
            if (svg) fclose(svg);
            return 1;
        }
    if (svg != NULL) {
        int rc = demo_svg(svg, svg_path, t, proceed, rows);
        if (fclose(svg) != 0 && rc == 0) {
            fprintf(stderr, "sluice demo: cannot write \"%s\"\n", svg_path);
            rc = 1;
        }
        if (rc != 0) return rc;
    }

    printf("Boundary burst at %u/s: %u requests in [0.990 s, 1.000 s), %u in "
           "[1.000 s, 1.010 s),\n"
           "then %u/s for %u s from 2.000 s; %u requests in all, simulated "
           "time.\n\n",
           DEMO_LIMIT, DEMO_EDGE_N, DEMO_EDGE_N, DEMO_STEADY_RATE,
           DEMO_STEADY_SECS, (unsigned)DEMO_TOTAL);
    printf("%-27s %9s %9s %8s %9s  %s\n", "spec", "admitted", "edge 20ms",
           "max/1s*", "max wait", "verdict");
    for (size_t s = 0; s < DEMO_NSPECS; s++) {
        char adm[32], edge[32], verdict[200];
        snprintf(adm, sizeof adm, "%zu/%u", rows[s].admitted,
                 (unsigned)DEMO_TOTAL);
        snprintf(edge, sizeof edge, "%zu/%u", rows[s].edge_admitted,
                 2 * DEMO_EDGE_N);
        demo_verdict(&rows[s], verdict, sizeof verdict);
        printf("%-27s %9s %9s %8zu %6.0f ms  %s\n", demo_specs[s], adm, edge,
               rows[s].max_in_window,
               (double)rows[s].max_wait_ns / (double)DEMO_MS_NS, verdict);
    }
    printf("\n* most admitted in any 1-second window [s, s + 1 s), exact; for "
           "the leaky-bucket\n"
           "  shaper over the times the requests proceed (t + wait_ns), not "
           "their arrivals.\n");
    return demo_shaper();
}
