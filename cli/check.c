/* check.c -- `sluice check FILE`: is a rule file good?  As `nginx -t`: the
 * file is parsed and every spec and option checked (sluice_rules_check),
 * nothing is made.  Exit status 0 and one line on stdout for a good file;
 * 2 and one line on stderr naming the file, the line and the offending
 * token for a bad one (or a file that cannot be read). */
#include "cli.h"

#include <errno.h>
#include <sluice/rules.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char check_usage[] =
    "usage: sluice check FILE\n"
    "\n"
    "Checks the rule file FILE (the format: README.md, \"Rule files\") without\n"
    "making anything: its syntax, every spec, option and override.\n"
    "Exit status 0 for a good file (\"FILE: ok, N rules, M overrides\" on stdout);\n"
    "2 for a bad one, with one line on stderr naming the line and the token:\n"
    "  sluice check: rules.conf: line 3: bad spec \"token-bucket 10/s burts=5\": ...\n";

int sluice_cli_check(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(check_usage, stdout);
        return 0;
    }
    if (argc != 2) {
        fputs(check_usage, stderr);
        return 2;
    }
    const char *path = argv[1];
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "sluice check: cannot open \"%s\": %s\n", path, strerror(errno));
        return 2;
    }
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    for (;;) {
        if (!text) break;
        if (len == cap) {
            char *t = realloc(text, cap * 2);
            if (!t) {
                free(text);
                text = NULL;
                break;
            }
            text = t;
            cap *= 2;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int bad_read = ferror(f);
    fclose(f);
    if (!text || bad_read) {
        fprintf(stderr, "sluice check: cannot read \"%s\": %s\n", path,
                text ? strerror(EIO) : "out of memory");
        free(text);
        return text ? 2 : 1;
    }
    char err[512];
    size_t nrules = 0, nover = 0;
    int rc = sluice_rules_check(text, len, &nrules, &nover, err, sizeof err);
    free(text);
    if (rc == SLUICE_ENOMEM) {
        fprintf(stderr, "sluice check: out of memory\n");
        return 1;
    }
    if (rc != 0) {
        fprintf(stderr, "sluice check: %s: %s\n", path, err);
        return 2;
    }
    printf("%s: ok, %zu rule%s, %zu override%s\n", path, nrules, nrules == 1 ? "" : "s", nover,
           nover == 1 ? "" : "s");
    return 0;
}
