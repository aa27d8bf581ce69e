/* config_yaml.c -- sluice-rls: envoyproxy/ratelimit's YAML, unchanged,
 * walked and checked, and built into the config's tree (config_tree.h;
 * config.c serves it at run time).
 *
 * Map: YAML checks (keys, scalar types, with the line of each node); the
 * loader of one file: metadata (a protobuf Struct), one rate_limit
 * (load_limit: its spec, its table or Redis limiter), the descriptors of a
 * level (load_descriptors), rls_config_add_text (one file's domain).
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
 * sluice's extensions of rate_limit: `algorithm` (any of the six, default
 * fixed-window), `burst` (token-bucket's burst, leaky-bucket's capacity)
 * and `period` (any length sluice's spec grammar takes: 5m, 30s, 250ms)
 * instead of `unit`.
 */
#define _GNU_SOURCE
#include "config.h"
#include "config_tree.h"
#include "redis_backend.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "google/protobuf/struct.pb-c.h"

#define RLS_MAX_DEPTH 64                  /* nesting of descriptors */
#define RLS_MAX_VISITS 2000000            /* node visits per file (aliases) */

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
    int unit = rls__unit_from_name(unit_s);
    if (unlimited && unit != RLS_UNIT_UNKNOWN)
        return fail(ld, get(ld, rl, "unit"), "should not specify rate limit unit when unlimited");
    if (unlimited && (period_len || alg_len || get(ld, rl, "burst")))
        return fail(ld, rl, "should not specify period, algorithm or burst when unlimited");
    if (period_len && unit_len)
        return fail(ld, get(ld, rl, "period"), "give 'unit' or 'period', not both");
    if (!unlimited && unit == RLS_UNIT_UNKNOWN && !period_len)
        return fail(ld, get(ld, rl, "unit") ? get(ld, rl, "unit") : rl, "invalid rate limit unit '%s'", unit_s);
    /* sluice's extensions: algorithm (default fixed-window), burst, period. */
    /* On Redis too: the tier has a fixed-window script. */
    int algo = SLUICE_ALG_FIXED_WINDOW;
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
            rls__make_policy(lim, lim->spec);
        } else if (rpu > 0) {
            lim->table = rls__make_table(full_key, lim->spec, ld->cfg->max_keys, terr, sizeof terr);
            if (!lim->table)
                return fail(ld, rl, "rate limit '%s': %s", lim->spec, terr);
            rls__make_policy(lim, lim->spec);
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
            rls__node_clear(n);
            free(n);
            return fail(ld, d, "out of memory");
        }
        /* (key, value) unique at its level: wildcards by a scan here, the
         * others after the sort below. */
        for (size_t w = 0; n->wildcard && w + 1 < parent->nwilds; w++) {
            if (rls__cmp_kv(key, kl, value, vl, parent->wilds[w]) == 0)
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
        qsort(parent->kids, parent->nkids, sizeof parent->kids[0], rls__cmp_nodes);
        for (size_t i = 1; i < parent->nkids; i++) {
            const rls_node *a = parent->kids[i - 1], *b = parent->kids[i];
            if (rls__cmp_kv(a->key, a->keylen, a->value, a->valuelen, b) == 0) {
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
        if (rls__cmp_bytes(domain, dl, cfg->domains[i].name, cfg->domains[i].namelen) == 0) {
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
    rls__node_clear(&dom.root);
    free(dom.name);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc < 0 ? -1 : 0;
}
