/* metrics.c -- a registry of named objects, rendered in the Prometheus text
 * exposition format (version 0.0.4).
 *
 * The registry is an array of entries (kind, object, escaped name) behind a
 * mutex.  Removing an entry empties its slot rather than shifting the
 * others, and adding fills the first empty slot, so a writer that walks the
 * slots by index while other threads add and remove never skips or repeats
 * an object that stays registered.
 *
 * The write walks the families in a fixed order (the table `families`
 * below); for each family it walks the slots, taking the mutex for one slot
 * at a time: read the object's counters with its public getter (relaxed
 * loads: no lock of the object, no allocation) and format its lines.  The
 * mutex is what makes sluice_metrics_remove() a barrier: once it returns no
 * writer is inside that object's getter.  A family's HELP and TYPE lines go
 * out before its first series, so a family with no object is left out.
 *
 * Output goes through the library's cursor (base/text.h), which counts
 * every byte (the length needed) but stores only those that fit; each line
 * is one of its items, so a short buffer is cut after the last whole line
 * that fits with room for the NUL, and never ends in half a line.
 *
 * Names are escaped once, when added (backslash, double quote and newline,
 * as the format's label values require), and stored escaped.
 *
 * Wait histograms: the objects keep a count per bucket; the write sums
 * them into the cumulative `le` buckets the format wants, and _count is the
 * +Inf bucket, so the lines of one histogram always agree with each other.
 * _sum is integer nanoseconds written as decimal seconds, exactly.
 *
 * Sources (objects of other libraries, metrics.h) are entries of kind
 * K_SOURCE with a pointer to their static description; the registry keeps
 * the distinct descriptions in the order first added (never removed, at
 * most SLUICE_METRICS_SOURCES_MAX) and, after the core's families, walks
 * each one's families as it walks its own, calling the source back for one
 * object and one family at a time under that object's lock.  Its samples go
 * through the same cursor; the family's HELP and TYPE go out before the
 * first.  The core so knows nothing of what it writes (libsluice-redis
 * links libsluice, never the other way).
 *
 * Sections and entry points:
 *   the registry  sluice_metrics_new, _free, _add_limiter, _add_table,
 *                 _add_wheel, _add_queue, _add_concurrency (and _table, _region),
 *                 _add_source, _add_rules,
 *                 _remove, _count; names validated (UTF-8) and escaped
 *   output        the series, histograms and top keys of each family
 *                 (the table `families`), and the rule sets' lines
 *   sources       sluice_metrics_sample (a source's line), and
 *                 sluice_metrics_write (the whole exposition)
 */
#include "base/internal.h"
#include "base/text.h"
#include "rules/rules.h"

#include <pthread.h>
#include <string.h>

typedef enum kind { K_NONE, K_LIMITER, K_TABLE, K_WHEEL, K_QUEUE, K_SOURCE, K_RULES, K_CONC, K_CTAB, K_CREG } kind;

typedef struct entry {
    kind k;
    const void *obj;
    const sluice_metrics_source *src; /* K_SOURCE */
    char *name;     /* escaped, NUL-terminated */
    size_t namelen; /* escaped length */
} entry;

struct sluice_metrics {
    pthread_mutex_t mu;
    entry *v;
    size_t n;   /* slots in use or emptied; v[n..cap) never used */
    size_t cap;
    size_t count; /* objects registered */
    const sluice_metrics_source *srcs[SLUICE_METRICS_SOURCES_MAX]; /* first added first */
    size_t nsrcs;
};

/* ---- the registry ------------------------------------------------------- */

sluice_metrics *sluice_metrics_new(void)
{
    sluice_metrics *m = sluice__calloc(1, sizeof *m);
    if (!m) return NULL;
    if (pthread_mutex_init(&m->mu, NULL) != 0) {
        sluice__free(m);
        return NULL;
    }
    return m;
}

void sluice_metrics_free(sluice_metrics *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) sluice__free(m->v[i].name);
    sluice__free(m->v);
    pthread_mutex_destroy(&m->mu);
    sluice__free(m);
}

/* The length of the UTF-8 sequence at s (at most n bytes), or 0 when it is
 * not a valid one (overlong forms, surrogates and code points past U+10FFFF
 * are invalid). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

/* Whether the l-byte UTF-8 sequence at s (utf8_len) is a C1 control
 * character, U+0080 .. U+009F: C2 80 .. C2 9F.  They are control
 * characters as C0's are (U+0085 a line break, U+009B a terminal's CSI). */
static bool c1_control(const unsigned char *s, size_t l)
{
    return l == 2 && s[0] == 0xC2 && s[1] < 0xA0;
}

/* Validate `name` and return its escaped length (> 0), or 0 if refused. */
static size_t escaped_len(const char *name)
{
    const unsigned char *s = (const unsigned char *)name;
    size_t n = 0;
    while (n <= SLUICE_METRICS_NAME_MAX && name[n]) n++;
    if (n == 0 || n > SLUICE_METRICS_NAME_MAX) return 0;
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7F) return 0;
        size_t l = utf8_len(s + i, n - i);
        if (l == 0 || c1_control(s + i, l)) return 0;
        out += (c == '\\' || c == '"' || c == '\n') ? 2 : l;
        i += l;
    }
    return out;
}

/* name escaped into dst, which has room for escaped_len(name) + 1 bytes. */
static void escape(char *dst, size_t room, const char *name)
{
    sluice__out o;
    sluice__out_init(&o, dst, room, 0);
    sluice__out_escaped(&o, name);
    sluice__out_end(&o);
}

/* Limiters and tables share the `limit` label's names; wheels, queues and
 * the objects of each source have theirs. */
static bool same_space(const entry *e, kind b, const sluice_metrics_source *src)
{
    kind a = e->k;
    if (a == K_SOURCE || b == K_SOURCE) return a == b && e->src == src;
    bool la = a == K_LIMITER || a == K_TABLE || a == K_CONC || a == K_CTAB || a == K_CREG;
    bool lb = b == K_LIMITER || b == K_TABLE || b == K_CONC || b == K_CTAB || b == K_CREG;
    return a == b || (la && lb); /* one `limit` label */
}

static int add(sluice_metrics *m, const char *name, const void *obj, kind k,
               const sluice_metrics_source *src)
{
    if (!m || !name || !obj) return SLUICE_EINVAL;
    size_t elen = escaped_len(name);
    if (elen == 0) return SLUICE_EINVAL;
    char *esc = sluice__malloc(elen + 1);
    if (!esc) return SLUICE_ENOMEM;
    escape(esc, elen + 1, name);

    int rc = 0;
    pthread_mutex_lock(&m->mu);
    size_t slot = m->n;
    for (size_t i = 0; i < m->n; i++) {
        const entry *e = &m->v[i];
        if (e->k == K_NONE) {
            if (slot == m->n) slot = i;
            continue;
        }
        if (e->obj == obj ||
            (same_space(e, k, src) && e->namelen == elen && memcmp(e->name, esc, elen) == 0)) {
            rc = SLUICE_EINVAL;
            break;
        }
    }
    size_t si = 0;
    while (src && rc == 0 && si < m->nsrcs && m->srcs[si] != src) si++;
    if (src && rc == 0 && si == m->nsrcs) { /* a new source */
        for (size_t j = 0; j < m->nsrcs && rc == 0; j++)
            for (size_t a = 0; a < m->srcs[j]->nfamilies && rc == 0; a++)
                for (size_t b = 0; b < src->nfamilies; b++)
                    if (strcmp(m->srcs[j]->families[a].name, src->families[b].name) == 0) {
                        rc = SLUICE_EINVAL; /* another source's family */
                        break;
                    }
        if (rc == 0 && m->nsrcs == SLUICE_METRICS_SOURCES_MAX) rc = SLUICE_EFULL;
    }
    if (rc == 0 && slot == m->cap) {
        /* grow: a new array, copied (the allocator hook has no realloc) */
        size_t cap = m->cap ? m->cap * 2 : 8;
        entry *v = cap <= SIZE_MAX / sizeof *v ? sluice__calloc(cap, sizeof *v) : NULL;
        if (!v) {
            rc = SLUICE_ENOMEM;
        } else {
            if (m->n) memcpy(v, m->v, m->n * sizeof *v);
            sluice__free(m->v);
            m->v = v;
            m->cap = cap;
        }
    }
    if (rc == 0) {
        if (src && si == m->nsrcs) m->srcs[m->nsrcs++] = src;
        m->v[slot] = (entry){k, obj, src, esc, elen};
        if (slot == m->n) m->n++;
        m->count++;
        esc = NULL;
    }
    pthread_mutex_unlock(&m->mu);
    sluice__free(esc);
    return rc;
}

int sluice_metrics_add_limiter(sluice_metrics *m, const char *name, const sluice_limiter *lim)
{
    return add(m, name, lim, K_LIMITER, NULL);
}

int sluice_metrics_add_concurrency(sluice_metrics *m, const char *name, const sluice_concurrency *c)
{
    return add(m, name, c, K_CONC, NULL);
}

int sluice_metrics_add_concurrency_table(sluice_metrics *m, const char *name,
                                         const sluice_concurrency_table *t)
{
    return add(m, name, t, K_CTAB, NULL);
}

int sluice_metrics_add_concurrency_region(sluice_metrics *m, const char *name,
                                          const sluice_concurrency_region *r)
{
    return add(m, name, r, K_CREG, NULL);
}

int sluice_metrics_add_table(sluice_metrics *m, const char *name, const sluice_table *t)
{
    return add(m, name, t, K_TABLE, NULL);
}

int sluice_metrics_add_wheel(sluice_metrics *m, const char *name, const sluice_wheel *w)
{
    return add(m, name, w, K_WHEEL, NULL);
}

int sluice_metrics_add_queue(sluice_metrics *m, const char *name, const sluice_queue *q)
{
    return add(m, name, q, K_QUEUE, NULL);
}

/* A label name a source may use: [a-zA-Z_][a-zA-Z0-9_]*, at most 64
 * bytes, not reserved (a leading "__") and not "le" (the histograms'). */
static bool label_ok(const char *s)
{
    if (!s || !*s || (s[0] == '_' && s[1] == '_') || strcmp(s, "le") == 0) return false;
    for (size_t i = 0; s[i]; i++) {
        char ch = s[i];
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
        if (i >= 64 || !(alpha || (i > 0 && ch >= '0' && ch <= '9'))) return false;
    }
    return true;
}

static bool core_family(const char *name); /* below, with the families */

static bool source_ok(const sluice_metrics_source *src)
{
    if (!src->write || !src->families || src->nfamilies < 1 || src->nfamilies > 64 ||
        !label_ok(src->label))
        return false;
    for (size_t i = 0; i < src->nfamilies; i++) {
        const sluice_metrics_family *f = &src->families[i];
        if (!f->name || !f->type || !f->help || !*f->help) return false;
        size_t n = strlen(f->name);
        if (n <= 7 || n > 128 || memcmp(f->name, "sluice_", 7) != 0 || core_family(f->name))
            return false;
        for (size_t j = 7; j < n; j++) {
            char ch = f->name[j];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return false;
        }
        bool total = n > 13 && strcmp(f->name + n - 6, "_total") == 0;
        if (strcmp(f->type, "counter") == 0 ? !total : strcmp(f->type, "gauge") != 0) return false;
        for (const char *h = f->help; *h; h++)
            if (*h < 0x20 || *h > 0x7E || *h == '\\') return false;
        for (size_t j = 0; j < i; j++)
            if (strcmp(src->families[j].name, f->name) == 0) return false;
    }
    return true;
}

int sluice_metrics_add_source(sluice_metrics *m, const char *name, const void *obj,
                              const sluice_metrics_source *src)
{
    if (!src || !source_ok(src)) return SLUICE_EINVAL;
    return add(m, name, obj, K_SOURCE, src);
}

int sluice_metrics_add_rules(sluice_metrics *m, const char *name, const sluice_rules *rs)
{
    return add(m, name, rs, K_RULES, NULL);
}

int sluice_metrics_remove(sluice_metrics *m, const void *obj)
{
    if (!m || !obj) return SLUICE_EINVAL;
    char *name = NULL;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n; i++) {
        entry *e = &m->v[i];
        if (e->k != K_NONE && e->obj == obj) {
            name = e->name;
            *e = (entry){K_NONE, NULL, NULL, NULL, 0};
            m->count--;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
    if (!name) return SLUICE_ENOENT;
    sluice__free(name);
    return 0;
}

size_t sluice_metrics_count(const sluice_metrics *m)
{
    if (!m) return 0;
    sluice_metrics *w = (sluice_metrics *)m; /* the mutex only */
    pthread_mutex_lock(&w->mu);
    size_t n = m->count;
    pthread_mutex_unlock(&w->mu);
    return n;
}

/* ---- output ------------------------------------------------------------- */

/* A line ends an item of the cursor (base/text.h): a short buffer is cut
 * after the last whole line. */
static void end_line(sluice__out *c)
{
    sluice__out_put(c, "\n", 1);
    sluice__out_end(c);
}

/* One series line: NAME{LABEL="value"[,EXTRA="V"]} VALUE -- EXTRA is
 * `decision` for series(), `reason` for reason_series(), a source's own
 * label for sluice_metrics_sample(); V is escaped (a source's may need
 * it). */
static void labelled(sluice__out *c, const char *metric, const char *label, const entry *e,
                     const char *extra, const char *v, uint64_t value)
{
    sluice__out_str(c, metric);
    sluice__out_put(c, "{", 1);
    sluice__out_str(c, label);
    sluice__out_put(c, "=\"", 2);
    sluice__out_put(c, e->name, e->namelen);
    if (v) {
        sluice__out_put(c, "\",", 2);
        sluice__out_str(c, extra);
        sluice__out_put(c, "=\"", 2);
        sluice__out_escaped(c, v);
    }
    sluice__out_put(c, "\"} ", 3);
    sluice__out_u64(c, value);
    end_line(c);
}

static void series(sluice__out *c, const char *metric, const char *label, const entry *e,
                   const char *decision, uint64_t value)
{
    labelled(c, metric, label, e, "decision", decision, value);
}

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
/* a - b, 0 when b > a (two counters read at slightly different instants) */
static uint64_t sat_sub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

/* What one object contributes to the families. */
typedef struct snapshot {
    sluice_stats d;          /* limiters and tables */
    uint64_t queued;         /* queues */
    sluice_table_stats t;    /* tables */
    uint64_t pending;        /* wheels */
    uint64_t held, limit, waiting; /* concurrency limits */
    uint64_t recovered;      /* concurrency regions */
    sluice_wait_stats w;     /* limiters (blocking), queues (asynchronous) */
    size_t ntop;             /* tables with a sketch: the keys refused most */
    sluice_top_entry top[SLUICE_METRICS_TOP_KEYS];
} snapshot;

typedef enum family_id {
    F_REQUESTS,
    F_PERMITS,
    F_PROBES,
    F_ACQUIRE_WAIT,
    F_ACQUIRE_FAILED,
    F_ASYNC_QUEUED,
    F_ASYNC_WAIT,
    F_ASYNC_FAILED,
    F_TABLE_KEYS,
    F_TABLE_RECLAIMED,
    F_TABLE_EVICTED,
    F_TABLE_REFUSED,
    F_TOP_REQUESTS,
    F_TOP_ERROR,
    F_WHEEL_PENDING,
    F_CONC_HELD,
    F_CONC_LIMIT,
    F_CONC_WAITING,
    F_CONC_RECOVERED,
    F_RULE_REQUESTS,
    F_RULE_PERMITS,
    F_RULE_SHADOW,
    F_RULES_LOADS
} family_id;

typedef struct family {
    family_id id;
    const char *name, *type, *help;
    unsigned kinds; /* bit (1 << kind) for the kinds it covers */
} family;

#define KB(k) (1u << (k))

static const family families[] = {
    {F_REQUESTS, "sluice_requests_total", "counter",
     "Requests decided, by limit and decision (probes count as allowed).",
     KB(K_LIMITER) | KB(K_TABLE)},
    {F_PERMITS, "sluice_permits_total", "counter",
     "Permits asked for by the requests decided, by limit and decision.",
     KB(K_LIMITER) | KB(K_TABLE)},
    {F_PROBES, "sluice_probes_total", "counter",
     "Probes (requests for 0 permits, always allowed, changing nothing) among the requests.",
     KB(K_LIMITER) | KB(K_TABLE)},
    {F_ACQUIRE_WAIT, "sluice_acquire_wait_seconds", "histogram",
     "Waits of the blocking acquires granted, from the call to the grant.", KB(K_LIMITER)},
    {F_ACQUIRE_FAILED, "sluice_acquire_failed_total", "counter",
     "Blocking acquires that returned without their permits, by reason.", KB(K_LIMITER)},
    {F_ASYNC_QUEUED, "sluice_async_queued", "gauge",
     "Asynchronous acquires waiting in the queue for their permits.", KB(K_QUEUE)},
    {F_ASYNC_WAIT, "sluice_async_wait_seconds", "histogram",
     "Waits of the asynchronous acquires called back, from the request to the callback.",
     KB(K_QUEUE)},
    {F_ASYNC_FAILED, "sluice_async_failed_total", "counter",
     "Asynchronous acquires that ended without their permits, by reason.", KB(K_QUEUE)},
    {F_TABLE_KEYS, "sluice_table_keys", "gauge", "Keys the table holds now.",
     KB(K_TABLE) | KB(K_RULES) | KB(K_CTAB) | KB(K_CREG)},
    {F_TABLE_RECLAIMED, "sluice_table_keys_reclaimed_total", "counter",
     "Keys dropped because their limiter was back at rest (no decision changes).",
     KB(K_TABLE) | KB(K_RULES)},
    {F_TABLE_EVICTED, "sluice_table_keys_evicted_total", "counter",
     "Keys dropped while in use to make room (evict-lru tables only).",
     KB(K_TABLE) | KB(K_RULES)},
    {F_TABLE_REFUSED, "sluice_table_keys_refused_total", "counter",
     "Requests for a new key refused because the table was full of keys in use "
     "(also counted as denied requests).",
     KB(K_TABLE) | KB(K_RULES)},
    {F_TOP_REQUESTS, "sluice_table_refused_key_requests", "gauge",
     "Requests refused for the key, as estimated by the table's sketch of the keys "
     "refused most (at least the true number, at most that plus the error series); "
     "the top keys only.",
     KB(K_TABLE) | KB(K_RULES)},
    {F_TOP_ERROR, "sluice_table_refused_key_error", "gauge",
     "The most sluice_table_refused_key_requests can exceed the key's true refusals.",
     KB(K_TABLE) | KB(K_RULES)},
    {F_WHEEL_PENDING, "sluice_wheel_timers_pending", "gauge",
     "Timers scheduled and not yet fired or cancelled.", KB(K_WHEEL)},
    {F_CONC_HELD, "sluice_concurrency_held", "gauge",
     "Permits a concurrency limit holds, as of its latest call (a table or a key rule: "
     "over all its keys).",
     KB(K_CONC) | KB(K_CTAB) | KB(K_CREG) | KB(K_RULES)},
    {F_CONC_LIMIT, "sluice_concurrency_limit", "gauge",
     "The most permits a concurrency limit holds at once (its N; a table's or a key "
     "rule's: per key).",
     KB(K_CONC) | KB(K_CTAB) | KB(K_CREG) | KB(K_RULES)},
    {F_CONC_WAITING, "sluice_concurrency_waiting", "gauge",
     "Blocking acquires waiting for a concurrency limit's permits (a shared region: over "
     "all its keys, every process's).",
     KB(K_CONC) | KB(K_CREG)},
    {F_CONC_RECOVERED, "sluice_concurrency_recovered_permits_total", "counter",
     "Permits of a shared region's concurrency limits given back because the process "
     "holding them died (found by a sweep).",
     KB(K_CREG)},
    {F_RULE_REQUESTS, "sluice_rule_requests_total", "counter",
     "Requests decided by a rule set, per rule and outcome: allowed, denied (by this rule), "
     "denied_shadow (a shadow rule would have refused; let through), denied_elsewhere "
     "(refused by another rule; nothing taken here).",
     KB(K_RULES)},
    {F_RULE_PERMITS, "sluice_rule_permits_total", "counter",
     "Permits asked for by the requests of sluice_rule_requests_total, per rule and outcome.",
     KB(K_RULES)},
    {F_RULE_SHADOW, "sluice_rule_shadow", "gauge",
     "1 for a shadow rule (decided and counted, never refusing), 0 for an enforcing one.",
     KB(K_RULES)},
    {F_RULES_LOADS, "sluice_rules_loads_total", "counter",
     "Times the rule set was loaded: its first load and every reload that took effect.",
     KB(K_RULES)},
};

static bool core_family(const char *name)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        size_t n = strlen(families[i].name);
        if (strncmp(name, families[i].name, n) == 0) return true; /* its _bucket etc. too */
    }
    return false;
}

static void read_object(const entry *e, family_id f, snapshot *s)
{
    switch (e->k) {
    case K_LIMITER:
        if (f == F_ACQUIRE_WAIT || f == F_ACQUIRE_FAILED)
            sluice_limiter_wait_stats_get((const sluice_limiter *)e->obj, &s->w);
        else
            sluice_limiter_stats_get((const sluice_limiter *)e->obj, &s->d);
        break;
    case K_TABLE:
        sluice_table_stats_get((const sluice_table *)e->obj, &s->t);
        s->d = s->t.decisions;
        if ((f == F_TOP_REQUESTS || f == F_TOP_ERROR) &&
            sluice_table_top_refused((const sluice_table *)e->obj, s->top,
                                     SLUICE_METRICS_TOP_KEYS, &s->ntop) != 0)
            s->ntop = 0;
        break;
    case K_WHEEL:
        if (f == F_WHEEL_PENDING) s->pending = sluice_wheel_pending((const sluice_wheel *)e->obj);
        break;
    case K_QUEUE:
        /* the getters take the queue's lock: a cast, not a write */
        if (f == F_ASYNC_QUEUED) s->queued = sluice_queue_len((sluice_queue *)(uintptr_t)e->obj);
        else sluice_queue_wait_stats_get((sluice_queue *)(uintptr_t)e->obj, &s->w);
        break;
    case K_CONC:
        s->held = sluice_concurrency_held((const sluice_concurrency *)e->obj);
        s->limit = sluice_concurrency_limit((const sluice_concurrency *)e->obj);
        s->waiting = sluice_concurrency_waiting((const sluice_concurrency *)e->obj);
        break;
    case K_CTAB: { /* the getters take the table's lock: a cast, not a write */
        sluice_concurrency_table *t = (sluice_concurrency_table *)(uintptr_t)e->obj;
        if (f == F_TABLE_KEYS) s->t.keys = sluice_concurrency_table_keys(t);
        else if (f == F_CONC_HELD) s->held = sluice_concurrency_table_held(t);
        else if (f == F_CONC_LIMIT) s->limit = sluice_concurrency_table_limit(t);
        break;
    }
    case K_CREG: { /* the pass over the keys only where it is needed */
        sluice_concurrency_region *r = (sluice_concurrency_region *)(uintptr_t)e->obj;
        sluice_concurrency_region_stats st;
        if (f == F_CONC_LIMIT) {
            s->limit = sluice_concurrency_region_limit(r);
        } else if (f == F_CONC_RECOVERED) {
            s->recovered = sluice_concurrency_region_recovered(r);
        } else if (sluice_concurrency_region_stats_get(r, &st) == 0) {
            s->t.keys = st.keys;
            s->held = st.held;
            s->waiting = st.waiting;
        }
        break;
    }
    case K_SOURCE:
    case K_RULES: /* written rule by rule (write_rules) */
    case K_NONE:
        break;
    }
}

/* A key as a label value: the key's bytes with every backslash doubled,
 * every byte that is not part of printable UTF-8 (invalid sequences,
 * control characters C0, DEL and C1 -- the C1 ones, C2 80 .. C2 9F, as
 * their two bytes) written as \xNN, and `\...` after a truncated key;
 * then escaped as the format asks (backslash and double quote).  Distinct
 * keys give distinct values: a backslash of the value is always followed by
 * a backslash, an x or three dots. */
static void put_key(sluice__out *c, const sluice_top_entry *t)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *k = t->key;
    for (size_t i = 0; i < t->keylen;) {
        unsigned b = k[i];
        size_t l = b < 0x20 || b == 0x7F ? 0 : utf8_len(k + i, t->keylen - i);
        if (c1_control(k + i, l)) l = 0; /* C2 8x: each byte written \xNN */
        if (l == 0) {
            char x[6] = {'\\', '\\', 'x', hex[b >> 4], hex[b & 15], 0};
            sluice__out_put(c, x, 5);
            i++;
        } else if (b == '\\') {
            sluice__out_put(c, "\\\\\\\\", 4);
            i++;
        } else if (b == '"') {
            sluice__out_put(c, "\\\"", 2);
            i++;
        } else {
            sluice__out_put(c, (const char *)k + i, l);
            i += l;
        }
    }
    if (t->truncated) sluice__out_put(c, "\\\\...", 5);
}

/* One line of the keys refused most: NAME{limit="...",key="..."} VALUE */
static void key_series(sluice__out *c, const char *metric, const entry *e,
                       const sluice_top_entry *t, uint64_t value)
{
    sluice__out_str(c, metric);
    sluice__out_put(c, "{limit=\"", 8);
    sluice__out_put(c, e->name, e->namelen);
    sluice__out_put(c, "\",key=\"", 7);
    put_key(c, t);
    sluice__out_put(c, "\"} ", 3);
    sluice__out_u64(c, value);
    end_line(c);
}

/* ns as decimal seconds, exactly: S, or S.F with F the nanoseconds, its
 * trailing zeros dropped. */
static void put_seconds(sluice__out *c, uint64_t ns)
{
    sluice__out_u64(c, ns / 1000000000u);
    uint64_t f = ns % 1000000000u;
    if (!f) return;
    char tmp[10];
    tmp[0] = '.';
    for (int i = 9; i >= 1; i--, f /= 10) tmp[i] = (char)('0' + f % 10);
    size_t n = 10;
    while (tmp[n - 1] == '0') n--;
    sluice__out_put(c, tmp, n);
}

/* The le values of the buckets (sluice_wait_bucket_bound_ns), in seconds. */
static const char *const le_text[SLUICE_WAIT_BUCKETS + 1] = {
    "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
    "0.1",    "0.25",    "0.5",    "1",     "2.5",    "5",     "10",   "+Inf"};

/* The lines of one histogram: NAME_bucket{LABEL="..",le=".."} (cumulative),
 * NAME_sum, NAME_count (the +Inf bucket). */
static void histogram(sluice__out *c, const char *metric, const char *label, const entry *e,
                      const sluice_wait_stats *w)
{
    uint64_t cum = 0;
    for (int i = 0; i <= SLUICE_WAIT_BUCKETS; i++) {
        cum += w->buckets[i];
        sluice__out_str(c, metric);
        sluice__out_put(c, "_bucket{", 8);
        sluice__out_str(c, label);
        sluice__out_put(c, "=\"", 2);
        sluice__out_put(c, e->name, e->namelen);
        sluice__out_put(c, "\",le=\"", 6);
        sluice__out_str(c, le_text[i]);
        sluice__out_put(c, "\"} ", 3);
        sluice__out_u64(c, cum);
        end_line(c);
    }
    for (int i = 0; i < 2; i++) {
        sluice__out_str(c, metric);
        sluice__out_str(c, i ? "_count{" : "_sum{");
        sluice__out_str(c, label);
        sluice__out_put(c, "=\"", 2);
        sluice__out_put(c, e->name, e->namelen);
        sluice__out_put(c, "\"} ", 3);
        if (i) sluice__out_u64(c, cum);
        else put_seconds(c, w->sum_ns);
        end_line(c);
    }
}

/* One line of a counter by reason: NAME{LABEL="..",reason="R"} VALUE */
static void reason_series(sluice__out *c, const char *metric, const char *label, const entry *e,
                          const char *reason, uint64_t value)
{
    labelled(c, metric, label, e, "reason", reason, value);
}

/* The series of a rule set, one set of lines per rule of its current
 * version: NAME{ruleset="...",rule="..."[,decision="D"]} VALUE; a key
 * rule's table also gives the table families, labelled the same
 * (sluice_table_keys{ruleset="...",rule="..."}), and its keys refused most
 * NAME{ruleset="...",rule="...",key="..."} when it has a sketch
 * (sluice_rules_set_top).  Rule names need no escaping (letters, digits,
 * _ - . :).  The family's HELP and TYPE are written before its first line
 * (`head`): whether a rule set has lines is known only in its walk. */
static void family_head(sluice__out *c, const char *name, const char *type, const char *help);

typedef struct rules_out {
    sluice__out *c;
    const family *f;
    const entry *e;
    bool *head;
} rules_out;

static void rule_head(const rules_out *o)
{
    if (*o->head) return;
    *o->head = true;
    family_head(o->c, o->f->name, o->f->type, o->f->help);
}

static void rule_labels(const rules_out *o, const char *rule)
{
    sluice__out *c = o->c;
    rule_head(o);
    sluice__out_str(c, o->f->name);
    sluice__out_put(c, "{ruleset=\"", 10);
    sluice__out_put(c, o->e->name, o->e->namelen);
    sluice__out_put(c, "\",rule=\"", 8);
    sluice__out_str(c, rule);
}

static void rule_series(const rules_out *o, const char *rule, const char *decision, uint64_t value)
{
    sluice__out *c = o->c;
    rule_labels(o, rule);
    if (decision) {
        sluice__out_put(c, "\",decision=\"", 12);
        sluice__out_str(c, decision);
    }
    sluice__out_put(c, "\"} ", 3);
    sluice__out_u64(c, value);
    end_line(c);
}

static void rule_key_series(const rules_out *o, const char *rule, const sluice_top_entry *t,
                            uint64_t value)
{
    sluice__out *c = o->c;
    rule_labels(o, rule);
    sluice__out_put(c, "\",key=\"", 7);
    put_key(c, t);
    sluice__out_put(c, "\"} ", 3);
    sluice__out_u64(c, value);
    end_line(c);
}

/* A key rule's table families (tab not NULL). */
static void write_rule_table(const rules_out *o, const char *name, const sluice_table *tab)
{
    sluice_table_stats ts;
    if (o->f->id == F_TOP_REQUESTS || o->f->id == F_TOP_ERROR) {
        sluice_top_entry top[SLUICE_METRICS_TOP_KEYS];
        size_t n = 0;
        if (sluice_table_top_refused(tab, top, SLUICE_METRICS_TOP_KEYS, &n) != 0) n = 0;
        for (size_t i = 0; i < n; i++)
            rule_key_series(o, name, &top[i], o->f->id == F_TOP_REQUESTS ? top[i].count : top[i].error);
        return;
    }
    sluice_table_stats_get(tab, &ts);
    switch (o->f->id) {
    case F_TABLE_KEYS: rule_series(o, name, NULL, ts.keys); break;
    case F_TABLE_RECLAIMED: rule_series(o, name, NULL, ts.reclaimed); break;
    case F_TABLE_EVICTED: rule_series(o, name, NULL, ts.evicted); break;
    case F_TABLE_REFUSED: rule_series(o, name, NULL, ts.refused); break;
    default: break;
    }
}

static void write_rule(void *arg, const char *name, bool shadow, const sluice_rule_stats *st,
                       const sluice_table *tab)
{
    static const char *const decisions[4] = {"allowed", "denied", "denied_shadow",
                                             "denied_elsewhere"};
    const rules_out *o = arg;
    switch (o->f->id) {
    case F_RULE_REQUESTS:
        for (int d = 0; d < 4; d++) rule_series(o, name, decisions[d], st->requests[d]);
        break;
    case F_RULE_PERMITS:
        for (int d = 0; d < 4; d++) rule_series(o, name, decisions[d], st->permits[d]);
        break;
    case F_RULE_SHADOW: rule_series(o, name, NULL, shadow ? 1 : 0); break;
    case F_CONC_HELD: /* concurrency rules only (their limit is not 0) */
        if (st->limit) rule_series(o, name, NULL, st->held);
        break;
    case F_CONC_LIMIT:
        if (st->limit) rule_series(o, name, NULL, st->limit);
        break;
    case F_TABLE_KEYS:
    case F_TABLE_RECLAIMED:
    case F_TABLE_EVICTED:
    case F_TABLE_REFUSED:
    case F_TOP_REQUESTS:
    case F_TOP_ERROR:
        if (tab) write_rule_table(o, name, tab);
        break;
    default: break;
    }
}

static void write_rules(sluice__out *c, const family *f, const entry *e, bool *head)
{
    const sluice_rules *rs = e->obj;
    rules_out o = {c, f, e, head};
    if (f->id == F_RULES_LOADS) {
        rule_head(&o);
        series(c, f->name, "ruleset", e, NULL, sluice_rules_generation(rs));
        return;
    }
    sluice__rules_each(rs, write_rule, &o);
}

static void write_object(sluice__out *c, const family *f, const entry *e, const snapshot *s)
{
    const char *label = e->k == K_WHEEL ? "wheel" : e->k == K_QUEUE ? "queue" : "limit";
    switch (f->id) {
    case F_REQUESTS: /* denied: by this limit; denied_elsewhere: by another of a composite */
        series(c, f->name, label, e, "allowed", sat_add(s->d.requests_allowed, s->d.probes));
        series(c, f->name, label, e, "denied", sat_sub(s->d.requests_denied, s->d.requests_denied_elsewhere));
        series(c, f->name, label, e, "denied_elsewhere", s->d.requests_denied_elsewhere);
        break;
    case F_PERMITS:
        series(c, f->name, label, e, "allowed", s->d.permits_allowed);
        series(c, f->name, label, e, "denied", sat_sub(s->d.permits_denied, s->d.permits_denied_elsewhere));
        series(c, f->name, label, e, "denied_elsewhere", s->d.permits_denied_elsewhere);
        break;
    case F_PROBES: series(c, f->name, label, e, NULL, s->d.probes); break;
    case F_ACQUIRE_WAIT:
    case F_ASYNC_WAIT: histogram(c, f->name, label, e, &s->w); break;
    case F_ACQUIRE_FAILED:
        reason_series(c, f->name, label, e, "timeout", s->w.timed_out);
        reason_series(c, f->name, label, e, "cancelled", s->w.cancelled);
        reason_series(c, f->name, label, e, "error", s->w.failed);
        break;
    case F_ASYNC_FAILED:
        reason_series(c, f->name, label, e, "cancelled", s->w.cancelled);
        reason_series(c, f->name, label, e, "refused", s->w.failed);
        reason_series(c, f->name, label, e, "dropped", s->w.dropped);
        break;
    case F_ASYNC_QUEUED: series(c, f->name, label, e, NULL, s->queued); break;
    case F_TABLE_KEYS: series(c, f->name, label, e, NULL, s->t.keys); break;
    case F_TABLE_RECLAIMED: series(c, f->name, label, e, NULL, s->t.reclaimed); break;
    case F_TABLE_EVICTED: series(c, f->name, label, e, NULL, s->t.evicted); break;
    case F_TABLE_REFUSED: series(c, f->name, label, e, NULL, s->t.refused); break;
    case F_TOP_REQUESTS:
        for (size_t i = 0; i < s->ntop; i++) key_series(c, f->name, e, &s->top[i], s->top[i].count);
        break;
    case F_TOP_ERROR:
        for (size_t i = 0; i < s->ntop; i++) key_series(c, f->name, e, &s->top[i], s->top[i].error);
        break;
    case F_WHEEL_PENDING: series(c, f->name, label, e, NULL, s->pending); break;
    case F_CONC_HELD: series(c, f->name, label, e, NULL, s->held); break;
    case F_CONC_LIMIT: series(c, f->name, label, e, NULL, s->limit); break;
    case F_CONC_WAITING: series(c, f->name, label, e, NULL, s->waiting); break;
    case F_CONC_RECOVERED: series(c, f->name, label, e, NULL, s->recovered); break;
    case F_RULE_REQUESTS:
    case F_RULE_PERMITS:
    case F_RULE_SHADOW:
    case F_RULES_LOADS: break; /* write_rules */
    }
}

static void family_head(sluice__out *c, const char *name, const char *type, const char *help)
{
    sluice__out_str(c, "# HELP ");
    sluice__out_str(c, name);
    sluice__out_put(c, " ", 1);
    sluice__out_str(c, help);
    end_line(c);
    sluice__out_str(c, "# TYPE ");
    sluice__out_str(c, name);
    sluice__out_put(c, " ", 1);
    sluice__out_str(c, type);
    end_line(c);
}

/* ---- sources ---------------------------------------------------------------- */

struct sluice_metrics_out {
    sluice__out *c;
    const entry *e;                  /* the object being written */
    const sluice_metrics_family *f;  /* the family being written */
    bool *head;                      /* its HELP and TYPE are out */
};

void sluice_metrics_sample(sluice_metrics_out *out, const char *key, const char *val,
                           uint64_t value)
{
    if (!out) return;
    const char *label = out->e->src->label;
    if (key && (!val || !label_ok(key) || strcmp(key, label) == 0)) return;
    if (key) { /* the value: valid UTF-8 */
        const unsigned char *v = (const unsigned char *)val;
        size_t n = strlen(val);
        for (size_t i = 0, l; i < n; i += l)
            if ((l = utf8_len(v + i, n - i)) == 0) return;
    }
    if (!*out->head) {
        *out->head = true;
        family_head(out->c, out->f->name, out->f->type, out->f->help);
    }
    labelled(out->c, out->f->name, label, out->e, key, key ? val : NULL, value);
}

int sluice_metrics_write(const sluice_metrics *m, char *buf, size_t len, size_t *needed)
{
    if (!m || (!buf && len > 0)) return SLUICE_EINVAL;
    sluice_metrics *mm = (sluice_metrics *)m; /* the mutex only */
    sluice__out c;
    sluice__out_init(&c, buf, len, 0);
    for (size_t fi = 0; fi < sizeof families / sizeof families[0]; fi++) {
        const family *f = &families[fi];
        bool head = false;
        for (size_t i = 0;; i++) {
            pthread_mutex_lock(&mm->mu);
            if (i >= m->n) {
                pthread_mutex_unlock(&mm->mu);
                break;
            }
            const entry *e = &m->v[i];
            snapshot s;
            bool lines = (f->kinds & KB(e->k)) != 0;
            if (lines && e->k == K_RULES) { /* its HELP and TYPE before its first line */
                write_rules(&c, f, e, &head);
                lines = false;
            }
            if (lines) {
                memset(&s, 0, offsetof(snapshot, top));
                read_object(e, f->id, &s);
                /* the keys refused most: only tables with a sketch and a key */
                if (f->id == F_TOP_REQUESTS || f->id == F_TOP_ERROR) lines = s.ntop > 0;
            }
            if (lines) {
                if (!head) {
                    head = true;
                    family_head(&c, f->name, f->type, f->help);
                }
                write_object(&c, f, e, &s);
            }
            pthread_mutex_unlock(&mm->mu);
        }
    }
    for (size_t si = 0;; si++) { /* the sources' families */
        pthread_mutex_lock(&mm->mu);
        const sluice_metrics_source *src = si < m->nsrcs ? m->srcs[si] : NULL;
        pthread_mutex_unlock(&mm->mu);
        if (!src) break;
        for (size_t fi = 0; fi < src->nfamilies; fi++) {
            bool head = false;
            for (size_t i = 0;; i++) {
                pthread_mutex_lock(&mm->mu);
                if (i >= m->n) {
                    pthread_mutex_unlock(&mm->mu);
                    break;
                }
                const entry *e = &m->v[i];
                if (e->k == K_SOURCE && e->src == src) {
                    sluice_metrics_out o = {&c, e, &src->families[fi], &head};
                    src->write(e->obj, fi, &o);
                }
                pthread_mutex_unlock(&mm->mu);
            }
        }
    }
    if (needed) *needed = c.len;
    return sluice__out_end(&c) ? 0 : SLUICE_ENOSPC;
}
