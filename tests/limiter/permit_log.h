/* permit_log.h -- what the tests of queued permit acquires share
 * (test_permit.c: a limit's own queue; test_conc_table.c: a table key's):
 * a log of the callbacks, in the order they came, with the permit each one
 * handed over and the wheel's time, and a wheel to run them on.
 *
 * Include after <cmocka.h> and <sluice.h>: a callback the library must not
 * make (a permit with an error, none with success, more than the log
 * holds) fails the test at once.
 */
#ifndef SLUICE_TESTS_PERMIT_LOG_H
#define SLUICE_TESTS_PERMIT_LOG_H

typedef struct {
    uint64_t id[64];
    int status[64];
    sluice_permit pm[64];
    uint64_t at[64];
    size_t n;
} alog;

/* A sluice_permit_fn: arg is the alog. */
static void alog_fn(void *arg, uint64_t id, int status, sluice_permit *pm, uint64_t now)
{
    alog *l = arg;
    assert_true(l->n < 64);
    l->id[l->n] = id;
    l->status[l->n] = status;
    l->pm[l->n] = pm ? *pm : (sluice_permit){0};
    if (status == 0) assert_non_null(pm);
    else assert_null(pm);
    l->at[l->n] = now;
    l->n++;
}

/* A wheel of 1 us ticks, room for 1024 timers, its time starting at 0. */
static sluice_wheel *mkwheel(void)
{
    char err[256];
    sluice_wheel *w = sluice_wheel_new(1000, 1024, 0, err, sizeof err);
    if (!w) fail_msg("%s", err);
    return w;
}

#endif
