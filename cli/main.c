/* main.c -- the sluice command: dispatch to the subcommands. */
#include "cli.h"

#include <sluice.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: sluice COMMAND [ARGS]\n"
    "\n"
    "In-process rate limiting, exact to a written contract.\n"
    "\n"
    "commands:\n"
    "  replay --limit SPEC [--max-keys N]   decide a trace read from stdin, print CSV\n"
    "  demo                                 the boundary-burst scenario through every algorithm\n"
    "  replay --rules FILE                  decide a trace by a rule file's rules\n"
    "  check FILE                           check a rule file: exit 0 if good, 2 naming the\n"
    "                                       line and the token if not (sluice check --help)\n"
    "  spec SPEC                            check a spec and print its canonical form\n"
    "  hammer --limit SPEC [--redis URL] ...  load and soak: decide as fast as possible\n"
    "                                       for a while (sluice hammer --help)\n"
    "  --help, -h                           this text\n"
    "  --version                            the library version\n"
    "\n"
    "SPEC is `ALGORITHM LIMIT/PERIOD [OPTION ...]`, for example:\n"
    "  'token-bucket 100/s burst=20'   'sliding-wheel 1000/min slots=60'\n"
    "  'fixed-window 5/250ms'          'leaky-bucket 10/s capacity=5 nodelay'\n"
    "ALGORITHM: fixed-window sliding-log sliding-wheel sliding-approx token-bucket leaky-bucket\n"
    "LIMIT: 1 .. 10^12.  PERIOD: [N]UNIT, UNIT one of ns us ms s m min h d (m = minute).\n"
    "OPTIONS: burst=B (token-bucket), capacity=C and nodelay (leaky-bucket),\n"
    "         slots=N (sliding-wheel; PERIOD/N a whole number of ns).\n"
    "`sluice spec` also checks a concurrency limit, `concurrency N [lease=DURATION]`\n"
    "(at most N permits held at once; not a rate, so not for replay).\n"
    "\n"
    "Run `sluice replay --help` for the trace and output formats.\n";

static int cmd_spec(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "--help") == 0) {
        fprintf(argc == 2 ? stdout : stderr, "usage: sluice spec 'SPEC'\n");
        return argc == 2 ? 0 : 2;
    }
    char canon[128], err[256];
    int rc = strncmp(argv[1] + strspn(argv[1], " \t"), "concurrency", 11) == 0
                 ? sluice_concurrency_spec_check(argv[1], canon, sizeof canon, err, sizeof err)
                 : sluice_spec_check(argv[1], canon, sizeof canon, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "sluice spec: %s\n", err);
        return 2;
    }
    printf("%s\n", canon);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("sluice %s\n", sluice_version());
        return 0;
    }
    if (strcmp(cmd, "replay") == 0) return sluice_cli_replay(argc - 1, argv + 1);
    if (strcmp(cmd, "demo") == 0) return sluice_cli_demo(argc - 1, argv + 1);
    if (strcmp(cmd, "spec") == 0) return cmd_spec(argc - 1, argv + 1);
    if (strcmp(cmd, "hammer") == 0) return sluice_cli_hammer(argc - 1, argv + 1);
    if (strcmp(cmd, "check") == 0) return sluice_cli_check(argc - 1, argv + 1);
    fprintf(stderr, "sluice: unknown command \"%s\" (try sluice --help)\n", cmd);
    return 2;
}
