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
 * Output goes through a cursor that counts every byte (the length needed)
 * but stores only those that fit, and remembers the end of the last whole
 * line that fits with room for the NUL: a short buffer is cut there, so it
 * never ends in half a line.
 *
 * Names are escaped once, when added (backslash, double quote and newline,
 * as the format's label values require), and stored escaped.
 */
#include "internal.h"

#include <pthread.h>
#include <string.h>

typedef enum kind { K_NONE, K_LIMITER, K_TABLE, K_WHEEL, K_QUEUE } kind;

typedef struct entry {
    kind k;
    const void *obj;
    char *name;     /* escaped, NUL-terminated */
    size_t namelen; /* escaped length */
} entry;

struct sluice_metrics {
    pthread_mutex_t mu;
    entry *v;
    size_t n;   /* slots in use or emptied; v[n..cap) never used */
    size_t cap;
    size_t count; /* objects registered */
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
        if (l == 0) return 0;
        out += (c == '\\' || c == '"' || c == '\n') ? 2 : l;
        i += l;
    }
    return out;
}

static void escape(char *dst, const char *name)
{
    for (const char *s = name; *s; s++) {
        if (*s == '\\' || *s == '"') {
            *dst++ = '\\';
            *dst++ = *s;
        } else if (*s == '\n') {
            *dst++ = '\\';
            *dst++ = 'n';
        } else {
            *dst++ = *s;
        }
    }
    *dst = '\0';
}

/* Limiters and tables share the `limit` label's names; wheels and queues
 * have theirs. */
static bool same_space(kind a, kind b)
{
    return a == b || ((a == K_LIMITER || a == K_TABLE) && (b == K_LIMITER || b == K_TABLE));
}

static int add(sluice_metrics *m, const char *name, const void *obj, kind k)
{
    if (!m || !name || !obj) return SLUICE_EINVAL;
    size_t elen = escaped_len(name);
    if (elen == 0) return SLUICE_EINVAL;
    char *esc = sluice__malloc(elen + 1);
    if (!esc) return SLUICE_ENOMEM;
    escape(esc, name);

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
            (same_space(e->k, k) && e->namelen == elen && memcmp(e->name, esc, elen) == 0)) {
            rc = SLUICE_EINVAL;
            break;
        }
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
        m->v[slot] = (entry){k, obj, esc, elen};
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
    return add(m, name, lim, K_LIMITER);
}

int sluice_metrics_add_table(sluice_metrics *m, const char *name, const sluice_table *t)
{
    return add(m, name, t, K_TABLE);
}

int sluice_metrics_add_wheel(sluice_metrics *m, const char *name, const sluice_wheel *w)
{
    return add(m, name, w, K_WHEEL);
}

int sluice_metrics_add_queue(sluice_metrics *m, const char *name, const sluice_queue *q)
{
    return add(m, name, q, K_QUEUE);
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
            *e = (entry){K_NONE, NULL, NULL, 0};
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

typedef struct cursor {
    char *buf;
    size_t len;  /* bytes of buf */
    size_t pos;  /* bytes of the whole output so far (saturating) */
    size_t fit;  /* end of the last whole line with room for the NUL after */
} cursor;

static void put(cursor *c, const char *s, size_t n)
{
    if (c->pos < c->len) {
        size_t room = c->len - c->pos;
        memcpy(c->buf + c->pos, s, n < room ? n : room);
    }
    c->pos = n > SIZE_MAX - c->pos ? SIZE_MAX : c->pos + n;
}

static void puts_(cursor *c, const char *s) { put(c, s, strlen(s)); }

static void end_line(cursor *c)
{
    put(c, "\n", 1);
    if (c->pos < c->len) c->fit = c->pos;
}

static void put_u64(cursor *c, uint64_t v)
{
    char tmp[20];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(c, tmp + i, sizeof tmp - i);
}

/* One series line: NAME{LABEL="value"[,decision="D"]} VALUE */
static void series(cursor *c, const char *metric, const char *label, const entry *e,
                   const char *decision, uint64_t value)
{
    puts_(c, metric);
    put(c, "{", 1);
    puts_(c, label);
    put(c, "=\"", 2);
    put(c, e->name, e->namelen);
    if (decision) {
        put(c, "\",decision=\"", 12);
        puts_(c, decision);
    }
    put(c, "\"} ", 3);
    put_u64(c, value);
    end_line(c);
}

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

/* What one object contributes to the families. */
typedef struct snapshot {
    sluice_stats d;          /* limiters and tables */
    uint64_t queued;         /* queues */
    sluice_table_stats t;    /* tables */
    uint64_t pending;        /* wheels */
    size_t ntop;             /* tables with a sketch: the keys refused most */
    sluice_top_entry top[SLUICE_METRICS_TOP_KEYS];
} snapshot;

typedef enum family_id {
    F_REQUESTS,
    F_PERMITS,
    F_PROBES,
    F_ASYNC_QUEUED,
    F_TABLE_KEYS,
    F_TABLE_RECLAIMED,
    F_TABLE_EVICTED,
    F_TABLE_REFUSED,
    F_TOP_REQUESTS,
    F_TOP_ERROR,
    F_WHEEL_PENDING
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
    {F_ASYNC_QUEUED, "sluice_async_queued", "gauge",
     "Asynchronous acquires waiting in the queue for their permits.", KB(K_QUEUE)},
    {F_TABLE_KEYS, "sluice_table_keys", "gauge", "Keys the table holds now.", KB(K_TABLE)},
    {F_TABLE_RECLAIMED, "sluice_table_keys_reclaimed_total", "counter",
     "Keys dropped because their limiter was back at rest (no decision changes).",
     KB(K_TABLE)},
    {F_TABLE_EVICTED, "sluice_table_keys_evicted_total", "counter",
     "Keys dropped while in use to make room (evict-lru tables only).", KB(K_TABLE)},
    {F_TABLE_REFUSED, "sluice_table_keys_refused_total", "counter",
     "Requests for a new key refused because the table was full of keys in use "
     "(also counted as denied requests).",
     KB(K_TABLE)},
    {F_TOP_REQUESTS, "sluice_table_refused_key_requests", "gauge",
     "Requests refused for the key, as estimated by the table's sketch of the keys "
     "refused most (at least the true number, at most that plus the error series); "
     "the top keys only.",
     KB(K_TABLE)},
    {F_TOP_ERROR, "sluice_table_refused_key_error", "gauge",
     "The most sluice_table_refused_key_requests can exceed the key's true refusals.",
     KB(K_TABLE)},
    {F_WHEEL_PENDING, "sluice_wheel_timers_pending", "gauge",
     "Timers scheduled and not yet fired or cancelled.", KB(K_WHEEL)},
};

static void read_object(const entry *e, family_id f, snapshot *s)
{
    switch (e->k) {
    case K_LIMITER:
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
        if (f == F_ASYNC_QUEUED) /* the getter takes the queue's lock: a cast, not a write */
            s->queued = sluice_queue_len((sluice_queue *)(uintptr_t)e->obj);
        break;
    case K_NONE:
        break;
    }
}

/* A key as a label value: the key's bytes with every backslash doubled,
 * every byte that is not part of printable UTF-8 (invalid sequences,
 * control characters) written as \xNN, and `\...` after a truncated key;
 * then escaped as the format asks (backslash and double quote).  Distinct
 * keys give distinct values: a backslash of the value is always followed by
 * a backslash, an x or three dots. */
static void put_key(cursor *c, const sluice_top_entry *t)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *k = t->key;
    for (size_t i = 0; i < t->keylen;) {
        unsigned b = k[i];
        size_t l = b < 0x20 || b == 0x7F ? 0 : utf8_len(k + i, t->keylen - i);
        if (l == 0) {
            char x[6] = {'\\', '\\', 'x', hex[b >> 4], hex[b & 15], 0};
            put(c, x, 5);
            i++;
        } else if (b == '\\') {
            put(c, "\\\\\\\\", 4);
            i++;
        } else if (b == '"') {
            put(c, "\\\"", 2);
            i++;
        } else {
            put(c, (const char *)k + i, l);
            i += l;
        }
    }
    if (t->truncated) put(c, "\\\\...", 5);
}

/* One line of the keys refused most: NAME{limit="...",key="..."} VALUE */
static void key_series(cursor *c, const char *metric, const entry *e,
                       const sluice_top_entry *t, uint64_t value)
{
    puts_(c, metric);
    put(c, "{limit=\"", 8);
    put(c, e->name, e->namelen);
    put(c, "\",key=\"", 7);
    put_key(c, t);
    put(c, "\"} ", 3);
    put_u64(c, value);
    end_line(c);
}

static void write_object(cursor *c, const family *f, const entry *e, const snapshot *s)
{
    const char *label = e->k == K_WHEEL ? "wheel" : e->k == K_QUEUE ? "queue" : "limit";
    switch (f->id) {
    case F_REQUESTS:
        series(c, f->name, label, e, "allowed", sat_add(s->d.requests_allowed, s->d.probes));
        series(c, f->name, label, e, "denied", s->d.requests_denied);
        break;
    case F_PERMITS:
        series(c, f->name, label, e, "allowed", s->d.permits_allowed);
        series(c, f->name, label, e, "denied", s->d.permits_denied);
        break;
    case F_PROBES: series(c, f->name, label, e, NULL, s->d.probes); break;
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
    }
}

int sluice_metrics_write(const sluice_metrics *m, char *buf, size_t len, size_t *needed)
{
    if (!m || (!buf && len > 0)) return SLUICE_EINVAL;
    sluice_metrics *mm = (sluice_metrics *)m; /* the mutex only */
    cursor c = {buf, len, 0, 0};
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
            if (lines) {
                memset(&s, 0, offsetof(snapshot, top));
                read_object(e, f->id, &s);
                /* the keys refused most: only tables with a sketch and a key */
                if (f->id == F_TOP_REQUESTS || f->id == F_TOP_ERROR) lines = s.ntop > 0;
            }
            if (lines) {
                if (!head) {
                    head = true;
                    puts_(&c, "# HELP ");
                    puts_(&c, f->name);
                    put(&c, " ", 1);
                    puts_(&c, f->help);
                    end_line(&c);
                    puts_(&c, "# TYPE ");
                    puts_(&c, f->name);
                    put(&c, " ", 1);
                    puts_(&c, f->type);
                    end_line(&c);
                }
                write_object(&c, f, e, &s);
            }
            pthread_mutex_unlock(&mm->mu);
        }
    }
    if (needed) *needed = c.pos;
    if (c.pos < len) {
        buf[c.pos] = '\0';
        return 0;
    }
    if (len > 0) buf[c.fit] = '\0';
    return SLUICE_ENOSPC;
}
