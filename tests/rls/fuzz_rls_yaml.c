/* fuzz_rls_yaml.c -- libFuzzer target: sluice-rls's YAML loader.
 *
 * The input is a config file.  Checks: it is accepted (0) or refused (-1)
 * with a one-line reason that starts "fuzz.yaml:LINE: "; a refused file
 * leaves the config as it was (its count of limits); an accepted one
 * answers lookups of the keys it might hold.  Leaks are the sanitizer's to
 * find.  The corpus replays as the ctest rls_fuzz_yaml_corpus.
 */
#include <string.h>

#include "config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rls_config *cfg = rls_config_new(16);
    FUZZ_CHECK(cfg != NULL, "rls_config_new");
    char err[512];
    int rc = rls_config_add_text(cfg, "fuzz.yaml", (const char *)data, size, err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == -1, "rc %d", rc);
    if (rc < 0) {
        FUZZ_CHECK(strncmp(err, "fuzz.yaml:", 10) == 0 && err[10] >= '0' && err[10] <= '9', "reason '%s'", err);
        FUZZ_CHECK(strchr(err, '\n') == NULL, "a reason of several lines: '%s'", err);
        FUZZ_CHECK(rls_config_limits(cfg) == 0 && rls_config_domains(cfg) == 0, "a refused file left %zu limits",
                   rls_config_limits(cfg));
    } else {
        static const char *const k[] = {"key", "a", "b"}, *const v[] = {"value", "x", ""};
        size_t kl[] = {3, 1, 1}, vl[] = {5, 1, 0};
        for (size_t n = 1; n <= 3; n++)
            (void)rls_config_find(cfg, "d", 1, k, kl, v, vl, n);
    }
    rls_config_free(cfg);
    return 0;
}
