/* cli.h -- the sluice command's subcommands.  The CLI uses only the public
 * API (sluice.h); each subcommand lives in its own file. */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <sluice.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Each returns the process exit status: 0 on success, 2 on bad usage or
 * bad input (after a one-line message on stderr), 1 on other failures. */
int sluice_cli_replay(int argc, char **argv);
int sluice_cli_demo(int argc, char **argv);
int sluice_cli_hammer(int argc, char **argv);
int sluice_cli_check(int argc, char **argv);

/* Write m's exposition to f (opened by the caller as `path`, which names it
 * in messages).  Returns 0, or 1 after a message on stderr. */
int sluice_cli_metrics_dump(const sluice_metrics *m, FILE *f, const char *path);

/* The picture of `sluice demo --svg FILE` (svg.c).  A lane: a label and the
 * sorted times, in ns, at which its requests went through. */
typedef struct sluice_cli_lane {
    const char *label;
    const char *note; /* a line drawn in the lane, or NULL */
    const uint64_t *t;
    size_t n;
} sluice_cli_lane;

typedef struct sluice_cli_svg {
    const char *title, *subtitle, *legend;
    uint64_t limit, window_ns; /* the limit drawn in: `limit` per window_ns */
    uint64_t t_end_ns;         /* the time axis runs from 0 to here (whole s) */
    uint64_t mark_from_ns, mark_to_ns; /* a span to highlight, or equal */
    const char *mark_label;
    uint64_t note_at_ns;               /* where the lanes' notes start */
    const sluice_cli_lane *offered;    /* the requests offered */
    const sluice_cli_lane *lanes;      /* one per algorithm */
    size_t nlanes;
} sluice_cli_svg;

/* Write the picture to f (opened by the caller as `path`).  Returns 0, or 1
 * after a message on stderr. */
int sluice_cli_svg_write(const sluice_cli_svg *s, FILE *f, const char *path);

/* One request of a `sluice replay` trace, pointing into the trace's text:
 * time_ns and permits as given (for echoing) and as numbers; key (kn
 * bytes, no comma, CR or LF); p is NULL when the permits field is absent
 * (permits is then 1). */
typedef struct sluice_cli_req {
    const char *t;   /* time_ns as given, tn bytes */
    const char *key; /* kn bytes */
    const char *p;   /* permits as given (pn bytes), or NULL */
    uint32_t tn, kn, pn;
    uint64_t time_ns, permits;
    size_t line; /* its line number in the trace, from 1 */
} sluice_cli_req;

/* A parsed trace: n requests in file order, in an array from malloc that
 * the caller frees (free(reqs)), also after an error. */
typedef struct sluice_cli_trace {
    sluice_cli_req *reqs;
    size_t n;
} sluice_cli_trace;

/* Split and validate a whole trace [in, in+len) by the rules in replay.c
 * (no output; the requests point into `in`).  Returns 0; 2 for a malformed
 * line, with a one-line message in err ("line N: problem \"token\"", bytes
 * that are not printable ASCII written as \xHH); 1 when out of memory.  On
 * 1 or 2, tr->n is 0.  Used by `sluice replay` and by the fuzzer
 * tests/fuzz/fuzz_replay.c. */
int sluice_cli_replay_parse(const char *in, size_t len, sluice_cli_trace *tr, char *err,
                            size_t errlen);

#endif
