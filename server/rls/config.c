/* config.c -- sluice-rls: the config at run time, a tree of descriptors
 * loaded from envoyproxy/ratelimit's YAML (config_yaml.c reads the YAML).
 *
 * Map: shared tables; units; the tree (nodes, override limits, freeing,
 * sorting, lookup); the dump and the metrics; reload (rls_config_adopt);
 * the loader of a directory (each file through rls_config_add_text,
 * config_yaml.c).  The tree's types are in config_tree.h, which only the
 * two files include.
 *
 * share_threshold (only where key or value holds a '*', as envoyproxy
 * checks) marks a wildcard node whose matches count under its pattern
 * (rls_config_find_match); value_to_metric on a node of a limit's path
 * gives the limit per-value series named as envoyproxy names its stats
 * (rls_match_entry.mval); quota_mode is kept on the limit (rls.c).
 *
 * With rls_config_use_shared_dir(), the tables are regions shared by every
 * sluice-rls process of the host that uses that directory (one file per
 * limit, named by its full key): several processes enforce one limit.
 *
 * With REDIS_URL (redis_backend.c) each limit is a limiter of the Redis
 * tier instead of a table; the default algorithm is fixed-window there
 * too (the tier's fixed-window script), and the algorithms the tier has no
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
#include "config_tree.h"
#include "redis_backend.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RLS_MAX_FILE_BYTES (16u << 20)    /* one config file */
#define RLS_MAX_FILES 4096

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
sluice_table *rls__make_table(const char *full_key, const char *spec, size_t max_keys, char *err, size_t errlen)
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

int rls__unit_from_name(const char *s)
{
    static const char *const names[] = {"", "second", "minute", "hour", "day", "month", "year", "week"};
    for (int i = 1; i < 8; i++) {
        if (strcasecmp(s, names[i]) == 0)
            return i;
    }
    return RLS_UNIT_UNKNOWN;
}

/* ------------------------------------------------------------------- tree */

void rls__node_clear(rls_node *n)
{
    for (size_t i = 0; i < n->nkids; i++) {
        rls__node_clear(n->kids[i]);
        free(n->kids[i]);
    }
    for (size_t i = 0; i < n->nwilds; i++) {
        rls__node_clear(n->wilds[i]);
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
void rls__make_policy(rls_limit *lim, const char *spec)
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
            lim->algorithm = SLUICE_ALG_FIXED_WINDOW; /* on Redis too */
            snprintf(spec, sizeof spec, "%s %" PRIu32 "/%" PRIu64 "s", sluice_algorithm_name(lim->algorithm),
                     requests_per_unit, (uint64_t)(lim->window_ns / 1000000000u));
            snprintf(lim->spec, sizeof lim->spec, "%s", spec);
            if (requests_per_unit > 0 && rls_redis_enabled())
                lim->redis = rls_redis_make(key, spec, terr, sizeof terr);
            else if (requests_per_unit > 0)
                lim->table = rls__make_table(key, spec, cfg->max_keys, terr, sizeof terr);
            if ((lim->table || lim->redis) && lim->full_key)
                rls__make_policy(lim, spec);
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
        rls__node_clear(&cfg->domains[i].root);
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

int rls__cmp_bytes(const char *a, size_t al, const char *b, size_t bl)
{
    size_t m = al < bl ? al : bl;
    int c = m ? memcmp(a, b, m) : 0;
    if (c)
        return c;
    return al < bl ? -1 : al > bl;
}

int rls__cmp_kv(const char *k, size_t kl, const char *v, size_t vl, const rls_node *n)
{
    int c = rls__cmp_bytes(k, kl, n->key, n->keylen);
    return c ? c : rls__cmp_bytes(v, vl, n->value, n->valuelen);
}

int rls__cmp_nodes(const void *a, const void *b)
{
    const rls_node *x = *(rls_node *const *)a, *y = *(rls_node *const *)b;
    int c = rls__cmp_kv(x->key, x->keylen, x->value, x->valuelen, y);
    if (c)
        return c;
    return (x->line > y->line) - (x->line < y->line);
}

static const rls_node *find_kid(const rls_node *n, const char *k, size_t kl, const char *v, size_t vl)
{
    size_t lo = 0, hi = n->nkids;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = rls__cmp_kv(k, kl, v, vl, n->kids[mid]);
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
        if (rls__cmp_bytes(domain, domainlen, cfg->domains[i].name, cfg->domains[i].namelen) == 0)
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
        if (rls__cmp_bytes(domain, domainlen, cfg->domains[i].name, cfg->domains[i].namelen) == 0) {
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
            if (rls__cmp_bytes(keys[i], keylens[i], c->key, c->keylen) == 0 &&
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

/* ------------------------------------------------------ dump and metrics */

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
                                                       "remembered refusal)."},
            {"sluice_rls_redis_lease_permits_total", "Permits Redis granted beyond the call's, kept as leases."},
            {"sluice_rls_redis_lease_dropped_total", "Lease permits dropped unspent (expired, replaced or evicted)."}};
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
