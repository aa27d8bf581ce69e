/* fuzz_rules.c -- fuzz the rule-file parser (sluice/rules.h).
 *
 * The input (up to 4 KiB) is the text of a rule file, NUL bytes included.
 * For every input:
 *  - sluice_rules_check_flags() and sluice_rules_new() agree, with the same
 *    flags (0, then SLUICE_RULES_ALLOW_EMPTY): every text check accepts
 *    loads -- an override whose state does not fit its rule's table is
 *    check's refusal too -- and both refuse the others with the same
 *    message;
 *  - a refusal's message is NUL-terminated, one line, and starts with
 *    "line N: ", N between 1 and the number of lines of the text (or, for
 *    a text without rules, says so);
 *  - sluice_rules_check() (empty sets allowed) agrees with the check with
 *    SLUICE_RULES_ALLOW_EMPTY;
 *  - a reload of a running set with the text agrees too: 0 for a good text
 *    (then the set has its rules, in order, and a generation of 2), the
 *    same message for a bad one (then the set is unchanged);
 *  - an accepted text's rules each answer a probe, allowed.
 * Texts naming max_keys above 100000 are only checked, not made (tables of
 * millions of keys are address space the fuzzer cannot have).
 */
#include <sluice.h>
#include <sluice/rules.h>
#include <string.h>

#include "fuzz.h"

#define MAXTEXT 4096

static size_t lines_of(const char *t, size_t n)
{
    size_t l = 1;
    for (size_t i = 0; i < n; i++) l += t[i] == '\n';
    return l;
}

/* max_keys=N with more than 6 digits anywhere */
static bool big_tables(const char *t, size_t n)
{
    for (size_t i = 0; i + 9 <= n; i++) {
        if (memcmp(t + i, "max_keys=", 9) != 0) continue;
        size_t d = 0;
        while (i + 9 + d < n && t[i + 9 + d] >= '0' && t[i + 9 + d] <= '9') d++;
        if (d > 5) return true;
    }
    return false;
}

static void check_message(const char *err, size_t errlen, size_t lines)
{
    size_t n = fuzz_strnlen(err, errlen);
    FUZZ_CHECK(n < errlen, "message not NUL-terminated");
    FUZZ_CHECK(fuzz_one_line(err, n), "message has a control byte: \"%s\"", err);
    if (strncmp(err, "no rules in the text: ", 22) == 0) return;
    unsigned long line = 0;
    int used = 0;
    FUZZ_CHECK(sscanf(err, "line %lu: %n", &line, &used) == 1 && used > 0,
               "message does not start with the line: \"%s\"", err);
    FUZZ_CHECK(line >= 1 && line <= lines, "line %lu of %zu lines: \"%s\"", line, lines, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAXTEXT) size = MAXTEXT;
    const char *text = (const char *)data;
    size_t lines = lines_of(text, size);
    char e0[512], e1[512], e2[512], e3[512];
    size_t nr = 0, no = 0, nr0 = 0;
    int rc = sluice_rules_check(text, size, &nr, &no, e1, sizeof e1);
    FUZZ_CHECK(rc == 0 || rc == SLUICE_EINVAL, "check returned %d", rc);
    if (rc) check_message(e1, sizeof e1, lines);
    int rc0 = sluice_rules_check_flags(text, size, 0, &nr0, NULL, e0, sizeof e0);
    FUZZ_CHECK(rc0 == 0 || rc0 == SLUICE_EINVAL, "check_flags returned %d", rc0);
    if (rc) FUZZ_CHECK(rc0 == rc && strcmp(e0, e1) == 0, "check \"%s\", check_flags(0) \"%s\"", e1, e0);
    else if (nr == 0) FUZZ_CHECK(rc0 == SLUICE_EINVAL, "check_flags(0) accepted a text without rules");
    else FUZZ_CHECK(rc0 == 0 && nr0 == nr, "check_flags(0) %d, %zu rules", rc0, nr0);
    if (rc0) check_message(e0, sizeof e0, lines);
    if (big_tables(text, size)) return 0;

    for (unsigned flags = 0; flags <= SLUICE_RULES_ALLOW_EMPTY; flags += SLUICE_RULES_ALLOW_EMPTY) {
        int crc = flags ? rc : rc0;
        const char *ce = flags ? e1 : e0;
        sluice_rules *rs = sluice_rules_new(text, size, flags, e2, sizeof e2);
        if (crc) {
            FUZZ_CHECK(rs == NULL, "new accepted what check refused: \"%s\"", ce);
            FUZZ_CHECK(strcmp(ce, e2) == 0, "check said \"%s\", new \"%s\"", ce, e2);
            continue;
        }
        FUZZ_CHECK(rs != NULL, "check accepted what new refused: \"%s\"", e2);
        FUZZ_CHECK(sluice_rules_count(rs) == nr, "%zu rules, check said %zu", sluice_rules_count(rs), nr);
        for (size_t i = 0; i < nr; i++) {
            sluice_rule_info in;
            FUZZ_CHECK(sluice_rules_info(rs, i, &in) == 0, "no rule %zu", i);
            FUZZ_CHECK(sluice_rules_find(rs, in.name) == in.id, "find %s", in.name);
            sluice_rule_key k = {in.id, "k", 1};
            sluice_result res;
            FUZZ_CHECK(sluice_rules_decide_at(rs, &k, 1, 0, 0, &res, NULL) && res.error == 0,
                       "probe of %s refused", in.name);
        }
        sluice_rules_free(rs);
    }

    sluice_rules *run = sluice_rules_new("rule zz global \"fixed-window 1/s\"\n", 34, 0, NULL, 0);
    FUZZ_CHECK(run != NULL, "out of memory");
    int rrc = sluice_rules_reload_at(run, text, size, 1, e3, sizeof e3);
    if (rc0) {
        FUZZ_CHECK(rrc == SLUICE_EINVAL && strcmp(e0, e3) == 0, "reload %d \"%s\", check \"%s\"", rrc, e3, e0);
        FUZZ_CHECK(sluice_rules_generation(run) == 1 && sluice_rules_count(run) == 1,
                   "a refused reload changed the set");
    } else {
        FUZZ_CHECK(rrc == 0, "check accepted what reload refused: %d \"%s\"", rrc, e3);
        FUZZ_CHECK(sluice_rules_generation(run) == 2 && sluice_rules_count(run) == nr,
                   "reload: generation %llu, %zu rules",
                   (unsigned long long)sluice_rules_generation(run), sluice_rules_count(run));
    }
    sluice_rules_free(run);
    return 0;
}
