/* tzif.c -- a TZif reader (RFC 8536) and the local-time queries on it.
 *
 * Sections: the civil calendar (days from and to y-m-d); the footer's
 * POSIX TZ rule (parse_posix, rule_day, footer_offset, footer_next); the
 * TZif image (sluice__tz_parse); the interned zones (sluice__tz_load);
 * the queries (sluice__tz_offset, _next_change, _first_reach).
 *
 * Design.  A zone is a sorted list of transitions (UTC seconds, each with
 * the offset in effect from it on), the offset before the first one (the
 * first standard-time type, as zic means it and Python's zoneinfo reads it)
 * and the footer rule, which gives the offset after the last transition
 * (RFC 8536 section 3.3; POSIX TZ with the RFC's extensions: hours up to
 * 167 and negative in a rule's time, <+03>-style quoted names).  Only the
 * version-2+ 64-bit block is used; the version-1 block is skipped by its
 * counts.  Leap-second ("right/") zones are refused: their times are not
 * POSIX seconds.
 *
 * Hostile input.  A TZif file comes from outside the process: every count
 * is checked against the image's length before anything is read (sizes
 * computed in 64 bits from 32-bit counts: no overflow), every index against
 * its table, transitions must ascend strictly, offsets lie within
 * -89999..93599 s (RFC 8536 3.2), and no 52-hour span may hold more than
 * SPAN_MAX changes, which bounds the loop of sluice__tz_first_reach.
 *
 * Nothing here reads the process's TZ or calls localtime (global state,
 * not thread-safe): the offsets are computed from the file alone.  The
 * footer rule is evaluated for the local standard year of the instant and
 * its neighbours, so any year works in O(1).
 */
#define _GNU_SOURCE /* O_CLOEXEC */
#include "base/tzif.h"

#include "base/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DAY 86400
#define OFF_MIN (-89999)
#define OFF_MAX 93599
#define REACH 93600       /* |offset| < REACH: 26 hours */
#define SPAN_MAX 48       /* changes in any 2 * REACH seconds */
#define FILE_MAX (1 << 20) /* the largest TZif file read (real ones: < 4 KiB) */

/* ---- the civil calendar ------------------------------------------------- */

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b < 0); }

int64_t sluice__days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const int64_t era = floor_div(y, 400);
    const int64_t yoe = y - era * 400;                                 /* 0..399 */
    const int64_t doy = (153 * (int64_t)(m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* 0..365 */
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;         /* 0..146096 */
    return era * 146097 + doe - 719468;
}

void sluice__civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    const int64_t era = floor_div(z, 146097);
    const int64_t doe = z - era * 146097;                                 /* 0..146096 */
    const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* 0..399 */
    const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);          /* 0..365 */
    const int64_t mp = (5 * doy + 2) / 153;                               /* 0..11 */
    *d = (unsigned)(doy - (153 * mp + 2) / 5 + 1);
    *m = (unsigned)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static bool is_leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static unsigned month_days(int64_t y, unsigned m)
{
    static const unsigned char n[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : n[m - 1];
}

/* ---- the footer: a POSIX TZ rule ---------------------------------------- */

typedef struct tzrule {
    char kind;  /* 'J' (1..365, no Feb 29), 'D' (0..365), 'M' (month.week.day) */
    uint16_t a; /* J, D: the day; M: the month 1..12 */
    uint8_t w, d; /* M: week 1..5, weekday 0..6 (Sunday 0) */
    int32_t time; /* seconds after local midnight, -167h .. 167h */
} tzrule;

struct sluice__tz {
    char name[SLUICE__TZ_NAME_MAX + 1];
    uint32_t ntrans;
    int64_t *trans; /* ascending, UTC seconds */
    int32_t *off;   /* the offset from trans[i] on */
    int32_t before; /* the offset before trans[0] */
    bool footer;    /* a rule applies after the last transition */
    bool dst;       /* the rule has daylight time */
    int32_t std_off, dst_off;
    tzrule start, end;
    sluice__tz_win wins[SLUICE__TZ_WINS]; /* alg/calendar.c's cache */
    /* interning (sluice__tz_load) */
    unsigned char *image;
    size_t nimage;
    struct sluice__tz *next;
};

typedef struct cursor {
    const char *s, *e;
} cursor;

static bool cur_digit(const cursor *c) { return c->s < c->e && *c->s >= '0' && *c->s <= '9'; }

/* Up to 3 digits: a number 0..999, or -1 when there is no digit. */
static int cur_num(cursor *c)
{
    if (!cur_digit(c)) return -1;
    int v = 0;
    for (int i = 0; i < 3 && cur_digit(c); i++) v = v * 10 + (*c->s++ - '0');
    return cur_digit(c) ? -1 : v;
}

static bool parse_name(cursor *c)
{
    size_t n = 0;
    if (c->s < c->e && *c->s == '<') {
        c->s++;
        while (c->s < c->e && *c->s != '>') {
            char ch = *c->s++;
            if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                  (ch >= '0' && ch <= '9') || ch == '+' || ch == '-'))
                return false;
            n++;
        }
        if (c->s == c->e) return false;
        c->s++;
        return n >= 3;
    }
    while (c->s < c->e && ((*c->s >= 'A' && *c->s <= 'Z') || (*c->s >= 'a' && *c->s <= 'z'))) {
        c->s++;
        n++;
    }
    return n >= 3;
}

/* [+-]hh[:mm[:ss]] with hh <= maxh: seconds, or false. */
static bool parse_hms(cursor *c, int maxh, int32_t *out)
{
    int sign = 1;
    if (c->s < c->e && (*c->s == '+' || *c->s == '-')) sign = *c->s++ == '-' ? -1 : 1;
    int h = cur_num(c), mi = 0, se = 0;
    if (h < 0 || h > maxh) return false;
    if (c->s < c->e && *c->s == ':') {
        c->s++;
        if ((mi = cur_num(c)) < 0 || mi > 59) return false;
        if (c->s < c->e && *c->s == ':') {
            c->s++;
            if ((se = cur_num(c)) < 0 || se > 59) return false;
        }
    }
    *out = sign * (h * 3600 + mi * 60 + se);
    return true;
}

static bool parse_rule(cursor *c, tzrule *r)
{
    int v;
    if (c->s < c->e && *c->s == 'J') {
        c->s++;
        if ((v = cur_num(c)) < 1 || v > 365) return false;
        *r = (tzrule){.kind = 'J', .a = (uint16_t)v};
    } else if (c->s < c->e && *c->s == 'M') {
        c->s++;
        int m = cur_num(c), w, d;
        if (m < 1 || m > 12 || c->s == c->e || *c->s++ != '.') return false;
        if ((w = cur_num(c)) < 1 || w > 5 || c->s == c->e || *c->s++ != '.') return false;
        if ((d = cur_num(c)) < 0 || d > 6) return false;
        *r = (tzrule){.kind = 'M', .a = (uint16_t)m, .w = (uint8_t)w, .d = (uint8_t)d};
    } else {
        if ((v = cur_num(c)) < 0 || v > 365) return false;
        *r = (tzrule){.kind = 'D', .a = (uint16_t)v};
    }
    r->time = 7200;
    if (c->s < c->e && *c->s == '/') {
        c->s++;
        return parse_hms(c, 167, &r->time);
    }
    return true;
}

/* std offset [dst [offset] ,rule,rule]; an empty string: no rule. */
static bool parse_posix(sluice__tz *z, const char *s, size_t n)
{
    cursor c = {s, s + n};
    if (n == 0) return true;
    int32_t v;
    if (!parse_name(&c) || !parse_hms(&c, 24, &v)) return false;
    z->footer = true;
    z->std_off = z->dst_off = -v;
    if (c.s == c.e) return true;
    if (!parse_name(&c)) return false;
    z->dst = true;
    z->dst_off = z->std_off + 3600;
    if (c.s < c.e && *c.s != ',') {
        if (!parse_hms(&c, 24, &v)) return false;
        z->dst_off = -v;
    }
    if (c.s == c.e || *c.s++ != ',' || !parse_rule(&c, &z->start)) return false;
    if (c.s == c.e || *c.s++ != ',' || !parse_rule(&c, &z->end)) return false;
    return c.s == c.e && z->dst_off >= OFF_MIN && z->dst_off <= OFF_MAX;
}

/* The day (since the epoch) on which rule r falls in year y. */
static int64_t rule_day(const tzrule *r, int64_t y)
{
    const int64_t jan1 = sluice__days_from_civil(y, 1, 1);
    if (r->kind == 'J') return jan1 + r->a - 1 + (is_leap(y) && r->a >= 60);
    if (r->kind == 'D') return jan1 + r->a;
    const int64_t first = sluice__days_from_civil(y, r->a, 1);
    const int64_t wd = ((first + 4) % 7 + 7) % 7; /* 1970-01-01 was a Thursday */
    int64_t day = first + (r->d - wd + 7) % 7 + 7 * (r->w - 1);
    while (day >= first + month_days(y, r->a)) day -= 7; /* at most once */
    return day;
}

/* The instants (UTC) at which daylight time starts and ends in year y. */
static void rule_year(const sluice__tz *z, int64_t y, int64_t *s, int64_t *e)
{
    *s = rule_day(&z->start, y) * DAY + z->start.time - z->std_off;
    *e = rule_day(&z->end, y) * DAY + z->end.time - z->dst_off;
}

static int64_t year_of(int64_t u)
{
    int64_t y;
    unsigned m, d;
    sluice__civil_from_days(floor_div(u, DAY), &y, &m, &d);
    return y;
}

static bool footer_is_dst(const sluice__tz *z, int64_t u)
{
    int64_t s, e;
    rule_year(z, year_of(u + z->std_off), &s, &e);
    return s < e ? s <= u && u < e : !(e <= u && u < s);
}

static int32_t footer_offset(const sluice__tz *z, int64_t u)
{
    return z->dst && footer_is_dst(z, u) ? z->dst_off : z->std_off;
}

static int64_t footer_next(const sluice__tz *z, int64_t u)
{
    if (!z->dst) return INT64_MAX;
    int64_t best = INT64_MAX;
    const int64_t y = year_of(u + z->std_off);
    for (int64_t k = y - 1; k <= y + 2; k++) {
        int64_t s, e;
        rule_year(z, k, &s, &e);
        if (s > u && s < best) best = s;
        if (e > u && e < best) best = e;
    }
    return best;
}

/* ---- the TZif image ------------------------------------------------------ */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static int64_t be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

void sluice__tz_free(sluice__tz *z)
{
    if (!z) return;
    sluice__free(z->trans);
    sluice__free(z->off);
    sluice__free(z->image);
    sluice__free(z);
}

#define FAIL(...)                                \
    do {                                         \
        sluice__errf(err, errlen, __VA_ARGS__);  \
        sluice__tz_free(z);                      \
        return NULL;                             \
    } while (0)

sluice__tz *sluice__tz_parse(const unsigned char *buf, size_t n, char *err, size_t errlen)
{
    sluice__tz *z = sluice__calloc(1, sizeof *z);
    if (!z) FAIL("out of memory");
    if (n < 44 || memcmp(buf, "TZif", 4) != 0) FAIL("not a TZif file");
    if (buf[4] < '2') FAIL("TZif version 1 (no 64-bit data): version 2 or later needed");
    /* isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt */
    uint64_t c[6];
    for (int i = 0; i < 6; i++) c[i] = be32(buf + 20 + 4 * i);
    const uint64_t v1 = c[3] * 5 + c[4] * 6 + c[5] + c[2] * 8 + c[1] + c[0];
    if (v1 > n || n - v1 < 88) FAIL("TZif file truncated in its version-1 block");
    const unsigned char *h = buf + 44 + v1;
    if (memcmp(h, "TZif", 4) != 0 || h[4] < '2') FAIL("TZif file without its version-2 header");
    for (int i = 0; i < 6; i++) c[i] = be32(h + 20 + 4 * i);
    const uint64_t isut = c[0], isstd = c[1], leap = c[2], timecnt = c[3], typecnt = c[4],
                   charcnt = c[5];
    if (typecnt == 0 || typecnt > 256 || charcnt == 0 || (isut && isut != typecnt) ||
        (isstd && isstd != typecnt))
        FAIL("TZif file with bad counts");
    if (leap) FAIL("TZif file with leap seconds (a right/ zone): not supported");
    const size_t rest = n - 88 - (size_t)v1;
    const uint64_t v2 = timecnt * 9 + typecnt * 6 + charcnt + isstd + isut;
    if (v2 > rest) FAIL("TZif file truncated in its version-2 block");
    const unsigned char *pt = h + 44, *pi = pt + 8 * timecnt, *py = pi + timecnt;
    int32_t toff[256];
    bool tdst[256];
    for (uint64_t i = 0; i < typecnt; i++) {
        const int32_t o = (int32_t)be32(py + 6 * i);
        if (o < OFF_MIN || o > OFF_MAX || py[6 * i + 4] > 1 || py[6 * i + 5] >= charcnt)
            FAIL("TZif file with a bad local time type");
        toff[i] = o;
        tdst[i] = py[6 * i + 4];
    }
    z->before = toff[0];
    for (uint64_t i = 0; i < typecnt; i++)
        if (!tdst[i]) {
            z->before = toff[i];
            break;
        }
    z->ntrans = (uint32_t)timecnt;
    z->trans = sluice__calloc(timecnt, sizeof *z->trans);
    z->off = sluice__calloc(timecnt, sizeof *z->off);
    if (!z->trans || !z->off) FAIL("out of memory");
    for (uint64_t i = 0; i < timecnt; i++) {
        z->trans[i] = be64(pt + 8 * i);
        if (i && z->trans[i] <= z->trans[i - 1]) FAIL("TZif file with transitions out of order");
        if (pi[i] >= typecnt) FAIL("TZif file with a bad type index");
        z->off[i] = toff[pi[i]];
        /* SPAN_MAX changes at most in any 2 * REACH seconds */
        if (i >= SPAN_MAX && z->trans[i - SPAN_MAX] < INT64_MAX - 2 * REACH &&
            z->trans[i] < z->trans[i - SPAN_MAX] + 2 * REACH)
            FAIL("TZif file with too many transitions in two days");
    }
    /* the footer: \n TZ \n */
    const unsigned char *f = h + 44 + v2, *end = buf + n;
    if (f < end) {
        if (*f != '\n') FAIL("TZif file with a bad footer");
        const unsigned char *nl = memchr(f + 1, '\n', (size_t)(end - f - 1));
        if (!nl) FAIL("TZif file with an unterminated footer");
        if (!parse_posix(z, (const char *)f + 1, (size_t)(nl - f - 1)))
            FAIL("TZif file with a bad footer rule \"%.*s\"", (int)(nl - f - 1 > 48 ? 48 : nl - f - 1), f + 1);
    }
    return z;
}

/* ---- the interned zones ------------------------------------------------- */

static pthread_mutex_t zones_lock = PTHREAD_MUTEX_INITIALIZER;
static sluice__tz *zones; /* every zone loaded, for the life of the process */
static unsigned nzones;   /* their number: at most ZONES_MAX */
#define ZONES_MAX 4096    /* names times versions of a file; tzdata has ~600 */

static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n > SLUICE__TZ_NAME_MAX || s[0] == '/' || s[0] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '+' || c == '/' || c == '.'))
            return false;
        if (c == '.' && i + 1 < n && s[i + 1] == '.') return false;
    }
    return true;
}

/* Read at most FILE_MAX bytes of path into a new buffer. */
static unsigned char *read_file(const char *path, size_t *n, int *e)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *e = errno;
        return NULL;
    }
    struct stat sb;
    unsigned char *b = NULL;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > FILE_MAX) {
        *e = EINVAL;
        goto out;
    }
    b = sluice__malloc((size_t)sb.st_size + 1);
    if (!b) {
        *e = ENOMEM;
        goto out;
    }
    size_t got = 0;
    for (int i = 0; i < 64 && got < (size_t)sb.st_size; i++) { /* bounded */
        const ssize_t r = read(fd, b + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    *n = got;
out:
    close(fd);
    return b;
}

const sluice__tz *sluice__tz_load(const char *name, size_t namelen, char *err, size_t errlen)
{
    const int show = (int)(namelen > 48 ? 48 : namelen);
    if (!name_ok(name, namelen)) {
        sluice__errf(err, errlen, "bad zone \"%.*s\": expected an IANA name such as Europe/Paris or UTC",
                     show, name);
        return NULL;
    }
    const char *dir = getenv("TZDIR");
    if (!dir || !*dir) dir = "/usr/share/zoneinfo";
    char path[4096];
    const int pn = snprintf(path, sizeof path, "%s/%.*s", dir, (int)namelen, name);
    if (pn < 0 || (size_t)pn >= sizeof path) {
        sluice__errf(err, errlen, "unknown zone \"%.*s\": path too long", show, name);
        return NULL;
    }
    size_t n = 0;
    int e = 0;
    unsigned char *img = read_file(path, &n, &e);
    if (!img) {
        sluice__errf(err, errlen, "unknown zone \"%.*s\": %s", show, name,
                     e == ENOENT || e == ENOTDIR ? "no such zone in the tzdata"
                     : e == ENOMEM             ? "out of memory"
                                               : "not a readable TZif file");
        return NULL;
    }
    pthread_mutex_lock(&zones_lock);
    for (sluice__tz *z = zones; z; z = z->next)
        if (strlen(z->name) == namelen && memcmp(z->name, name, namelen) == 0 &&
            z->nimage == n && memcmp(z->image, img, n) == 0) {
            pthread_mutex_unlock(&zones_lock);
            sluice__free(img);
            return z;
        }
    pthread_mutex_unlock(&zones_lock);
    char why[160];
    sluice__tz *z = sluice__tz_parse(img, n, why, sizeof why);
    if (!z) {
        sluice__free(img);
        sluice__errf(err, errlen, "bad zone \"%.*s\": %s", show, name, why);
        return NULL;
    }
    memcpy(z->name, name, namelen);
    z->image = img;
    z->nimage = n;
    pthread_mutex_lock(&zones_lock);
    for (sluice__tz *o = zones; o; o = o->next) /* another thread may have won */
        if (strcmp(o->name, z->name) == 0 && o->nimage == n && memcmp(o->image, img, n) == 0) {
            pthread_mutex_unlock(&zones_lock);
            sluice__tz_free(z);
            return o;
        }
    if (nzones >= ZONES_MAX) { /* the list (and each lookup's walk) stays bounded */
        pthread_mutex_unlock(&zones_lock);
        sluice__tz_free(z);
        sluice__errf(err, errlen, "bad zone \"%.*s\": %u zones read already, the most a process keeps",
                     show, name, ZONES_MAX);
        return NULL;
    }
    z->next = zones;
    zones = z;
    nzones++;
    pthread_mutex_unlock(&zones_lock);
    return z;
}

const char *sluice__tz_name(const sluice__tz *z) { return z->name; }

sluice__tz_win *sluice__tz_wins(const sluice__tz *z) { return ((sluice__tz *)z)->wins; }

/* ---- the queries --------------------------------------------------------- */

/* The index of the last transition <= u, or -1. */
static int64_t last_at(const sluice__tz *z, int64_t u)
{
    int64_t lo = 0, hi = z->ntrans; /* answer in [lo - 1, hi) */
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (z->trans[mid] <= u) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

int32_t sluice__tz_offset(const sluice__tz *z, int64_t u)
{
    if (z->ntrans == 0) return z->footer ? footer_offset(z, u) : z->before;
    if (u < z->trans[0]) return z->before;
    /* the rule from the last transition on (a file whose rule disagrees
     * with that transition's type then changes at it, not a second after:
     * the spans of next_change stay true) */
    if (z->footer && u >= z->trans[z->ntrans - 1]) return footer_offset(z, u);
    return z->off[last_at(z, u)];
}

int64_t sluice__tz_next_change(const sluice__tz *z, int64_t u)
{
    if (z->ntrans && u < z->trans[z->ntrans - 1]) return z->trans[last_at(z, u) + 1];
    return z->footer ? footer_next(z, u) : INT64_MAX;
}

/* The offsets lie within (-REACH, REACH), so the answer lies within
 * [local - REACH, local + REACH]: walk the spans of constant offset from
 * local - REACH; in the span [u, nx) with offset o the first instant whose
 * local time reaches `local` is max(u, local - o), if it is before nx.
 * At most SPAN_MAX + a few spans (parse), the last one always answers. */
int64_t sluice__tz_first_reach(const sluice__tz *z, int64_t local)
{
    int64_t u = local - REACH;
    for (int i = 0; i < SPAN_MAX + 8; i++) {
        const int32_t o = sluice__tz_offset(z, u);
        const int64_t nx = sluice__tz_next_change(z, u);
        const int64_t cand = u > local - o ? u : local - o;
        if (cand < nx || u >= local + REACH) return cand;
        u = nx;
    }
    return local - sluice__tz_offset(z, local); /* not reached (parse bounds the spans) */
}
