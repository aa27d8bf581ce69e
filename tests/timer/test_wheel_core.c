/* test_wheel_core.c -- src/timer/wheel_core.h, the timing-wheel core shared by the
 * timer wheel (wheel.c) and the tables' reclaimer (table.c), driven directly.
 *
 * The harness keeps items (a tick each) on the core's lists the plainest way
 * -- an item records its list number; a list is the items that record it --
 * and drives the core both ways its users do:
 *
 *  - the timer wheel's way (mode P): items due after cur; advance(target)
 *    steps to every event <= target; an item found due fires;
 *  - the reclaimer's way (mode T): any tick (an earlier one counts as cur);
 *    advance(target) handles every tick < target, in steps cut short by a
 *    budget of visits and taken up again by the next call; then the
 *    current tick's slots are looked through.
 *
 * Checked against an independent reference -- a plain array of ticks, and
 * the level rule written as a loop over digits ("the highest base-64 digit
 * in which e and cur differ") rather than as the core's bit scan:
 *
 *  - the list of a tick at every level's edge (last tick of a block, first
 *    of the next, +-1), from aligned and unaligned cur, near 2^48, 2^63 and
 *    2^64;
 *  - every item handled exactly when cur reaches its tick (never early,
 *    never late), each re-filing to a lower level (or off the beyond list);
 *    after each advance, the handled set equal to the reference's, the
 *    occupancy words equal to the lists' emptiness, each pending item on
 *    the list the rule gives (or on a slot whose cascade was cut short,
 *    which then starts at cur), the beyond list's bound <= its ticks;
 *  - next(): a non-empty list, whose items all lie in the slot that starts
 *    at the tick returned;
 *  - random operations (file, remove, advance by little and by a lot) from
 *    cur = 0, 2^48 - small, 2^63 - small and 2^64 - small.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "timer/wheel_core.h"
#include "testutil.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NMAX 600
#define OFF UINT32_MAX /* an item on no list */

typedef struct item {
    uint64_t e;       /* its tick, as filed (mode T: raised to cur then) */
    uint32_t list;    /* the list it is on, or OFF */
    bool live;        /* filed and neither handled nor removed */
    bool handled;
    uint64_t at;      /* cur when handled */
    unsigned moves;   /* re-filings from a level to a lower one */
} item;

typedef struct harness {
    sluice__wcore c;
    item it[NMAX];
    unsigned n;
    unsigned cnt[SLUICE__WCORE_LISTS + 1]; /* live items per list */
    bool table;       /* mode T */
    uint64_t hlimit;  /* mode T: only ticks < hlimit are handled */
    unsigned steps;   /* in the current run */
    uint64_t rng;
} harness;

static uint64_t rnd(harness *h) { return tu_splitmix64(&h->rng); }

/* The reference rule, written as a loop over digits: the level is the
 * highest base-64 digit in which e and cur differ; 8 or more: beyond. */
static unsigned ref_level(uint64_t cur, uint64_t e)
{
    unsigned k = 0;
    for (unsigned d = 0; d < 11; d++) { /* 11 digits cover 64 bits */
        uint64_t a = d * 6 < 64 ? (e >> (d * 6)) & 63 : 0;
        uint64_t b = d * 6 < 64 ? (cur >> (d * 6)) & 63 : 0;
        if (a != b) k = d;
    }
    return k;
}

static uint32_t ref_list(uint64_t cur, uint64_t e)
{
    if (e < cur) e = cur;
    unsigned k = ref_level(cur, e);
    if (k >= 8) return SLUICE__WCORE_BEYOND;
    return k * 64 + (uint32_t)((e >> (6 * k)) & 63);
}

static bool list_empty(const harness *h, uint32_t li)
{
    return h->cnt[li] == 0;
}

static void file(harness *h, unsigned i)
{
    item *x = &h->it[i];
    uint32_t want = sluice__wcore_list(&h->c, x->e);
    uint32_t li = sluice__wcore_file(&h->c, x->e);
    assert_int_equal(li, ref_list(h->c.cur, x->e));
    assert_int_equal(li, want);
    x->list = li;
    h->cnt[li]++;
}

static void unlink_item(harness *h, unsigned i)
{
    uint32_t li = h->it[i].list;
    h->it[i].list = OFF;
    if (--h->cnt[li] == 0) sluice__wcore_vacate(&h->c, li);
}

static void handle(harness *h, unsigned i)
{
    item *x = &h->it[i];
    if (x->e != h->c.cur)
        fail_msg("item %u (tick %" PRIu64 ") handled at cur %" PRIu64, i, x->e, h->c.cur);
    unlink_item(h, i);
    x->live = false;
    x->handled = true;
    x->at = h->c.cur;
}

static unsigned add(harness *h, uint64_t e)
{
    assert_true(h->n < NMAX);
    unsigned i = h->n++;
    item *x = &h->it[i];
    memset(x, 0, sizeof *x);
    if (h->table && e < h->c.cur) e = h->c.cur;
    x->e = e;
    x->live = true;
    file(h, i);
    return i;
}

/* Whether item x is handled when visited: its tick has come (mode T: and is
 * one being handled; in a look at the current tick, it is filed there). */
static bool due_now(const harness *h, const item *x)
{
    return x->e <= h->c.cur && (!h->table || x->e < h->hlimit);
}

/* Visit item i of list li being emptied at cur: handle it when due, else
 * file it again, lower. */
static void visit(harness *h, unsigned i, uint32_t li)
{
    item *x = &h->it[i];
    if (due_now(h, x)) {
        handle(h, i);
        return;
    }
    unlink_item(h, i);
    file(h, i);
    if (li != SLUICE__WCORE_BEYOND) {
        x->moves++;
        assert_true(x->moves <= SLUICE__WCORE_LEVELS - 1); /* once per level at most */
        assert_true(x->list != SLUICE__WCORE_BEYOND);
        assert_true(sluice__wcore_level(x->list) < sluice__wcore_level(li));
    }
}

/* Empty list li (cur is its event), doing at most *budget visits. */
static void empty_list(harness *h, uint32_t li, unsigned *budget)
{
    /* each step empties a list or uses budget: a step that does neither
     * again and again is a wheel that never gets on */
    if (++h->steps > 64 * NMAX * SLUICE__WCORE_LEVELS) fail_msg("no progress at cur %" PRIu64, h->c.cur);
    if (li == SLUICE__WCORE_BEYOND) { /* detached first: it may take some back */
        bool on[NMAX];
        for (unsigned i = 0; i < h->n; i++) {
            on[i] = h->it[i].live && h->it[i].list == li;
            if (on[i]) h->it[i].list = OFF;
        }
        h->cnt[li] = 0;
        sluice__wcore_vacate(&h->c, li);
        for (unsigned i = 0; i < h->n; i++) {
            if (!on[i]) continue;
            item *x = &h->it[i];
            if (due_now(h, x)) {
                if (x->e != h->c.cur)
                    fail_msg("item %u (tick %" PRIu64 ") handled at cur %" PRIu64, i, x->e,
                             h->c.cur);
                x->live = false;
                x->handled = true;
                x->at = h->c.cur;
            } else {
                file(h, i);
            }
        }
        return;
    }
    for (unsigned i = 0; i < h->n && *budget; i++) {
        if (h->it[i].live && h->it[i].list == li) {
            if (*budget != UINT32_MAX) (*budget)--;
            visit(h, i, li);
        }
    }
}

static void check(const harness *h, bool settled)
{
    uint64_t bmin = UINT64_MAX;
    bool beyond = false;
    unsigned cnt[SLUICE__WCORE_LISTS + 1] = {0};
    for (unsigned i = 0; i < h->n; i++)
        if (h->it[i].live) cnt[h->it[i].list]++;
    for (uint32_t li = 0; li < SLUICE__WCORE_LISTS; li++) {
        bool bit = h->c.occ[li / 64] >> (li % 64) & 1;
        if (bit != (cnt[li] > 0)) fail_msg("list %u: occupancy bit %d", li, bit);
    }
    assert_memory_equal(cnt, h->cnt, sizeof cnt);
    for (unsigned i = 0; i < h->n; i++) {
        const item *x = &h->it[i];
        if (!x->live) continue;
        if (x->list == SLUICE__WCORE_BEYOND) {
            beyond = true;
            if (x->e < bmin) bmin = x->e;
        }
        uint32_t want = ref_list(h->c.cur, x->e);
        if (x->list == want) continue;
        /* else only a slot (or the beyond list) whose cascade was cut short
         * or not begun: it starts at cur */
        bool at_cur = x->list == SLUICE__WCORE_BEYOND
                          ? (h->c.beyond_min >> 48 << 48) == h->c.cur
                          : sluice__wcore_level(x->list) >= 1 &&
                                sluice__wcore_slot_tick(&h->c, x->list) == h->c.cur;
        if (settled || !at_cur)
            fail_msg("item %u (tick %" PRIu64 ") on list %u, not %u (cur %" PRIu64 ")", i, x->e,
                     x->list, want, h->c.cur);
    }
    assert_int_equal(h->c.beyond, beyond);
    if (beyond) assert_true(h->c.beyond_min <= bmin);

    /* next(): a non-empty list whose items lie in the slot starting at tick */
    uint64_t t;
    uint32_t li = sluice__wcore_next(&h->c, &t);
    bool any = false;
    for (unsigned i = 0; i < h->n; i++) any |= h->it[i].live;
    if (!any) {
        assert_true(li == SLUICE__WCORE_NONE);
        return;
    }
    assert_true(li != SLUICE__WCORE_NONE);
    assert_false(list_empty(h, li));
    assert_true(t >= h->c.cur);
    if (h->table == false && settled) assert_true(t > h->c.cur);
    for (unsigned i = 0; i < h->n; i++) {
        const item *x = &h->it[i];
        if (!x->live) continue;
        if (x->e < t) fail_msg("item %u due at %" PRIu64 " before the next event %" PRIu64, i, x->e, t);
        if (x->list != li || li == SLUICE__WCORE_BEYOND) continue;
        unsigned k = sluice__wcore_level(li);
        uint64_t width = (uint64_t)1 << (6 * k);
        assert_true(t % width == 0);
        assert_true(x->e - t < width);
    }
}

/* The reference: after advancing to `target`, the pending items are exactly
 * those of tick > target (mode P) or >= target (mode T), and every other
 * was handled when cur was its tick. */
static void check_done(const harness *h, uint64_t target)
{
    for (unsigned i = 0; i < h->n; i++) {
        const item *x = &h->it[i];
        if (!x->live && !x->handled) continue; /* removed */
        bool due = h->table ? x->e < target : x->e <= target;
        if (x->live && due)
            fail_msg("item %u (tick %" PRIu64 ") pending after advancing to %" PRIu64, i, x->e,
                     target);
        if (x->handled && x->at != x->e)
            fail_msg("item %u (tick %" PRIu64 ") handled at %" PRIu64, i, x->e, x->at);
        if (x->handled && x->e > target)
            fail_msg("item %u (tick %" PRIu64 ") handled before %" PRIu64, i, x->e, target);
    }
}

/* The timer wheel's advance: every event <= target, then cur = target. */
static void advance_p(harness *h, uint64_t target)
{
    uint32_t li;
    unsigned unlimited = UINT32_MAX;
    while ((li = sluice__wcore_step(&h->c, target)) != SLUICE__WCORE_NONE)
        empty_list(h, li, &unlimited);
    if (target > h->c.cur) h->c.cur = target;
    check(h, true);
    check_done(h, target);
}

/* The reclaimer's advance: every tick < target, at most `budget` visits;
 * true when it got there. */
static bool advance_t(harness *h, uint64_t target, unsigned budget)
{
    h->hlimit = target;
    while (h->c.cur < target && budget) {
        uint32_t li = sluice__wcore_step(&h->c, target - 1);
        if (li == SLUICE__WCORE_NONE) {
            h->c.cur = target;
            break;
        }
        empty_list(h, li, &budget);
    }
    check(h, false);
    return h->c.cur >= target;
}

/* The reclaimer's look at the current tick: cascades into cur, after which
 * the level-0 slot of cur holds exactly the items of tick cur. */
static void sweep_t(harness *h)
{
    uint32_t li;
    unsigned unlimited = UINT32_MAX;
    h->hlimit = h->c.cur;
    while ((li = sluice__wcore_step(&h->c, h->c.cur)) != SLUICE__WCORE_NONE &&
           sluice__wcore_level(li) >= 1)
        empty_list(h, li, &unlimited);
    check(h, true);
    uint32_t slot0 = (uint32_t)(h->c.cur & 63);
    for (unsigned i = 0; i < h->n; i++) {
        const item *x = &h->it[i];
        if (x->live) assert_int_equal(x->e == h->c.cur, x->list == slot0);
    }
}

static void reset(harness *h, uint64_t cur, bool table, uint64_t seed)
{
    memset(h, 0, sizeof *h);
    sluice__wcore_init(&h->c, cur);
    h->table = table;
    h->rng = seed;
}

/* ---- the level rule at every edge --------------------------------------- */

static void test_level_edges(void **state)
{
    (void)state;
    const uint64_t curs[] = {0,
                             1,
                             63,
                             64,
                             4095,
                             ((uint64_t)1 << 48) - 1,
                             (uint64_t)1 << 48,
                             ((uint64_t)1 << 63) - 1,
                             (uint64_t)1 << 63,
                             UINT64_MAX - ((uint64_t)1 << 48),
                             UINT64_MAX - 1,
                             0x123456789abcdefULL};
    sluice__wcore c;
    for (size_t ci = 0; ci < sizeof curs / sizeof *curs; ci++) {
        uint64_t cur = curs[ci];
        sluice__wcore_init(&c, cur);
        for (unsigned k = 0; k <= 10; k++) {
            unsigned sh = 6 * k;
            /* the first tick of the next block of 64^(k+1) (and +-1), cur +
             * 64^k +-1, the last tick of cur's block of 64^k */
            uint64_t cands[8];
            unsigned nc = 0;
            if (sh + 6 < 64) {
                uint64_t blk = (uint64_t)1 << (sh + 6);
                uint64_t next = (cur & ~(blk - 1)) + blk;
                if (next > cur) {
                    cands[nc++] = next;
                    cands[nc++] = next - 1;
                    if (next + 1 > next) cands[nc++] = next + 1;
                }
            }
            if (sh < 64) {
                uint64_t w = (uint64_t)1 << sh;
                if (cur + w > cur) cands[nc++] = cur + w;
                if (cur + w - 1 >= cur && cur + w > cur) cands[nc++] = cur + w - 1;
                if (cur + w + 1 > cur + w && cur + w > cur) cands[nc++] = cur + w + 1;
                cands[nc++] = cur | (w - 1);
            }
            cands[nc++] = cur;
            for (unsigned j = 0; j < nc; j++) {
                uint64_t e = cands[j];
                uint32_t li = sluice__wcore_list(&c, e);
                if (li != ref_list(cur, e))
                    fail_msg("cur %" PRIx64 " e %" PRIx64 ": list %u, reference %u", cur, e, li,
                             ref_list(cur, e));
                if (li != SLUICE__WCORE_BEYOND && e > cur) { /* its slot starts after cur */
                    uint64_t st = sluice__wcore_slot_tick(&c, li);
                    assert_true(st > cur);
                    assert_true(st <= e);
                }
            }
        }
        /* a tick before cur counts as cur */
        if (cur > 0) assert_int_equal(sluice__wcore_list(&c, cur - 1), (uint32_t)(cur & 63));
        assert_int_equal(sluice__wcore_list(&c, 0), (uint32_t)(cur & 63));
    }
    /* examples by hand */
    sluice__wcore_init(&c, 0);
    assert_int_equal(sluice__wcore_list(&c, 63), 63);
    assert_int_equal(sluice__wcore_list(&c, 64), 64 + 1);
    assert_int_equal(sluice__wcore_list(&c, 4095), 64 + 63);
    assert_int_equal(sluice__wcore_list(&c, 4096), 128 + 1);
    assert_int_equal(sluice__wcore_list(&c, ((uint64_t)1 << 48) - 1), 7 * 64 + 63);
    assert_int_equal(sluice__wcore_list(&c, (uint64_t)1 << 48), SLUICE__WCORE_BEYOND);
    sluice__wcore_init(&c, 63);
    assert_int_equal(sluice__wcore_list(&c, 64), 64 + 1); /* 1 tick away, level 1 */
    sluice__wcore_init(&c, ((uint64_t)1 << 48) - 1);
    assert_int_equal(sluice__wcore_list(&c, (uint64_t)1 << 48), SLUICE__WCORE_BEYOND);
}

/* ---- one item at each edge, fired exactly ------------------------------- */

static void edge_run(uint64_t cur, bool table)
{
    static harness h;
    for (unsigned k = 0; k <= 9; k++) {
        unsigned sh = 6 * k;
        uint64_t es[6];
        unsigned ne = 0;
        if (sh + 6 < 64) {
            uint64_t blk = (uint64_t)1 << (sh + 6);
            uint64_t next = (cur & ~(blk - 1)) + blk;
            if (next > cur) {
                es[ne++] = next;
                es[ne++] = next - 1;
                if (next + 1 > next) es[ne++] = next + 1;
            }
        }
        if (sh < 64 && cur + ((uint64_t)1 << sh) > cur) es[ne++] = cur + ((uint64_t)1 << sh);
        for (unsigned j = 0; j < ne; j++) {
            uint64_t e = es[j];
            if (e <= cur) continue;
            reset(&h, cur, table, e);
            add(&h, e);
            add(&h, e); /* twice, and one a tick later and earlier */
            if (e + 1 > e) add(&h, e + 1);
            if (e - 1 > cur) add(&h, e - 1);
            check(&h, true);
            if (table) {
                /* one short of handling it, then handled */
                while (!advance_t(&h, e, 3)) {}
                check_done(&h, e);
                sweep_t(&h);
                if (e + 1 > e) {
                    while (!advance_t(&h, e + 1, 3)) {}
                    check_done(&h, e + 1);
                }
            } else {
                advance_p(&h, e - 1);
                advance_p(&h, e);
                if (e + 1 > e) advance_p(&h, e + 1);
            }
        }
    }
}

static void test_edges_fire_exactly(void **state)
{
    (void)state;
    const uint64_t curs[] = {0, 1, 62, 64, ((uint64_t)1 << 48) - 2, ((uint64_t)1 << 63) - 1,
                             (uint64_t)1 << 63, UINT64_MAX - ((uint64_t)1 << 49),
                             UINT64_MAX - 70, 0x0123456789abcdefULL};
    for (size_t i = 0; i < sizeof curs / sizeof *curs; i++) {
        edge_run(curs[i], false);
        edge_run(curs[i], true);
    }
}

/* ---- beyond the last level ---------------------------------------------- */

static void test_beyond(void **state)
{
    (void)state;
    static harness h;
    reset(&h, 5, false, 1);
    const uint64_t B = (uint64_t)1 << 48;
    unsigned a = add(&h, 3 * B + 7);
    add(&h, B);          /* the first tick of the next block: beyond */
    add(&h, 2 * B - 1);  /* beyond, re-filed onto level 7 at B */
    add(&h, UINT64_MAX); /* the end of time */
    uint64_t t;
    assert_int_equal(sluice__wcore_next(&h.c, &t), SLUICE__WCORE_BEYOND);
    assert_true(t == B);
    assert_true(h.c.beyond_min == B);
    advance_p(&h, B - 1);
    advance_p(&h, B);
    assert_true(h.it[1].handled);
    assert_int_equal(h.it[2].list, 7 * 64 + 63); /* digit 7 of 2B - 1 is 63 */
    assert_true(h.c.beyond_min == 3 * B + 7); /* the exact bound again */
    /* removing the earliest beyond item leaves a lower bound */
    unlink_item(&h, a);
    h.it[a].live = false;
    check(&h, true);
    advance_p(&h, 3 * B + 7);
    advance_p(&h, UINT64_MAX - 1);
    assert_false(h.it[3].handled);
    advance_p(&h, UINT64_MAX);
    assert_true(h.it[3].handled);
    assert_int_equal(sluice__wcore_next(&h.c, &t), SLUICE__WCORE_NONE);

    /* the reclaimer's way: cur stops on the first tick of the next block,
     * not yet handled; the beyond list's re-filing then comes before a
     * later level-0 slot */
    reset(&h, B - 2, true, 3);
    unsigned far = add(&h, B);
    assert_true(advance_t(&h, B, UINT32_MAX));
    assert_true(h.c.cur == B);
    add(&h, B + 5);
    assert_int_equal(sluice__wcore_next(&h.c, &t), SLUICE__WCORE_BEYOND);
    assert_true(t == B);
    sweep_t(&h); /* checks that level 0's slot of cur holds it */
    assert_int_equal(h.it[far].list, 0);
    assert_true(advance_t(&h, B + 10, UINT32_MAX));
    check_done(&h, B + 10);
}

/* ---- a cascade cut short comes first ------------------------------------ */

static void test_cut_cascade(void **state)
{
    (void)state;
    static harness h;
    reset(&h, 0, true, 2);
    for (unsigned i = 0; i < 10; i++) add(&h, 4096 + 64 * i + i); /* level 2, slot 1 */
    add(&h, 4096 + 5000);                                        /* level 2, slot 2 */
    assert_false(advance_t(&h, 1000000, 4));    /* cut short at 4096 */
    assert_true(h.c.cur == 4096);
    uint64_t t;
    uint32_t li = sluice__wcore_next(&h.c, &t);
    assert_int_equal(li, 2 * 64 + 1); /* before the level-0 / level-1 items it brought down */
    assert_true(t == 4096);
    add(&h, 4096);  /* a tick at cur: level 0's slot of cur */
    li = sluice__wcore_next(&h.c, &t);
    assert_int_equal(li, 2 * 64 + 1); /* the cut cascade still comes first */
    while (!advance_t(&h, 1000000, 2)) {}
    check_done(&h, 1000000);
}

/* ---- random operations against the reference ---------------------------- */

static uint64_t pick_tick(harness *h)
{
    uint64_t cur = h->c.cur;
    unsigned k = (unsigned)(rnd(h) % 10);
    uint64_t w = (uint64_t)1 << (6 * (k < 8 ? k : 7));
    uint64_t e;
    switch (rnd(h) % 8) {
    case 0: e = cur + rnd(h) % 64; break;
    case 1: e = cur + rnd(h) % (w * 64); break;
    case 2: { /* the edge of a block of 64^(k+1) */
        uint64_t blk = w * 64;
        e = (cur & ~(blk - 1)) + blk + (rnd(h) % 3) - 1;
        break;
    }
    case 3: e = cur + w + (rnd(h) % 3) - 1; break;
    case 4: e = rnd(h); break;
    case 5: e = UINT64_MAX - rnd(h) % 4096; break;
    case 6: e = ((uint64_t)1 << 63) + rnd(h) % 8192 - 4096; break;
    default: e = cur + rnd(h) % ((uint64_t)1 << 50); break;
    }
    if (!h->table && e <= cur) { /* the timer wheel files only ticks after cur */
        e = cur + 1 + rnd(h) % 100;
        if (e <= cur) e = UINT64_MAX;
    }
    return e;
}

static uint64_t pick_target(harness *h)
{
    uint64_t cur = h->c.cur, t;
    switch (rnd(h) % 6) {
    case 0: t = cur + rnd(h) % 70; break;
    case 1: { /* to the next event, or one short */
        uint64_t e;
        if (sluice__wcore_next(&h->c, &e) == SLUICE__WCORE_NONE) e = cur + 1;
        t = e - (rnd(h) & 1);
        break;
    }
    case 2: t = cur + rnd(h) % ((uint64_t)1 << (6 * (1 + rnd(h) % 8))); break;
    case 3: t = cur + (rnd(h) >> (rnd(h) % 64)); break;
    case 4: t = ((cur >> 12) + 1) << 12; break;
    default: t = cur + rnd(h) % 5000; break;
    }
    if (t < cur) t = UINT64_MAX; /* wrapped: the end of time */
    return t;
}

static void random_run(uint64_t cur, bool table, uint64_t seed, unsigned ops)
{
    static harness h;
    reset(&h, cur, table, seed);
    for (unsigned op = 0; op < ops; op++) {
        unsigned r = (unsigned)(rnd(&h) % 10);
        if (r < 5 && h.n < NMAX) {
            if (!table && h.c.cur == UINT64_MAX) continue;
            add(&h, pick_tick(&h));
        } else if (r < 7 && h.n) {
            unsigned i = (unsigned)(rnd(&h) % h.n);
            if (h.it[i].live) {
                unlink_item(&h, i);
                h.it[i].live = false;
            }
        } else {
            uint64_t t = pick_target(&h);
            if (table) {
                if (t > ((uint64_t)1 << 63)) t = h.c.cur + rnd(&h) % 100000; /* table times */
                unsigned budget = (unsigned)(1 + rnd(&h) % 8);
                bool got = advance_t(&h, t, budget);
                if (rnd(&h) & 1) {
                    while (!got) got = advance_t(&h, t, UINT32_MAX);
                    check_done(&h, t);
                    if (rnd(&h) & 1) sweep_t(&h);
                }
            } else {
                advance_p(&h, t);
            }
        }
        if (h.n == NMAX) { /* start over with the handled ones gone */
            unsigned m = 0;
            for (unsigned i = 0; i < h.n; i++)
                if (h.it[i].live) h.it[m++] = h.it[i];
            h.n = m;
        }
        check(&h, !table);
    }
}

static void test_random(void **state)
{
    (void)state;
    const uint64_t curs[] = {0, ((uint64_t)1 << 48) - 1000, ((uint64_t)1 << 63) - 100000,
                             UINT64_MAX - ((uint64_t)1 << 40), 0x0123456789abcdefULL};
    for (size_t i = 0; i < sizeof curs / sizeof *curs; i++) {
        for (uint64_t seed = 1; seed <= 6; seed++) {
            random_run(curs[i], false, seed * 7919 + i, 4000);
            if (curs[i] < ((uint64_t)1 << 63)) random_run(curs[i], true, seed * 104729 + i, 4000);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_level_edges),
        cmocka_unit_test(test_edges_fire_exactly),
        cmocka_unit_test(test_beyond),
        cmocka_unit_test(test_cut_cascade),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
