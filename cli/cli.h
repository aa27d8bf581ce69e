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

#endif
