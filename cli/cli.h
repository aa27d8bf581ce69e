/* cli.h -- the sluice command's subcommands.  The CLI uses only the public
 * API (sluice.h); each subcommand lives in its own file. */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

/* Each returns the process exit status: 0 on success, 2 on bad usage or
 * bad input (after a one-line message on stderr), 1 on other failures. */
int sluice_cli_replay(int argc, char **argv);
int sluice_cli_demo(int argc, char **argv);
int sluice_cli_hammer(int argc, char **argv);

#endif
