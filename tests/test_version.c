/* test_version.c -- the version macros, the version functions and the
 * shared library's name agree with the project's version.
 *
 * The reference is CMake's project version (EXPECT_VERSION, "MAJOR.MINOR.
 * PATCH", passed by tests/CMakeLists.txt), parsed here with sscanf: the
 * header's macros, SLUICE_VERSION_NUMBER, sluice_version() and
 * sluice_version_number() must all match it.  The test links libsluice.so
 * and checks, among the objects loaded into the process, that the library
 * was found under its SONAME, libsluice.so.SOVERSION (EXPECT_SONAME): the
 * policy in docs/install.md ("Versions and ABI").
 */
#define _GNU_SOURCE /* dl_iterate_phdr */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <link.h>
#include <stdio.h>
#include <string.h>

#include "sluice.h"

static void expected(int *major, int *minor, int *patch)
{
    char tail;
    assert_int_equal(sscanf(EXPECT_VERSION, "%d.%d.%d%c", major, minor, patch, &tail), 3);
    assert_true(*minor >= 0 && *minor < 100 && *patch >= 0 && *patch < 100);
}

static void test_macros(void **state)
{
    (void)state;
    int major, minor, patch;
    expected(&major, &minor, &patch);
    assert_int_equal(SLUICE_VERSION_MAJOR, major);
    assert_int_equal(SLUICE_VERSION_MINOR, minor);
    assert_int_equal(SLUICE_VERSION_PATCH, patch);
    assert_string_equal(SLUICE_VERSION_STRING, EXPECT_VERSION);
    assert_int_equal(SLUICE_VERSION_NUMBER, major * 10000 + minor * 100 + patch);
}

static void test_functions(void **state)
{
    (void)state;
    int major, minor, patch;
    expected(&major, &minor, &patch);
    assert_string_equal(sluice_version(), EXPECT_VERSION);
    assert_int_equal(sluice_version_number(), major * 10000 + minor * 100 + patch);
    assert_int_equal(sluice_version_number(), SLUICE_VERSION_NUMBER);
}

/* dl_iterate_phdr callback: counts loaded objects named .../EXPECT_SONAME. */
static int find_soname(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strcmp(base, EXPECT_SONAME) == 0) ++*(int *)data;
    return 0;
}

static void test_soname(void **state)
{
    (void)state;
    int found = 0;
    dl_iterate_phdr(find_soname, &found);
    if (found != 1) fprintf(stderr, "no loaded object is named %s\n", EXPECT_SONAME);
    assert_int_equal(found, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_macros),
        cmocka_unit_test(test_functions),
        cmocka_unit_test(test_soname),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
