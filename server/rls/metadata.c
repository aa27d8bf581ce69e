/* metadata.c -- sluice-rls: envoyproxy/ratelimit's dynamic_metadata
 * (RESPONSE_DYNAMIC_METADATA), built for one answer.
 *
 * Map: Value and Struct makers; the merge; rls_dynamic_metadata();
 * rls_answer_release().
 *
 * The answer's dynamic_metadata is a tree of malloc'd protobuf-c messages,
 * freed by protobuf_c_message_free_unpacked() with the system allocator, as
 * an unpacked message would be.  A limit's `metadata` is kept packed by the
 * config (config_yaml.c); each answer unpacks its own copy and merges the copies
 * (envoyproxy/ratelimit's mergeMetadata: a key keeps its first value, two
 * structs merge), so nothing in the answer points into the config, which a
 * reload may free.  Out of memory: the answer has no dynamic_metadata.
 */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "metadata.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static Google__Protobuf__Value *dv_new(Google__Protobuf__Value__KindCase kind)
{
    Google__Protobuf__Value *v = malloc(sizeof *v);
    if (v) {
        google__protobuf__value__init(v);
        v->kind_case = kind;
    }
    return v;
}

static Google__Protobuf__Value *dv_str(const char *s)
{
    Google__Protobuf__Value *v = dv_new(GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE);
    if (v && !(v->string_value = strdup(s))) {
        free(v);
        v = NULL;
    }
    return v;
}

static Google__Protobuf__Value *dv_num(double d)
{
    Google__Protobuf__Value *v = dv_new(GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE);
    if (v)
        v->number_value = d;
    return v;
}

/* Add (key, v) to st, taking v (freed on failure).  false: out of memory. */
static bool ds_add(Google__Protobuf__Struct *st, const char *key, Google__Protobuf__Value *v)
{
    Google__Protobuf__Struct__FieldsEntry **f = v ? realloc(st->fields, (st->n_fields + 1) * sizeof *f) : NULL;
    Google__Protobuf__Struct__FieldsEntry *e = f ? malloc(sizeof *e) : NULL;
    if (f)
        st->fields = f;
    if (e) {
        google__protobuf__struct__fields_entry__init(e);
        e->key = strdup(key);
    }
    if (!e || !e->key) {
        free(e);
        if (v)
            protobuf_c_message_free_unpacked(&v->base, NULL);
        return false;
    }
    e->value = v;
    st->fields[st->n_fields++] = e;
    return true;
}

static Google__Protobuf__Value *dv_struct(Google__Protobuf__Struct **out)
{
    Google__Protobuf__Value *v = dv_new(GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);
    Google__Protobuf__Struct *st = v ? malloc(sizeof *st) : NULL;
    if (!st) {
        free(v);
        return NULL;
    }
    google__protobuf__struct__init(st);
    v->struct_value = st;
    *out = st;
    return v;
}

static Google__Protobuf__Value *dv_list(size_t cap, Google__Protobuf__ListValue **out)
{
    Google__Protobuf__Value *v = dv_new(GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE);
    Google__Protobuf__ListValue *l = v ? malloc(sizeof *l) : NULL;
    if (l) {
        google__protobuf__list_value__init(l);
        l->values = cap ? calloc(cap, sizeof *l->values) : NULL;
    }
    if (!l || (cap && !l->values)) {
        free(l);
        free(v);
        return NULL;
    }
    v->list_value = l;
    *out = l;
    return v;
}

/* envoyproxy/ratelimit's mergeMetadata: src's fields go into dest; a key
 * dest has already keeps dest's value, but two structs merge.  Takes src
 * (frees what it does not move).  Depth: the config's (bounded at load). */
static void ds_merge(Google__Protobuf__Struct *dest, Google__Protobuf__Struct *src)
{
    for (size_t i = 0; i < src->n_fields; i++) {
        Google__Protobuf__Struct__FieldsEntry *e = src->fields[i];
        size_t j = 0;
        while (j < dest->n_fields && strcmp(dest->fields[j]->key, e->key) != 0)
            j++;
        if (j < dest->n_fields) {
            Google__Protobuf__Value *dv = dest->fields[j]->value, *sv = e->value;
            if (dv && sv && dv->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE &&
                sv->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE) {
                ds_merge(dv->struct_value, sv->struct_value);
                sv->struct_value = NULL;
                sv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND__NOT_SET;
            }
            protobuf_c_message_free_unpacked(&e->base, NULL);
            continue;
        }
        Google__Protobuf__Struct__FieldsEntry **f = realloc(dest->fields, (dest->n_fields + 1) * sizeof *f);
        if (!f) {
            protobuf_c_message_free_unpacked(&e->base, NULL);
            continue;
        }
        dest->fields = f;
        dest->fields[dest->n_fields++] = e;
    }
    free(src->fields);
    src->fields = NULL;
    src->n_fields = 0;
    protobuf_c_message_free_unpacked(&src->base, NULL);
}

static const char *const UNIT_NAMES[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK"};

Google__Protobuf__Struct *rls_dynamic_metadata(const Envoy__Service__Ratelimit__V3__RateLimitRequest *req,
                                               const rls_answer *ans, const rls_limit *const dl[])
{
    Google__Protobuf__Struct *top = malloc(sizeof *top), *md = NULL;
    if (!top)
        return NULL;
    google__protobuf__struct__init(top);
    bool ok = ds_add(top, "domain", dv_str(req->domain));
    Google__Protobuf__ListValue *dlist = NULL;
    ok = ok && ds_add(top, "descriptors", dv_list(req->n_descriptors, &dlist));
    for (size_t i = 0; ok && i < req->n_descriptors; i++) {
        const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *d = req->descriptors[i];
        Google__Protobuf__Struct *ds = NULL;
        Google__Protobuf__Value *dv = dv_struct(&ds);
        if (!dv) {
            ok = false;
            break;
        }
        dlist->values[dlist->n_values++] = dv;
        Google__Protobuf__ListValue *el = NULL;
        ok = ds_add(ds, "entries", dv_list(d->n_entries, &el));
        for (size_t e = 0; ok && e < d->n_entries; e++) {
            const char *k = d->entries[e]->key ? d->entries[e]->key : "";
            const char *v = d->entries[e]->value ? d->entries[e]->value : "";
            size_t n = strlen(k) + strlen(v) + 2;
            char *kv = malloc(n);
            Google__Protobuf__Value *sv = kv ? dv_new(GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE) : NULL;
            if (!sv) {
                free(kv);
                ok = false;
                break;
            }
            snprintf(kv, n, "%s=%s", k, v);
            sv->string_value = kv;
            el->values[el->n_values++] = sv;
        }
        if (ok && d->limit) {
            char lt[96];
            unsigned u = (unsigned)d->limit->unit;
            snprintf(lt, sizeof lt, "requests_per_unit:%" PRIu32 " unit:%s", d->limit->requests_per_unit,
                     UNIT_NAMES[u < 8 ? u : 0]);
            ok = ds_add(ds, "limit", dv_str(lt));
        }
        if (ok && d->hits_addend)
            ok = ds_add(ds, "hitsAddend", dv_num((double)d->hits_addend->value));
    }
    if (ok && req->hits_addend)
        ok = ds_add(top, "hitsAddend", dv_num((double)req->hits_addend));
    for (size_t i = 0; ok && i < req->n_descriptors; i++) {
        const rls_limit *l = dl[i];
        if (!l || !l->metadata || ans->st[i].code != ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK)
            continue;
        Google__Protobuf__Struct *src = google__protobuf__struct__unpack(NULL, l->metadata_len, l->metadata);
        if (!src)
            continue;
        if (!md) {
            md = src;
            continue;
        }
        ds_merge(md, src);
    }
    if (ok && md) {
        Google__Protobuf__Value *mv = dv_new(GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);
        if (mv) {
            mv->struct_value = md;
            md = NULL;
        }
        ok = ds_add(top, "metadata", mv);
    }
    if (md)
        protobuf_c_message_free_unpacked(&md->base, NULL);
    if (!ok) {
        protobuf_c_message_free_unpacked(&top->base, NULL);
        return NULL;
    }
    return top;
}

void rls_answer_release(rls_answer *ans)
{
    if (ans && ans->resp.dynamic_metadata) {
        protobuf_c_message_free_unpacked(&ans->resp.dynamic_metadata->base, NULL);
        ans->resp.dynamic_metadata = NULL;
    }
}
