/* cli.h -- the sluice command's subcommands.  The CLI uses only the public
 * API (sluice.h); each subcommand lives in its own file. */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <sluice.h>
#include <stdio.h>

/* Each returns the process exit status: 0 on success, 2 on bad usage or
 * bad input (after a one-line message on stderr), 1 on other failures. */
int sluice_cli_replay(int argc, char **argv);
int sluice_cli_demo(int argc, char **argv);
int sluice_cli_hammer(int argc, char **argv);

/* Write m's exposition to f (opened by the caller as `path`, which names it
 * in messages).  Returns 0, or 1 after a message on stderr. */
int sluice_cli_metrics_dump(const sluice_metrics *m, FILE *f, const char *path);

#endif
