/* config.c -- sluice-rls: envoyproxy/ratelimit's YAML, unchanged, loaded
 * into a tree of descriptors.
 *
 * Map: units; the tree (nodes, sorting, lookup); YAML checks (keys, scalar
 * types, with the line of each node); the loader of one file; the loader of
 * a directory.
 *
 * The file is read with libyaml's document API, which keeps each node's
 * position, so every refusal names FILE:LINE and the offending token.  The
 * checks are envoyproxy/ratelimit's (src/config/config_impl.go): every
 * mapping key is a string and one of its known keys, every list holds
 * mappings, a domain is not empty and appears once, a descriptor has a
 * key, (key, value) is unique at its level, a unit is known unless the
 * limit is unlimited (then it must be absent), replaces entries have a
 * name and do not name their own limit.  YAML 1.1's implicit types decide
 * what is a string: a plain 0.25, 12, true or ~ key is not one.  Nesting
 * is bounded (64 levels) and so are node visits (aliases can make a small
 * file a huge tree).
 *
 * share_threshold (only where key or value holds a '*', as envoyproxy
 * checks) marks a wildcard node whose matches count under its pattern
 * (rls_config_find_match); value_to_metric on a node of a limit's path
 * gives the limit per-value series named as envoyproxy names its stats
 * (rls_match_entry.mval); quota_mode is kept on the limit (rls.c).
 *
 * sluice's extensions of rate_limit: `algorithm` (any of the six, default
 * fixed-window), `burst` (token-bucket's burst, leaky-bucket's capacity)
 * and `period` (any length sluice's spec grammar takes: 5m, 30s, 250ms)
 * instead of `unit`.
 *
 * With rls_config_use_shared_dir(), the tables are regions shared by every
 * sluice-rls process of the host that uses that directory (one file per
 * limit, named by its full key): several processes enforce one limit.
 *
 * With REDIS_URL (redis_backend.c) each limit is a limiter of the Redis
 * tier instead of a table; the default algorithm is then sliding-approx
 * (the tier has no fixed-window script) and the algorithms the tier has no
 * script for are refused at load.
 *
 * Each rate_limit gets one sluice table ("fixed-window RPU/WINDOW"), one
 * limiter per descriptor value.  The window is the unit's length in
 * seconds; the server decides on CLOCK_REALTIME nanoseconds, so windows
 * start on multiples of the unit since the Unix epoch, as envoyproxy's
 * (now / divider) keys do.  requests_per_unit 0 refuses everything (no
 * table).  Lookups walk the tree: per level, children sorted by (key,
 * value) for a binary search, wildcard values kept aside in file order.
 */
#define _GNU_SOURCE
#include "config.h"
#include "redis_backend.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#include "google/protobuf/struct.pb-c.h"

#define RLS_MAX_DEPTH 64                  /* nesting of descriptors */
#define RLS_MAX_FILE_BYTES (16u << 20)    /* one config file */
#define RLS_MAX_FILES 4096
#define RLS_MAX_VISITS 2000000            /* node visits per file (aliases) */

/* --------------------------------------------------------- shared tables */

static char g_shared_dir[1024]; /* "" : tables in this process */

int rls_config_use_shared_dir(const char *dir)
{
    if (!dir || !*dir) {
        g_shared_dir[0] = 0;
        return 0;
    }
    if (strlen(dir) >= sizeof g_shared_dir - 32)
        return -1;
    snprintf(g_shared_dir, sizeof g_shared_dir, "%s", dir);
    return 0;
}

bool rls_config_shared(void) { return g_shared_dir[0] != 0; }

/* A limit's table: in this process, or in the shared directory under a
 * name made from the limit's full key (FNV-1a), so that every sluice-rls
 * with that directory and the same limit uses one region. */
static sluice_table *make_table(const char *full_key, const char *spec, size_t max_keys, char *err, size_t errlen)
{
    if (!g_shared_dir[0])
        return sluice_table_new(spec, max_keys, err, errlen);
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)full_key; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    char path[sizeof g_shared_dir + 32];
    snprintf(path, sizeof path, "%s/%016llx.table", g_shared_dir, (unsigned long long)h);
    sluice_table *t = sluice_table_open(path, spec, max_keys, RLS_SHARED_KEY_BYTES, 0, err, errlen);
    if (!t && errlen) {
        /* "shared table PATH: REASON", cut to errlen (by hand: gcc -O3
         * sees that the path may not fit and would warn of snprintf). */
        char why[256];
        snprintf(why, sizeof why, "%s", err);
        const char *parts[] = {"shared table ", path, ": ", why};
        size_t off = 0;
        for (size_t i = 0; i < 4; i++) {
            for (const char *c = parts[i]; *c && off + 1 < errlen; c++)
                err[off++] = *c;
        }
        err[off] = 0;
    }
    return t;
}

/* ------------------------------------------------------------------ units */

uint64_t rls_unit_ns(int unit)
{
    const uint64_t s = 1000000000ull;
    switch (unit) {
    case RLS_UNIT_SECOND: return s;
    case RLS_UNIT_MINUTE: return 60 * s;
    case RLS_UNIT_HOUR: return 3600 * s;
    case RLS_UNIT_DAY: return 86400 * s;
    case RLS_UNIT_WEEK: return 7 * 86400 * s;
    case RLS_UNIT_MONTH: return 30 * 86400 * s;
    case RLS_UNIT_YEAR: return 365 * 86400 * s;
    default: return 0;
    }
}

static int unit_from_name(const char *s)
{
    static const char *const names[] = {"", "second", "minute", "hour", "day", "month", "year", "week"};
    for (int i = 1; i < 8; i++) {
        if (strcasecmp(s, names[i]) == 0)
            return i;
    }
    return RLS_UNIT_UNKNOWN;
}

/* ------------------------------------------------------------------- tree */

struct rls_node {
    char *key;
    size_t keylen;
    char *value; /* "" for a key alone; may hold '*' */
    size_t valuelen;
    bool wildcard;
    bool share;        /* share_threshold: every value the wildcard matches
                        * counts under the pattern (one counter) */
    bool value_to_metric; /* value_to_metric: the request's value in the
                           * metric name (rls_match_entry.mval) */
    int line;
    rls_limit *limit;
    rls_node **kids;   /* exact and key-only children, sorted by (key, value) */
    size_t nkids;
    rls_node **wilds;  /* wildcard children, file order */
    size_t nwilds;
};

typedef struct rls_domain {
    char *name;
    size_t namelen;
    rls_node root;
} rls_domain;

/* Override limits, made on first use: readers scan the published prefix
 * without a lock; makers hold the mutex. */
typedef struct override_set {
    pthread_mutex_t mu;
    atomic_size_t n;
    rls_limit *lim[RLS_MAX_OVERRIDES];
} override_set;

struct rls_config {
    rls_domain *domains;
    size_t ndomains;
    size_t nlimits;
    size_t max_keys;
    override_set *ov;
    bool ov_moved;     /* rls_config_adopt gave ov to a newer config */
    rls_limit **all;   /* every limit of the tree, for rls_config_adopt */
    size_t nall;
    bool has_replaces; /* a limit has `replaces` (rls.c then looks for them) */
};

static void node_clear(rls_node *n)
{
    for (size_t i = 0; i < n->nkids; i++) {
        node_clear(n->kids[i]);
        free(n->kids[i]);
    }
    for (size_t i = 0; i < n->nwilds; i++) {
        node_clear(n->wilds[i]);
        free(n->wilds[i]);
    }
    free(n->kids);
    free(n->wilds);
    if (n->limit) {
        if (!n->limit->table_moved) {
            sluice_table_free(n->limit->table);
            rls_redis_free(n->limit->redis);
        }
        free(n->limit->full_key);
        free(n->limit->name);
        free(n->limit->replaces);
        free(n->limit->metadata);
        if (n->limit->detail) {
            pthread_mutex_destroy(&n->limit->detail->mu);
            free(n->limit->detail);
        }
        free(n->limit);
    }
    free(n->key);
    free(n->value);
    memset(n, 0, sizeof *n);
}

rls_config *rls_config_new(size_t max_keys)
{
    rls_config *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->ov = calloc(1, sizeof *c->ov);
    if (!c->ov || pthread_mutex_init(&c->ov->mu, NULL) != 0) {
        free(c->ov);
        free(c);
        return NULL;
    }
    c->max_keys = max_keys ? max_keys : 1;
    return c;
}

/* The limit's RateLimit-Policy (sluice/http.h), named by its name or else
 * its full key, with bytes outside printable ASCII as '_'.  A limit that
 * cannot be described has none (no header items). */
static void make_policy(rls_limit *lim, const char *spec)
{
    char name[SLUICE_HTTP_NAME_MAX + 1], err[128];
    const char *src = lim->name[0] ? lim->name : lim->full_key;
    size_t n = 0;
    for (; src[n] && n < SLUICE_HTTP_NAME_MAX; n++)
        name[n] = src[n] >= 0x20 && src[n] <= 0x7e ? src[n] : '_';
    name[n] = 0;
    lim->has_policy = n > 0 && sluice_http_policy_init(&lim->policy, name, spec, err, sizeof err) == 0;
    size_t len = 0;
    lim->policy_item[0] = 0;
    if (lim->has_policy &&
        sluice_http_policy_value(&lim->policy, NULL, 0, lim->policy_item, sizeof lim->policy_item, &len) != 0)
        lim->policy_item[0] = 0;
}

const rls_limit *rls_config_override(const rls_config *cfg, uint32_t requests_per_unit, int unit)
{
    if (rls_unit_ns(unit) == 0)
        return NULL;
    override_set *ov = cfg->ov;
    size_t n = atomic_load_explicit(&ov->n, memory_order_acquire);
    for (size_t i = 0; i < n; i++) {
        if (ov->lim[i]->requests_per_unit == requests_per_unit && ov->lim[i]->unit == unit)
            return ov->lim[i];
    }
    rls_limit *found = NULL;
    pthread_mutex_lock(&ov->mu);
    n = atomic_load_explicit(&ov->n, memory_order_relaxed);
    for (size_t i = 0; i < n && !found; i++) {
        if (ov->lim[i]->requests_per_unit == requests_per_unit && ov->lim[i]->unit == unit)
            found = ov->lim[i];
    }
    if (!found && n < RLS_MAX_OVERRIDES) {
        rls_limit *lim = calloc(1, sizeof *lim);
        char spec[96], key[64], terr[256];
        snprintf(key, sizeof key, "override.%" PRIu32 "/%d", requests_per_unit, unit);
        if (lim) {
            lim->stats = &lim->stats_store;
            lim->full_key = strdup(key);
            lim->name = strdup("");
            lim->requests_per_unit = requests_per_unit;
            lim->unit = unit;
            lim->window_ns = rls_unit_ns(unit);
            /* On Redis: its default algorithm (config.c's head). */
            lim->algorithm = rls_redis_enabled() ? SLUICE_ALG_SLIDING_APPROX : SLUICE_ALG_FIXED_WINDOW;
            snprintf(spec, sizeof spec, "%s %" PRIu32 "/%" PRIu64 "s", sluice_algorithm_name(lim->algorithm),
                     requests_per_unit, (uint64_t)(lim->window_ns / 1000000000u));
            snprintf(lim->spec, sizeof lim->spec, "%s", spec);
            if (requests_per_unit > 0 && rls_redis_enabled())
                lim->redis = rls_redis_make(key, spec, terr, sizeof terr);
            else if (requests_per_unit > 0)
                lim->table = make_table(key, spec, cfg->max_keys, terr, sizeof terr);
            if ((lim->table || lim->redis) && lim->full_key)
                make_policy(lim, spec);
        }
        if (lim && lim->full_key && lim->name && (requests_per_unit == 0 || lim->table || lim->redis)) {
            ov->lim[n] = lim;
            atomic_store_explicit(&ov->n, n + 1, memory_order_release);
            found = lim;
        } else if (lim) {
            sluice_table_free(lim->table);
            rls_redis_free(lim->redis);
            free(lim->full_key);
            free(lim->name);
            free(lim);
        }
    }
    pthread_mutex_unlock(&ov->mu);
    return found;
}

void rls_config_free(rls_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < cfg->ndomains; i++) {
        node_clear(&cfg->domains[i].root);
        free(cfg->domains[i].name);
    }
    free(cfg->domains);
    free(cfg->all);
    for (size_t i = 0; !cfg->ov_moved && i < atomic_load(&cfg->ov->n); i++) {
        sluice_table_free(cfg->ov->lim[i]->table);
        rls_redis_free(cfg->ov->lim[i]->redis);
        free(cfg->ov->lim[i]->full_key);
        free(cfg->ov->lim[i]->name);
        free(cfg->ov->lim[i]);
    }
    if (!cfg->ov_moved) {
        pthread_mutex_destroy(&cfg->ov->mu);
        free(cfg->ov);
    }
    free(cfg);
}

size_t rls_config_domains(const rls_config *cfg) { return cfg ? cfg->ndomains : 0; }
size_t rls_config_limits(const rls_config *cfg) { return cfg ? cfg->nlimits : 0; }

static int cmp_bytes(const char *a, size_t al, const char *b, size_t bl)
{
    size_t m = al < bl ? al : bl;
    int c = m ? memcmp(a, b, m) : 0;
    if (c)
        return c;
    return al < bl ? -1 : al > bl;
}

static int cmp_kv(const char *k, size_t kl, const char *v, size_t vl, const rls_node *n)
{
    int c = cmp_bytes(k, kl, n->key, n->keylen);
    return c ? c : cmp_bytes(v, vl, n->value, n->valuelen);
}

static int cmp_nodes(const void *a, const void *b)
{
    const rls_node *x = *(rls_node *const *)a, *y = *(rls_node *const *)b;
    int c = cmp_kv(x->key, x->keylen, x->value, x->valuelen, y);
    if (c)
        return c;
    return (x->line > y->line) - (x->line < y->line);
}

static const rls_node *find_kid(const rls_node *n, const char *k, size_t kl, const char *v, size_t vl)
{
    size_t lo = 0, hi = n->nkids;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_kv(k, kl, v, vl, n->kids[mid]);
        if (c == 0)
            return n->kids[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* Does value v match pattern p, where each '*' matches any run of bytes?
 * Iterative, with one backtrack point: O(len(p) * len(v)) at worst. */
static bool glob_match(const char *p, size_t pl, const char *v, size_t vl)
{
    size_t i = 0, j = 0, star = SIZE_MAX, mark = 0;
    while (j < vl) {
        if (i < pl && p[i] == '*') {
            star = i++;
            mark = j;
        } else if (i < pl && p[i] == v[j]) {
            i++;
            j++;
        } else if (star != SIZE_MAX) {
            i = star + 1;
            j = ++mark;
        } else {
            return false;
        }
    }
    while (i < pl && p[i] == '*')
        i++;
    return i == pl;
}

bool rls_config_has_domain(const rls_config *cfg, const char *domain, size_t domainlen)
{
    for (size_t i = 0; cfg && i < cfg->ndomains; i++) {
        if (cmp_bytes(domain, domainlen, cfg->domains[i].name, cfg->domains[i].namelen) == 0)
            return true;
    }
    return false;
}

const rls_limit *rls_config_find(const rls_config *cfg, const char *domain, size_t domainlen,
                                 const char *const keys[], const size_t keylens[],
                                 const char *const values[], const size_t valuelens[], size_t n)
{
    return rls_config_find_match(cfg, domain, domainlen, keys, keylens, values, valuelens, n, NULL);
}

const rls_limit *rls_config_find_match(const rls_config *cfg, const char *domain, size_t domainlen,
                                       const char *const keys[], const size_t keylens[],
                                       const char *const values[], const size_t valuelens[], size_t n,
                                       rls_match_entry out[])
{
    if (!cfg || n == 0)
        return NULL;
    const rls_node *level = NULL;
    for (size_t i = 0; i < cfg->ndomains; i++) {
        if (cmp_bytes(domain, domainlen, cfg->domains[i].name, cfg->domains[i].namelen) == 0) {
            level = &cfg->domains[i].root;
            break;
        }
    }
    if (!level)
        return NULL;
    const rls_limit *found = NULL;
    for (size_t i = 0; i < n; i++) {
        const rls_node *next = NULL;
        if (valuelens[i] > 0)
            next = find_kid(level, keys[i], keylens[i], values[i], valuelens[i]);
        bool by_value = next != NULL;
        for (size_t w = 0; !next && w < level->nwilds; w++) {
            const rls_node *c = level->wilds[w];
            if (cmp_bytes(keys[i], keylens[i], c->key, c->keylen) == 0 &&
                glob_match(c->value, c->valuelen, values[i], valuelens[i]))
                next = c;
        }
        if (!next)
            next = find_kid(level, keys[i], keylens[i], "", 0);
        if (!next)
            return NULL;
        if (out) {
            rls_match_entry *m = &out[i];
            bool wild = !by_value && next->wildcard;
            m->share = wild && next->share ? next->value : NULL;
            m->sharelen = m->share ? next->valuelen : 0;
            if (wild && !next->share && next->value_to_metric) {
                m->mval = values[i];
                m->mvallen = valuelens[i];
            } else if (wild) {
                m->mval = next->value;
                m->mvallen = next->valuelen;
            } else if (by_value || next->value_to_metric) {
                m->mval = valuelens[i] ? values[i] : NULL;
                m->mvallen = valuelens[i];
            } else {
                m->mval = NULL;
                m->mvallen = 0;
            }
        }
        if (i == n - 1)
            found = next->limit;
        level = next;
    }
    return found;
}

/* ------------------------------------------------------------ YAML checks */

typedef struct loader {
    const char *file;
    yaml_document_t *doc;
    char *err;
    size_t errlen;
    rls_config *cfg;
    const char *domain;
    size_t budget; /* node visits left: aliases may repeat a subtree */
    bool v2m_path; /* a node from the domain to the one loading has value_to_metric */
} loader;

static int fail(loader *ld, const yaml_node_t *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(loader *ld, const yaml_node_t *at, const char *fmt, ...)
{
    if (ld->errlen == 0)
        return -1;
    int off = snprintf(ld->err, ld->errlen, "%s:%zu: ", ld->file, at ? (size_t)at->start_mark.line + 1 : (size_t)0);
    if (off < 0 || (size_t)off >= ld->errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->err + off, ld->errlen - (size_t)off, fmt, ap);
    va_end(ap);
    /* One line: a token quoted from the file may hold line breaks or other
     * control bytes (found by fuzz_rls_yaml). */
    for (char *c = ld->err + off; *c; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    }
    return -1;
}

static const char *scalar(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

/* YAML 1.1's implicit types of a plain scalar, as yaml.v2 resolves them. */
static bool is_null_scalar(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = scalar(n);
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static int bool_scalar(const yaml_node_t *n) /* 1, 0, or -1: not a bool */
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return -1;
    static const char *const t[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y"};
    static const char *const f[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N"};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (!strcmp(scalar(n), t[i]))
            return 1;
        if (!strcmp(scalar(n), f[i]))
            return 0;
    }
    return -1;
}

static bool is_number_scalar(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = scalar(n);
    if (*s == '+' || *s == '-')
        s++;
    if (!strcmp(s, ".inf") || !strcmp(s, ".Inf") || !strcmp(s, ".INF") || !strcmp(s, ".nan") ||
        !strcmp(s, ".NaN") || !strcmp(s, ".NAN"))
        return true;
    bool digit = false, dot = false;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        s += 2;
        if (!*s)
            return false;
        for (; *s; s++)
            if (!strchr("0123456789abcdefABCDEF_", *s))
                return false;
        return true;
    }
    for (; *s; s++) {
        if (*s >= '0' && *s <= '9')
            digit = true;
        else if (*s == '.' && !dot)
            dot = true;
        else if (*s == '_')
            continue;
        else if ((*s == 'e' || *s == 'E') && digit) {
            s++;
            if (*s == '+' || *s == '-')
                s++;
            if (!*s)
                return false;
            for (; *s; s++)
                if (*s < '0' || *s > '9')
                    return false;
            return true;
        } else
            return false;
    }
    return digit;
}

static bool is_string_key(const yaml_node_t *n)
{
    return n->type == YAML_SCALAR_NODE && !is_null_scalar(n) && bool_scalar(n) < 0 && !is_number_scalar(n);
}

static const char *const valid_keys[] = {
    "domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit", "unlimited",
    "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric",
    "share_threshold", "metadata",
    "algorithm", "burst", "period", /* sluice's extensions of rate_limit */
};

/* envoyproxy's validateYamlKeys: every key of every mapping (but under
 * metadata) is a known string, every list holds mappings. */
static int check_keys(loader *ld, yaml_node_t *map, int depth)
{
    if (depth > RLS_MAX_DEPTH)
        return fail(ld, map, "config error, nested deeper than %d levels", RLS_MAX_DEPTH);
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(ld->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(ld->doc, p->value);
        if (ld->budget == 0 || --ld->budget == 0)
            return fail(ld, map, "config error, more than %d nodes to visit (aliases?)", RLS_MAX_VISITS);
        if (!k || !v)
            return fail(ld, map, "config error, malformed mapping");
        if (!is_string_key(k))
            return fail(ld, k, "config error, key is not of type string: %s",
                        k->type == YAML_SCALAR_NODE ? scalar(k) : "(not a scalar)");
        bool known = false;
        for (size_t i = 0; i < sizeof valid_keys / sizeof valid_keys[0]; i++)
            known = known || !strcmp(scalar(k), valid_keys[i]);
        if (!known)
            return fail(ld, k, "config error, unknown key '%s'", scalar(k));
        if (!strcmp(scalar(k), "metadata"))
            continue;
        if (v->type == YAML_SEQUENCE_NODE) {
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                yaml_node_t *e = yaml_document_get_node(ld->doc, *it);
                if (!e || e->type != YAML_MAPPING_NODE)
                    return fail(ld, e ? e : v, "config error, yaml file contains list of type other than map: %s",
                                e && e->type == YAML_SCALAR_NODE ? scalar(e) : "(a list)");
                if (check_keys(ld, e, depth + 1) < 0)
                    return -1;
            }
        } else if (v->type == YAML_MAPPING_NODE) {
            if (check_keys(ld, v, depth + 1) < 0)
                return -1;
        }
    }
    return 0;
}

static yaml_node_t *get(loader *ld, yaml_node_t *map, const char *key)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(ld->doc, p->key);
        if (k && k->type == YAML_SCALAR_NODE && !strcmp(scalar(k), key))
            return yaml_document_get_node(ld->doc, p->value);
    }
    return NULL;
}

/* A string field: absent or null is "", any scalar is its text (yaml.v2
 * decodes 12 into a string field as "12"). */
static int get_string(loader *ld, yaml_node_t *map, const char *key, const char **out, size_t *len)
{
    yaml_node_t *v = get(ld, map, key);
    *out = "";
    *len = 0;
    if (!v || is_null_scalar(v))
        return 0;
    if (v->type != YAML_SCALAR_NODE)
        return fail(ld, v, "'%s' must be a string", key);
    *out = scalar(v);
    *len = v->data.scalar.length;
    if (strlen(*out) != *len)
        return fail(ld, v, "'%s' holds a NUL byte", key);
    return 0;
}

static int get_bool(loader *ld, yaml_node_t *map, const char *key, bool *out)
{
    yaml_node_t *v = get(ld, map, key);
    *out = false;
    if (!v || is_null_scalar(v))
        return 0;
    int b = bool_scalar(v);
    if (b < 0)
        return fail(ld, v, "'%s' must be true or false, not '%s'", key,
                    v->type == YAML_SCALAR_NODE ? scalar(v) : "(not a scalar)");
    *out = b == 1;
    return 0;
}

static int get_u32(loader *ld, yaml_node_t *map, const char *key, uint32_t *out)
{
    yaml_node_t *v = get(ld, map, key);
    *out = 0;
    if (!v || is_null_scalar(v))
        return 0;
    const char *s = v->type == YAML_SCALAR_NODE ? scalar(v) : "";
    uint64_t x = 0;
    const bool ok = v->type == YAML_SCALAR_NODE &&
                    v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                    sluice_parse_u64(s, strlen(s), UINT32_MAX, &x) == 0;
    if (!ok)
        return fail(ld, v, "'%s' must be an integer from 0 to 4294967295, not '%s'", key,
                    v->type == YAML_SCALAR_NODE ? s : "(not a scalar)");
    *out = (uint32_t)x;
    return 0;
}

static yaml_node_t *get_list(loader *ld, yaml_node_t *map, const char *key, int *bad)
{
    yaml_node_t *v = get(ld, map, key);
    *bad = 0;
    if (!v || is_null_scalar(v))
        return NULL;
    if (v->type != YAML_SEQUENCE_NODE) {
        *bad = fail(ld, v, "'%s' must be a list", key);
        return NULL;
    }
    return v;
}

/* ----------------------------------------------------------- one file */

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static int push(rls_node ***arr, size_t *n, rls_node *x)
{
    rls_node **a = realloc(*arr, (*n + 1) * sizeof *a);
    if (!a)
        return -1;
    a[(*n)++] = x;
    *arr = a;
    return 0;
}

/* A descriptor's `metadata` (any YAML under a mapping) as a
 * google.protobuf.Struct, as envoyproxy/ratelimit's parseMetadata makes it:
 * mappings are structs (keys scalars), sequences lists, null null, true and
 * false bools, plain numbers numbers, the rest strings.  NULL with the
 * reason in ld (out of memory, a non-scalar key, too deep). */
static Google__Protobuf__Struct *yaml_struct(loader *ld, yaml_node_t *map, int depth);

static Google__Protobuf__Value *yaml_value(loader *ld, yaml_node_t *n, int depth)
{
    Google__Protobuf__Value *v = malloc(sizeof *v);
    if (!v) {
        fail(ld, n, "out of memory");
        return NULL;
    }
    google__protobuf__value__init(v);
    if (ld->budget == 0 || --ld->budget == 0 || depth > RLS_MAX_DEPTH) {
        free(v);
        fail(ld, n, "metadata nested deeper than %d levels, or too many nodes", RLS_MAX_DEPTH);
        return NULL;
    }
    if (n->type == YAML_MAPPING_NODE) {
        v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE;
        v->struct_value = yaml_struct(ld, n, depth + 1);
        if (!v->struct_value) {
            free(v);
            return NULL;
        }
    } else if (n->type == YAML_SEQUENCE_NODE) {
        Google__Protobuf__ListValue *l = malloc(sizeof *l);
        size_t cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
        if (l)
            google__protobuf__list_value__init(l);
        if (l && cnt)
            l->values = calloc(cnt, sizeof *l->values);
        if (!l || (cnt && !l->values)) {
            free(l);
            free(v);
            fail(ld, n, "out of memory");
            return NULL;
        }
        v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE;
        v->list_value = l;
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
            yaml_node_t *e = yaml_document_get_node(ld->doc, *it);
            Google__Protobuf__Value *ev = e ? yaml_value(ld, e, depth + 1) : NULL;
            if (!ev) {
                protobuf_c_message_free_unpacked(&v->base, NULL);
                return NULL;
            }
            l->values[l->n_values++] = ev;
        }
    } else if (is_null_scalar(n)) {
        v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE;
    } else if (bool_scalar(n) >= 0) {
        v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE;
        v->bool_value = bool_scalar(n) == 1;
    } else if (is_number_scalar(n)) {
        v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
        v->number_value = strtod(scalar(n), NULL);
    } else {
        v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
        v->string_value = strdup(scalar(n));
        if (!v->string_value) {
            free(v);
            fail(ld, n, "out of memory");
            return NULL;
        }
    }
    return v;
}

static Google__Protobuf__Struct *yaml_struct(loader *ld, yaml_node_t *map, int depth)
{
    Google__Protobuf__Struct *st = malloc(sizeof *st);
    size_t cnt = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
    if (st)
        google__protobuf__struct__init(st);
    if (st && cnt)
        st->fields = calloc(cnt, sizeof *st->fields);
    if (!st || (cnt && !st->fields)) {
        free(st);
        fail(ld, map, "out of memory");
        return NULL;
    }
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(ld->doc, p->key), *v = yaml_document_get_node(ld->doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE) {
            protobuf_c_message_free_unpacked(&st->base, NULL);
            fail(ld, k ? k : map, "metadata keys must be strings");
            return NULL;
        }
        size_t j = 0; /* a repeated key: the last one wins, as in a Go map */
        while (j < st->n_fields && strcmp(st->fields[j]->key, scalar(k)) != 0)
            j++;
        Google__Protobuf__Value *val = yaml_value(ld, v, depth + 1);
        if (!val) {
            protobuf_c_message_free_unpacked(&st->base, NULL);
            return NULL;
        }
        if (j < st->n_fields) {
            protobuf_c_message_free_unpacked(&st->fields[j]->value->base, NULL);
            st->fields[j]->value = val;
            continue;
        }
        Google__Protobuf__Struct__FieldsEntry *e = malloc(sizeof *e);
        if (e)
            google__protobuf__struct__fields_entry__init(e);
        if (!e || !(e->key = strdup(scalar(k)))) {
            free(e);
            protobuf_c_message_free_unpacked(&val->base, NULL);
            protobuf_c_message_free_unpacked(&st->base, NULL);
            fail(ld, k, "out of memory");
            return NULL;
        }
        e->value = val;
        st->fields[st->n_fields++] = e;
    }
    return st;
}

static int load_limit(loader *ld, yaml_node_t *desc, yaml_node_t *rl, rls_node *node, const char *full_key)
{
    if (rl->type != YAML_MAPPING_NODE)
        return fail(ld, rl, "'rate_limit' must be a mapping");
    const char *unit_s, *name, *alg, *period;
    size_t unit_len, name_len, alg_len, period_len;
    uint32_t rpu, burst;
    bool unlimited, shadow;
    if (get_string(ld, rl, "unit", &unit_s, &unit_len) < 0 || get_string(ld, rl, "name", &name, &name_len) < 0 ||
        get_u32(ld, rl, "requests_per_unit", &rpu) < 0 || get_bool(ld, rl, "unlimited", &unlimited) < 0 ||
        get_bool(ld, desc, "shadow_mode", &shadow) < 0 || get_string(ld, rl, "algorithm", &alg, &alg_len) < 0 ||
        get_string(ld, rl, "period", &period, &period_len) < 0 || get_u32(ld, rl, "burst", &burst) < 0)
        return -1;
    int unit = unit_from_name(unit_s);
    if (unlimited && unit != RLS_UNIT_UNKNOWN)
        return fail(ld, get(ld, rl, "unit"), "should not specify rate limit unit when unlimited");
    if (unlimited && (period_len || alg_len || get(ld, rl, "burst")))
        return fail(ld, rl, "should not specify period, algorithm or burst when unlimited");
    if (period_len && unit_len)
        return fail(ld, get(ld, rl, "period"), "give 'unit' or 'period', not both");
    if (!unlimited && unit == RLS_UNIT_UNKNOWN && !period_len)
        return fail(ld, get(ld, rl, "unit") ? get(ld, rl, "unit") : rl, "invalid rate limit unit '%s'", unit_s);
    /* sluice's extensions: algorithm (default fixed-window), burst, period. */
    /* On Redis the default is sliding-approx: the tier has no fixed-window
     * script, and sliding-approx never admits more in an aligned window. */
    int algo = rls_redis_enabled() ? SLUICE_ALG_SLIDING_APPROX : SLUICE_ALG_FIXED_WINDOW;
    if (alg_len) {
        algo = -1;
        for (int a = 0; a <= SLUICE_ALG_LEAKY_BUCKET; a++) {
            if (sluice_algorithm_name(a) && !strcmp(alg, sluice_algorithm_name(a)))
                algo = a;
        }
        if (algo < 0)
            return fail(ld, get(ld, rl, "algorithm"),
                        "unknown algorithm '%s' (want fixed-window, sliding-log, sliding-wheel, sliding-approx, "
                        "token-bucket or leaky-bucket)", alg);
    }
    if (get(ld, rl, "burst") && !is_null_scalar(get(ld, rl, "burst"))) {
        if (algo != SLUICE_ALG_TOKEN_BUCKET && algo != SLUICE_ALG_LEAKY_BUCKET)
            return fail(ld, get(ld, rl, "burst"), "'burst' applies to token-bucket and leaky-bucket only");
        if (burst == 0)
            return fail(ld, get(ld, rl, "burst"), "'burst' must be at least 1");
    }
    int bad;
    yaml_node_t *rep = get_list(ld, rl, "replaces", &bad);
    if (bad)
        return -1;
    size_t rbytes = 0, nrep = 0;
    for (yaml_node_item_t *it = rep ? rep->data.sequence.items.start : NULL; rep && it < rep->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(ld->doc, *it);
        const char *rn;
        size_t rnl;
        if (!e || e->type != YAML_MAPPING_NODE)
            return fail(ld, rep, "config error, yaml file contains list of type other than map");
        if (get_string(ld, e, "name", &rn, &rnl) < 0)
            return -1;
        if (rnl == 0)
            return fail(ld, e, "should not have an empty replaces entry");
        if (!strcmp(rn, name))
            return fail(ld, e, "replaces should not contain name of same descriptor");
        rbytes += strlen(rn) + 1;
        nrep++;
    }
    rls_limit *lim = calloc(1, sizeof *lim);
    if (!lim)
        return fail(ld, rl, "out of memory");
    lim->stats = &lim->stats_store;
    node->limit = lim;
    if (nrep) { /* the names, packed: checked above, copied now */
        lim->replaces = malloc(rbytes);
        if (!lim->replaces)
            return fail(ld, rl, "out of memory");
        size_t off = 0;
        for (yaml_node_item_t *it = rep->data.sequence.items.start; it < rep->data.sequence.items.top; it++) {
            const char *rn;
            size_t rnl;
            if (get_string(ld, yaml_document_get_node(ld->doc, *it), "name", &rn, &rnl) < 0)
                return -1;
            size_t k = strlen(rn) + 1;
            memcpy(lim->replaces + off, rn, k);
            off += k;
        }
        lim->nreplaces = nrep;
        ld->cfg->has_replaces = true;
    }
    lim->full_key = strdup(full_key);
    lim->name = dup_n(name, name_len);
    if (!lim->full_key || !lim->name)
        return fail(ld, rl, "out of memory");
    lim->requests_per_unit = rpu;
    lim->unit = unit;
    lim->window_ns = rls_unit_ns(unit);
    lim->unlimited = unlimited;
    lim->shadow_mode = shadow;
    if (get_bool(ld, desc, "quota_mode", &lim->quota_mode) < 0)
        return -1;
    bool detailed;
    if (get_bool(ld, desc, "detailed_metric", &detailed) < 0)
        return -1;
    yaml_node_t *md = get(ld, desc, "metadata");
    if (md && !is_null_scalar(md)) { /* kept packed: each answer unpacks its own copy */
        if (md->type != YAML_MAPPING_NODE)
            return fail(ld, md, "'metadata' must be a mapping");
        Google__Protobuf__Struct *st = yaml_struct(ld, md, 0);
        if (!st)
            return -1;
        lim->metadata_len = protobuf_c_message_get_packed_size(&st->base);
        lim->metadata = malloc(lim->metadata_len ? lim->metadata_len : 1);
        if (lim->metadata)
            protobuf_c_message_pack(&st->base, lim->metadata);
        protobuf_c_message_free_unpacked(&st->base, NULL);
        if (!lim->metadata)
            return fail(ld, md, "out of memory");
    }
    lim->value_to_metric = !detailed && ld->v2m_path; /* detailed_metric takes precedence */
    if (detailed || lim->value_to_metric) {
        lim->detail = calloc(1, sizeof *lim->detail);
        if (!lim->detail)
            return fail(ld, rl, "out of memory");
        pthread_mutex_init(&lim->detail->mu, NULL);
    }
    lim->algorithm = algo;
    if (!unlimited) {
        char per[48], terr[256];
        sluice_spec_info info;
        if (period_len >= sizeof per - 1)
            return fail(ld, get(ld, rl, "period"), "period '%s' is too long", period);
        if (period_len)
            snprintf(per, sizeof per, "%s", period);
        else
            snprintf(per, sizeof per, "%" PRIu64 "s", (uint64_t)(lim->window_ns / 1000000000u));
        /* A limit of 0 refuses everything (no table): its spec is checked
         * with 1. */
        int n = snprintf(lim->spec, sizeof lim->spec, "%s %" PRIu32 "/%s", sluice_algorithm_name(algo),
                         rpu ? rpu : 1, per);
        if (burst && n > 0 && (size_t)n < sizeof lim->spec)
            snprintf(lim->spec + n, sizeof lim->spec - (size_t)n, " %s=%" PRIu32,
                     algo == SLUICE_ALG_TOKEN_BUCKET ? "burst" : "capacity", burst);
        if (sluice_spec_parse(lim->spec, &info, terr, sizeof terr) != 0)
            return fail(ld, period_len ? get(ld, rl, "period") : rl, "rate limit '%s': %s", lim->spec, terr);
        lim->window_ns = info.period_ns;
        if (period_len) { /* the unit reported: the one of that length, if any */
            for (int u = RLS_UNIT_SECOND; u <= RLS_UNIT_WEEK; u++) {
                if (rls_unit_ns(u) == info.period_ns)
                    lim->unit = u;
            }
        }
        if (rpu > 0 && rls_redis_enabled()) {
            lim->redis = rls_redis_make(full_key, lim->spec, terr, sizeof terr);
            if (!lim->redis)
                return fail(ld, alg_len ? get(ld, rl, "algorithm") : rl, "rate limit '%s' on Redis: %s", lim->spec,
                            terr);
            make_policy(lim, lim->spec);
        } else if (rpu > 0) {
            lim->table = make_table(full_key, lim->spec, ld->cfg->max_keys, terr, sizeof terr);
            if (!lim->table)
                return fail(ld, rl, "rate limit '%s': %s", lim->spec, terr);
            make_policy(lim, lim->spec);
        }
    }
    rls_limit **all = realloc(ld->cfg->all, (ld->cfg->nall + 1) * sizeof *all);
    if (!all)
        return fail(ld, rl, "out of memory");
    ld->cfg->all = all;
    all[ld->cfg->nall++] = lim;
    ld->cfg->nlimits++;
    return 0;
}

static int load_descriptors(loader *ld, yaml_node_t *list, rls_node *parent, const char *parent_key, int depth)
{
    if (depth > RLS_MAX_DEPTH)
        return fail(ld, list, "descriptors nested deeper than %d levels", RLS_MAX_DEPTH);
    for (yaml_node_item_t *it = list->data.sequence.items.start; it < list->data.sequence.items.top; it++) {
        yaml_node_t *d = yaml_document_get_node(ld->doc, *it);
        if (ld->budget == 0 || --ld->budget == 0)
            return fail(ld, list, "config error, more than %d nodes to visit (aliases?)", RLS_MAX_VISITS);
        if (!d || d->type != YAML_MAPPING_NODE)
            return fail(ld, d ? d : list, "config error, yaml file contains list of type other than map");
        const char *key, *value;
        size_t kl, vl;
        if (get_string(ld, d, "key", &key, &kl) < 0 || get_string(ld, d, "value", &value, &vl) < 0)
            return -1;
        if (kl == 0)
            return fail(ld, d, "descriptor has empty key");
        rls_node *n = calloc(1, sizeof *n);
        if (!n)
            return fail(ld, d, "out of memory");
        n->key = dup_n(key, kl);
        n->value = dup_n(value, vl);
        n->keylen = kl;
        n->valuelen = vl;
        n->line = (int)d->start_mark.line + 1;
        n->wildcard = memchr(value, '*', vl) != NULL;
        bool share;
        if (get_bool(ld, d, "share_threshold", &share) < 0 ||
            get_bool(ld, d, "value_to_metric", &n->value_to_metric) < 0) {
            free(n->key);
            free(n->value);
            free(n);
            return -1;
        }
        /* envoyproxy/ratelimit: only where the key or value holds a '*' */
        if (share && !n->wildcard && !memchr(key, '*', kl)) {
            free(n->key);
            free(n->value);
            free(n);
            return fail(ld, d, "share_threshold can only be used with wildcard values (containing '*'), but found "
                               "key '%s%s%s'", key, vl ? "_" : "", value);
        }
        n->share = share;
        if (!n->key || !n->value || push(n->wildcard ? &parent->wilds : &parent->kids,
                                         n->wildcard ? &parent->nwilds : &parent->nkids, n) < 0) {
            node_clear(n);
            free(n);
            return fail(ld, d, "out of memory");
        }
        /* (key, value) unique at its level: wildcards by a scan here, the
         * others after the sort below. */
        for (size_t w = 0; n->wildcard && w + 1 < parent->nwilds; w++) {
            if (cmp_kv(key, kl, value, vl, parent->wilds[w]) == 0)
                return fail(ld, d, "duplicate descriptor composite key '%s%s_%s'", parent_key, key, value);
        }
        size_t fkl = strlen(parent_key) + kl + vl + 2;
        char *fk = malloc(fkl + 1);
        if (!fk)
            return fail(ld, d, "out of memory");
        snprintf(fk, fkl + 1, "%s%s%s%s", parent_key, key, vl ? "_" : "", value);
        int rc = 0;
        bool v2m_above = ld->v2m_path;
        ld->v2m_path = v2m_above || n->value_to_metric;
        yaml_node_t *rl = get(ld, d, "rate_limit");
        if (rl && !is_null_scalar(rl))
            rc = load_limit(ld, d, rl, n, fk);
        int bad = 0;
        yaml_node_t *sub = rc == 0 ? get_list(ld, d, "descriptors", &bad) : NULL;
        if (rc == 0 && bad)
            rc = -1;
        if (rc == 0 && sub) {
            size_t l = strlen(fk);
            char *pk = malloc(l + 2);
            if (!pk) {
                rc = fail(ld, d, "out of memory");
            } else {
                memcpy(pk, fk, l);
                pk[l] = '.';
                pk[l + 1] = 0;
                rc = load_descriptors(ld, sub, n, pk, depth + 1);
                free(pk);
            }
        }
        ld->v2m_path = v2m_above;
        free(fk);
        if (rc < 0)
            return -1;
    }
    if (parent->nkids > 1) {
        qsort(parent->kids, parent->nkids, sizeof parent->kids[0], cmp_nodes);
        for (size_t i = 1; i < parent->nkids; i++) {
            const rls_node *a = parent->kids[i - 1], *b = parent->kids[i];
            if (cmp_kv(a->key, a->keylen, a->value, a->valuelen, b) == 0) {
                snprintf(ld->err, ld->errlen, "%s:%d: duplicate descriptor composite key '%s%s%s%s'", ld->file,
                         b->line, parent_key, b->key, b->valuelen ? "_" : "", b->value);
                for (char *c = ld->err; ld->errlen && *c; c++) {
                    if ((unsigned char)*c < 0x20 || *c == 0x7f)
                        *c = '?';
                }
                return -1;
            }
        }
    }
    return 0;
}

int rls_config_add_text(rls_config *cfg, const char *name, const char *text, size_t len, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    loader ld = {name, &doc, err, errlen, cfg, NULL, RLS_MAX_VISITS, false};
    if (errlen)
        err[0] = 0;
    if (!yaml_parser_initialize(&parser))
        return fail(&ld, NULL, "out of memory");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "%s:%zu: error loading yaml file: %s", name, (size_t)parser.problem_mark.line + 1,
                 parser.problem ? parser.problem : "malformed YAML");
        yaml_parser_delete(&parser);
        return -1;
    }
    int rc = -1;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    rls_domain dom = {0};
    if (!root || is_null_scalar(root)) {
        rc = fail(&ld, root, "config file cannot have empty domain");
        goto out;
    }
    if (root->type != YAML_MAPPING_NODE) {
        rc = fail(&ld, root, "error loading yaml file: the top level is not a mapping");
        goto out;
    }
    if (check_keys(&ld, root, 0) < 0)
        goto out;
    const char *domain;
    size_t dl;
    if (get_string(&ld, root, "domain", &domain, &dl) < 0)
        goto out;
    if (dl == 0) {
        rc = fail(&ld, root, "config file cannot have empty domain");
        goto out;
    }
    for (size_t i = 0; i < cfg->ndomains; i++) {
        if (cmp_bytes(domain, dl, cfg->domains[i].name, cfg->domains[i].namelen) == 0) {
            rc = fail(&ld, get(&ld, root, "domain"), "duplicate domain '%s' in config file", domain);
            goto out;
        }
    }
    int bad;
    yaml_node_t *list = get_list(&ld, root, "descriptors", &bad);
    if (bad)
        goto out;
    dom.name = dup_n(domain, dl);
    dom.namelen = dl;
    if (!dom.name) {
        rc = fail(&ld, root, "out of memory");
        goto out;
    }
    size_t limits_before = cfg->nlimits, all_before = cfg->nall;
    char *pk = malloc(dl + 2);
    if (!pk) {
        rc = fail(&ld, root, "out of memory");
        goto out;
    }
    snprintf(pk, dl + 2, "%s.", domain);
    rc = list ? load_descriptors(&ld, list, &dom.root, pk, 0) : 0;
    free(pk);
    if (rc == 0) {
        rls_domain *d = realloc(cfg->domains, (cfg->ndomains + 1) * sizeof *d);
        if (!d) {
            rc = fail(&ld, root, "out of memory");
        } else {
            cfg->domains = d;
            d[cfg->ndomains++] = dom;
            memset(&dom, 0, sizeof dom);
        }
    }
    if (rc < 0) {
        cfg->nlimits = limits_before;
        cfg->nall = all_before;
    }
out:
    node_clear(&dom.root);
    free(dom.name);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc < 0 ? -1 : 0;
}

size_t rls_config_dump(const rls_config *cfg, char *buf, size_t cap)
{
    static const char *const units[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK"};
    size_t off = 0;
    if (cap == 0)
        return 0;
    buf[0] = 0;
    for (size_t i = 0; cfg && i < cfg->nall; i++) {
        const rls_limit *l = cfg->all[i];
        int n = snprintf(buf + off, cap - off, "%s: unit=%s requests_per_unit=%" PRIu32 ", shadow_mode: %s, unlimited: %s\n",
                         l->full_key, units[l->unit >= 0 && l->unit < 8 ? l->unit : 0], l->requests_per_unit,
                         l->shadow_mode ? "true" : "false", l->unlimited ? "true" : "false");
        if (n < 0 || (size_t)n >= cap - off) {
            buf[off] = 0;
            break;
        }
        off += (size_t)n;
    }
    return off;
}

/* A label value with backslash, double quote and newline escaped, as the
 * text format asks; returns the bytes written, or cap when it does not fit. */
static size_t put_label(char *buf, size_t cap, const char *v)
{
    size_t off = 0;
    for (; *v; v++) {
        const char *e = *v == '\\' ? "\\\\" : *v == '"' ? "\\\"" : *v == '\n' ? "\\n" : NULL;
        size_t n = e ? 2 : 1;
        if (cap - off <= n)
            return cap;
        if (e)
            memcpy(buf + off, e, 2);
        else
            buf[off] = *v;
        off += n;
    }
    buf[off] = 0;
    return off;
}

size_t rls_config_write_metrics(const rls_config *cfg, char *buf, size_t cap)
{
    static const char head[] = "# HELP sluice_rls_rule_decisions_total Descriptors decided by each limit of the config.\n"
                               "# TYPE sluice_rls_rule_decisions_total counter\n";
    static const char *const dec[3] = {"allowed", "denied", "shadow_denied"};
    if (cap < sizeof head)
        return cap;
    memcpy(buf, head, sizeof head);
    size_t off = sizeof head - 1;
    for (size_t i = 0; cfg && i < cfg->nall; i++) {
        const rls_limit *l = cfg->all[i];
        uint64_t v[3] = {atomic_load_explicit(&l->stats->allowed, memory_order_relaxed),
                         atomic_load_explicit(&l->stats->denied, memory_order_relaxed),
                         atomic_load_explicit(&l->stats->shadow_denied, memory_order_relaxed)};
        for (int d = 0; d < 3; d++) {
            static const char a[] = "sluice_rls_rule_decisions_total{rule=\"", b[] = "\",name=\"";
            if (cap - off <= sizeof a)
                return cap;
            memcpy(buf + off, a, sizeof a);
            off += sizeof a - 1;
            size_t n = put_label(buf + off, cap - off, l->full_key);
            if (n == cap - off || cap - off - n <= sizeof b)
                return cap;
            off += n;
            memcpy(buf + off, b, sizeof b);
            off += sizeof b - 1;
            n = put_label(buf + off, cap - off, l->name);
            if (n == cap - off)
                return cap;
            off += n;
            int m = snprintf(buf + off, cap - off, "\",decision=\"%s\"} %" PRIu64 "\n", dec[d], v[d]);
            if (m < 0 || (size_t)m >= cap - off)
                return cap;
            off += (size_t)m;
        }
    }
    /* detailed_metric: the values' series */
    bool any = false;
    for (size_t i = 0; cfg && i < cfg->nall && !any; i++)
        any = cfg->all[i]->detail != NULL;
    static const char dhead[] =
        "# HELP sluice_rls_rule_detail_decisions_total Descriptors decided by each limit with detailed_metric "
        "or value_to_metric, per descriptor value (the first 64 values of each).\n"
        "# TYPE sluice_rls_rule_detail_decisions_total counter\n";
    if (any) {
        if (cap - off <= sizeof dhead)
            return cap;
        memcpy(buf + off, dhead, sizeof dhead);
        off += sizeof dhead - 1;
    }
    for (size_t i = 0; any && i < cfg->nall; i++) {
        rls_detail *d = cfg->all[i]->detail;
        if (!d)
            continue;
        pthread_mutex_lock(&d->mu);
        for (size_t k = 0; k < d->n && off < cap; k++) {
            for (int j = 0; j < 3 && off < cap; j++) {
                static const char a[] = "sluice_rls_rule_detail_decisions_total{rule=\"", b[] = "\",descriptor=\"";
                if (cap - off <= sizeof a) {
                    off = cap;
                    break;
                }
                memcpy(buf + off, a, sizeof a);
                off += sizeof a - 1;
                size_t m = put_label(buf + off, cap - off, cfg->all[i]->full_key);
                if (m == cap - off || cap - off - m <= sizeof b) {
                    off = cap;
                    break;
                }
                off += m;
                memcpy(buf + off, b, sizeof b);
                off += sizeof b - 1;
                m = put_label(buf + off, cap - off, d->e[k].key);
                if (m == cap - off) {
                    off = cap;
                    break;
                }
                off += m;
                int w = snprintf(buf + off, cap - off, "\",decision=\"%s\"} %" PRIu64 "\n", dec[j], d->e[k].v[j]);
                off = w < 0 || (size_t)w >= cap - off ? cap : off + (size_t)w;
            }
        }
        pthread_mutex_unlock(&d->mu);
        if (off >= cap)
            return cap;
    }
    /* The Redis backend: its counters summed over the limits. */
    if (cfg && rls_redis_enabled()) {
        uint64_t sums[RLS_REDIS_SUMS] = {0};
        for (size_t i = 0; i < cfg->nall; i++) {
            if (cfg->all[i]->redis)
                rls_redis_stats_add(cfg->all[i]->redis, sums);
        }
        size_t nov = atomic_load_explicit(&cfg->ov->n, memory_order_acquire);
        for (size_t i = 0; i < nov; i++) {
            if (cfg->ov->lim[i]->redis)
                rls_redis_stats_add(cfg->ov->lim[i]->redis, sums);
        }
        static const char *const fam[RLS_REDIS_SUMS][2] = {
            {"sluice_rls_redis_round_trips_total", "Redis script calls sent (EVALSHA or EVAL), over every limit."},
            {"sluice_rls_redis_fallbacks_total", "Decisions made by the failure policy because Redis could not."},
            {"sluice_rls_redis_errors_total", "Redis calls that failed (connect, timeout, I/O, reply, pool, circuit)."},
            {"sluice_rls_redis_local_decisions_total", "Decisions answered without a round trip (a lease, or a "
                                                       "remembered refusal)."}};
        for (int k = 0; k < RLS_REDIS_SUMS && off < cap; k++) {
            int w = snprintf(buf + off, cap - off, "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n", fam[k][0],
                             fam[k][1], fam[k][0], fam[k][0], sums[k]);
            off = w < 0 || (size_t)w >= cap - off ? cap : off + (size_t)w;
        }
    }
    return off;
}

bool rls_config_has_replaces(const rls_config *cfg) { return cfg && cfg->has_replaces; }

/* ---------------------------------------------------------------- reload */

static int cmp_limit_keys(const void *a, const void *b)
{
    return strcmp((*(rls_limit *const *)a)->full_key, (*(rls_limit *const *)b)->full_key);
}

size_t rls_config_adopt(rls_config *nw, rls_config *old, uint64_t now_ns)
{
    size_t kept = 0;
    rls_limit **sorted = old->nall ? malloc(old->nall * sizeof *sorted) : NULL;
    if (sorted) {
        memcpy(sorted, old->all, old->nall * sizeof *sorted);
        qsort(sorted, old->nall, sizeof *sorted, cmp_limit_keys);
    }
    for (size_t i = 0; sorted && i < nw->nall; i++) {
        rls_limit *l = nw->all[i];
        if (!l->table && !l->redis)
            continue;
        rls_limit **hit = bsearch(&l, sorted, old->nall, sizeof *sorted, cmp_limit_keys);
        rls_limit *o = hit ? *hit : NULL;
        if (o) { /* the rule's series go on (decisions made between this and the swap stay with old) */
            atomic_store_explicit(&l->stats->allowed, atomic_load_explicit(&o->stats->allowed, memory_order_relaxed),
                                  memory_order_relaxed);
            atomic_store_explicit(&l->stats->denied, atomic_load_explicit(&o->stats->denied, memory_order_relaxed),
                                  memory_order_relaxed);
            atomic_store_explicit(&l->stats->shadow_denied,
                                  atomic_load_explicit(&o->stats->shadow_denied, memory_order_relaxed),
                                  memory_order_relaxed);
        }
        if (l->redis) {
            /* The counters are in Redis, under keys that name the spec: the
             * same spec goes on where it was; the old limiter is kept for
             * its connections and leases. */
            if (o && o->redis && !o->table_moved && strcmp(o->spec, l->spec) == 0) {
                rls_redis_free(l->redis);
                l->redis = o->redis;
                o->table_moved = true;
                kept++;
            }
            continue;
        }
        if (!o || !o->table || o->table_moved || o->algorithm != l->algorithm || o->window_ns != l->window_ns)
            continue;
        if (strcmp(o->spec, l->spec) != 0) {
            char err[256];
            if (sluice_table_reconfigure_at(o->table, l->spec, now_ns, err, sizeof err) != 0)
                continue; /* l keeps its fresh table */
        }
        sluice_table_free(l->table);
        l->table = o->table;
        o->table_moved = true;
        kept++;
    }
    free(sorted);
    if (!old->ov_moved) {
        for (size_t i = 0; i < atomic_load(&nw->ov->n); i++) {
            sluice_table_free(nw->ov->lim[i]->table);
            rls_redis_free(nw->ov->lim[i]->redis);
            free(nw->ov->lim[i]->full_key);
            free(nw->ov->lim[i]->name);
            free(nw->ov->lim[i]);
        }
        pthread_mutex_destroy(&nw->ov->mu);
        free(nw->ov);
        nw->ov = old->ov;
        old->ov_moved = true;
    }
    return kept;
}

/* ------------------------------------------------------------ directory */

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_yaml_name(const char *n)
{
    size_t l = strlen(n);
    if (n[0] == '.')
        return false;
    return (l > 5 && !strcmp(n + l - 5, ".yaml")) || (l > 4 && !strcmp(n + l - 4, ".yml"));
}

rls_config *rls_config_load_dir(const char *dir, size_t max_keys, char *err, size_t errlen)
{
    if (errlen)
        err[0] = 0;
    rls_config *cfg = rls_config_new(max_keys);
    if (!cfg) {
        snprintf(err, errlen, "%s:0: out of memory", dir);
        return NULL;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s:0: cannot open the config directory: %s", dir, strerror(errno));
        rls_config_free(cfg);
        return NULL;
    }
    char **names = NULL;
    size_t n = 0;
    bool ok = true;
    struct dirent *e;
    while (ok && (e = readdir(d)) != NULL) {
        if (!is_yaml_name(e->d_name))
            continue;
        if (n >= RLS_MAX_FILES) {
            snprintf(err, errlen, "%s:0: more than %d config files", dir, RLS_MAX_FILES);
            ok = false;
            break;
        }
        char **nn = realloc(names, (n + 1) * sizeof *nn);
        char *s = strdup(e->d_name);
        if (!nn || !s) {
            free(s);
            if (nn)
                names = nn;
            snprintf(err, errlen, "%s:0: out of memory", dir);
            ok = false;
            break;
        }
        names = nn;
        names[n++] = s;
    }
    closedir(d);
    if (ok && n > 1)
        qsort(names, n, sizeof names[0], cmp_names);
    for (size_t i = 0; ok && i < n; i++) {
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= sizeof path) {
            snprintf(err, errlen, "%s/%s:0: path too long", dir, names[i]);
            ok = false;
            break;
        }
        FILE *f = fopen(path, "rb");
        struct stat st;
        if (!f || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (off_t)RLS_MAX_FILE_BYTES) {
            snprintf(err, errlen, "%s:0: %s", path,
                     !f ? strerror(errno) : "not a regular file of at most 16 MiB");
            if (f)
                fclose(f);
            ok = false;
            break;
        }
        size_t len = (size_t)st.st_size;
        char *text = malloc(len + 1);
        if (!text || fread(text, 1, len, f) != len) {
            snprintf(err, errlen, "%s:0: %s", path, text ? "short read" : "out of memory");
            free(text);
            fclose(f);
            ok = false;
            break;
        }
        fclose(f);
        text[len] = 0;
        if (rls_config_add_text(cfg, path, text, len, err, errlen) < 0)
            ok = false;
        free(text);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (!ok) {
        rls_config_free(cfg);
        return NULL;
    }
    return cfg;
}
