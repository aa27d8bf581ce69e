/* check.c -- `sluice check [--allow-empty] [--against OLD] FILE`: is a rule
 * file good, and what would a reload to it do?  As `nginx -t`: the file is
 * read and checked by the library's own validation, the one every load
 * runs (sluice_rules_check_file), so a file it calls good loads.  Exit
 * status 0 and one line on stdout for a good file; 2 and one line on
 * stderr naming the file, the line and the offending token for a bad one
 * (or a file that cannot be read); 1 when memory runs out.
 *
 * A file with no rules is refused (a reload refuses it too: an empty set
 * turns limiting off) unless --allow-empty is given; then the line says
 * what such a set does.  With --against OLD (the file the running set was
 * loaded from) one more line per rule says what the reload would do to its
 * state (sluice_rules_diff): kept, carried, fresh (and why), added,
 * removed. */
#include "cli.h"

#include <sluice/rules.h>
#include <stdio.h>
#include <string.h>

static const char check_usage[] =
    "usage: sluice check [--allow-empty] [--against OLD] FILE\n"
    "\n"
    "Checks the rule file FILE (the format: docs/rules.md) as every\n"
    "load checks it: its syntax, every spec, option and override (an override\n"
    "whose state does not fit its rule's table included), without keeping\n"
    "anything.  A file it accepts loads (memory permitting).\n"
    "Exit status 0 for a good file (\"FILE: ok, N rules, M overrides\" on stdout);\n"
    "2 for a bad one, with one line on stderr naming the line and the token:\n"
    "  sluice check: rules.conf: line 3: bad spec \"token-bucket 10/s burts=5\": ...\n"
    "\n"
    "  --allow-empty  accept a file with no rules (refused otherwise, as a reload\n"
    "                 refuses it: a set without rules limits nothing)\n"
    "  --against OLD  also print, per rule, what reloading a set loaded from OLD\n"
    "                 with FILE would do to its state, one line each:\n"
    "                   NAME: kept | carried (WHY) | fresh (WHY): every key's state\n"
    "                   resets | added | removed\n"
    "                 (\"fresh\": a change of scope, algorithm, max_keys or policy;\n"
    "                 every client gets a fresh burst)\n";

static void print_diff(void *arg, const char *name, int what, const char *why)
{
    (void)arg;
    switch (what) {
    case SLUICE_RULE_KEPT: printf("  %s: kept\n", name); break;
    case SLUICE_RULE_CARRIED: printf("  %s: carried (%s)\n", name, why); break;
    case SLUICE_RULE_FRESH:
        printf("  %s: fresh (%s): every key's state resets\n", name, why);
        break;
    case SLUICE_RULE_ADDED: printf("  %s: added\n", name); break;
    default: printf("  %s: removed\n", name); break;
    }
}

int sluice_cli_check(int argc, char **argv)
{
    unsigned flags = 0;
    const char *against = NULL, *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(check_usage, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--allow-empty") == 0) {
            flags |= SLUICE_RULES_ALLOW_EMPTY;
        } else if (strcmp(argv[i], "--against") == 0 && i + 1 < argc && !against) {
            against = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "sluice check: unknown or repeated option \"%s\"\n", argv[i]);
            fputs(check_usage, stderr);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "sluice check: one FILE only, not also \"%s\"\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        fputs(check_usage, stderr);
        return 2;
    }
    char err[600];
    size_t nrules = 0, nover = 0;
    int rc = sluice_rules_check_file(path, flags, &nrules, &nover, err, sizeof err);
    if (rc == SLUICE_ENOMEM) {
        fprintf(stderr, "sluice check: %s: out of memory\n", path);
        return 1;
    }
    if (rc != 0) {
        /* the file's own errors name it already */
        if (strstr(err, path)) fprintf(stderr, "sluice check: %s\n", err);
        else fprintf(stderr, "sluice check: %s: %s\n", path, err);
        return 2;
    }
    printf("%s: ok, %zu rule%s, %zu override%s%s\n", path, nrules, nrules == 1 ? "" : "s", nover,
           nover == 1 ? "" : "s",
           nrules ? "" : " (an empty set: it limits nothing; a reload accepts it only when asked)");
    if (against) {
        printf("reload from %s:\n", against);
        fflush(stdout);
        rc = sluice_rules_diff_files(against, path, flags, print_diff, NULL, err, sizeof err);
        if (rc != 0) {
            fflush(stdout);
            fprintf(stderr, "sluice check: --against: %s\n", err);
            return rc == SLUICE_ENOMEM ? 1 : 2;
        }
    }
    return 0;
}
