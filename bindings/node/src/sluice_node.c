/* sluice_node.c -- the Node-API addon: sluice's limiters and tables in
 * JavaScript (bindings/node, docs/node.md).
 *
 * Sections: arguments (keys, permits, times, specs), errors, results, the
 * Limiter class, the Table and SharedTable classes (one handle type, two
 * constructors), the module's functions, init.  index.js wraps the classes
 * (options objects, the rate-limiter-flexible verbs, the express-rate-limit
 * store) and gives this file its two error classes (_init).
 *
 * Every call is synchronous: a decision is one call into the C library,
 * which never blocks (docs/decisions.md), so there is no worker thread and
 * no promise here.  JavaScript runs one thread per isolate, so no call can
 * be in flight on an object while close() runs: close() frees the C object
 * at once, and every later call throws a SluiceError.  An object that is
 * never closed is freed by its finalizer when collected.
 *
 * Arguments are checked before anything is decided, each with its own
 * message: a key is a string (UTF-8, as Buffer.from encodes it) or a
 * Buffer / TypedArray / DataView (its bytes); permits and times are
 * non-negative safe-integer Numbers or BigInts up to 2^64-1; a spec is a
 * string without NUL.  Wrong types throw TypeError, out-of-range values
 * RangeError, a spec the grammar refuses SpecError (the library's message,
 * naming the token), anything else the library refuses SluiceError.  A full
 * table (SLUICE_EFULL) is the table's documented policy: a refusal, with
 * result.error set, never an exception.
 *
 * Handles carry a kind word, checked on every call, so a Table method
 * applied to a Limiter (Table.prototype.decide.call(limiter, ...)) throws
 * instead of reading the wrong struct.
 */
#include <node_api.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

#define ERRLEN 256
#define KEY_INLINE 256
#define MAX_SAFE 9007199254740991.0 /* 2^53 - 1 */

enum { KIND_LIMITER = 0x4c494d31u, KIND_TABLE = 0x54414231u };

typedef struct {
    napi_ref sluice_error; /* SluiceError (index.js), set by _init */
    napi_ref spec_error;   /* SpecError */
} addon;

typedef struct {
    uint32_t kind;
    sluice_limiter *lim; /* NULL once closed */
} limiter_h;

typedef struct {
    uint32_t kind;
    sluice_table *t; /* NULL once closed */
    bool shared;
} table_h;

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

/* Throw `cls` (SluiceError or SpecError from index.js, called as
 * new cls(message, errno)); a plain Error with an `errno` before _init. */
static void throw_sluice(napi_env env, int code, const char *msg, bool spec)
{
    addon *a = NULL;
    napi_value ctor = NULL, argv[2], err;
    napi_get_instance_data(env, (void **)&a);
    if (a != NULL) {
        napi_ref r = spec ? a->spec_error : a->sluice_error;
        if (r != NULL)
            napi_get_reference_value(env, r, &ctor);
    }
    napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &argv[0]);
    napi_create_int32(env, code, &argv[1]);
    if (ctor == NULL || napi_new_instance(env, ctor, 2, argv, &err) != napi_ok) {
        napi_create_error(env, NULL, argv[0], &err);
        napi_set_named_property(env, err, "errno", argv[1]);
    }
    napi_throw(env, err);
}

static void throw_code(napi_env env, int code, const char *what)
{
    char msg[ERRLEN + 64];
    snprintf(msg, sizeof msg, "sluice: %s: %s", what, sluice_strerror(code));
    throw_sluice(env, code, msg, false);
}

static const char *type_name(napi_valuetype t)
{
    switch (t) {
    case napi_undefined: return "undefined";
    case napi_null: return "null";
    case napi_boolean: return "boolean";
    case napi_number: return "number";
    case napi_string: return "string";
    case napi_symbol: return "symbol";
    case napi_object: return "object";
    case napi_function: return "function";
    case napi_external: return "external";
    case napi_bigint: return "bigint";
    }
    return "value";
}

/* ------------------------------------------------------------------------ */
/* Arguments                                                                 */

/* A key's bytes: inline for short strings, on the heap for long ones, or
 * the memory of a Buffer/TypedArray/DataView (valid for the call). */
typedef struct {
    const void *p;
    size_t n;
    char *heap;
    char buf[KEY_INLINE];
} key_arg;

static void key_done(key_arg *k)
{
    free(k->heap);
}

static bool get_key(napi_env env, napi_value v, key_arg *k)
{
    napi_valuetype t;
    bool is;
    k->heap = NULL;
    k->p = k->buf;
    k->n = 0;
    napi_typeof(env, v, &t);
    if (t == napi_string) {
        size_t len = 0;
        napi_get_value_string_utf8(env, v, k->buf, sizeof k->buf, &len);
        if (len < sizeof k->buf - 1) {
            k->n = len;
            return true;
        }
        /* Possibly cut short: ask the length, then copy it whole. */
        napi_get_value_string_utf8(env, v, NULL, 0, &len);
        k->heap = malloc(len + 1);
        if (k->heap == NULL) {
            throw_code(env, SLUICE_ENOMEM, "a copy of the key");
            return false;
        }
        napi_get_value_string_utf8(env, v, k->heap, len + 1, &len);
        k->p = k->heap;
        k->n = len;
        return true;
    }
    if (napi_is_typedarray(env, v, &is) == napi_ok && is) {
        napi_typedarray_type tt;
        size_t len, off;
        void *data;
        napi_value ab;
        napi_get_typedarray_info(env, v, &tt, &len, &data, &ab, &off);
        size_t el = 1;
        switch (tt) {
        case napi_int16_array: case napi_uint16_array: el = 2; break;
        case napi_int32_array: case napi_uint32_array: case napi_float32_array: el = 4; break;
        case napi_float64_array: case napi_bigint64_array: case napi_biguint64_array: el = 8; break;
        default: el = 1; break;
        }
        k->p = data;
        k->n = len * el;
        return true;
    }
    if (napi_is_dataview(env, v, &is) == napi_ok && is) {
        size_t len, off;
        void *data;
        napi_value ab;
        napi_get_dataview_info(env, v, &len, &data, &ab, &off);
        k->p = data;
        k->n = len;
        return true;
    }
    char msg[128];
    snprintf(msg, sizeof msg, "sluice: a key is a string or a Buffer (TypedArray, DataView), not %s",
             type_name(t));
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", msg);
    return false;
}

/* A count or a time: undefined (and, when `nullable`, null) gives `dflt`
 * with *given false; a Number that is a safe non-negative integer; a
 * BigInt in 0 .. 2^64-1. */
static bool get_u64(napi_env env, napi_value v, const char *name, bool nullable, uint64_t dflt,
                    uint64_t *out, bool *given)
{
    napi_valuetype t;
    char msg[160];
    napi_typeof(env, v, &t);
    if (given != NULL)
        *given = true;
    if (t == napi_undefined || (nullable && t == napi_null)) {
        *out = dflt;
        if (given != NULL)
            *given = false;
        return true;
    }
    if (t == napi_number) {
        double d;
        napi_get_value_double(env, v, &d);
        if (d >= 0 && d <= MAX_SAFE && (double)(uint64_t)d == d) {
            *out = (uint64_t)d;
            return true;
        }
        snprintf(msg, sizeof msg,
                 "sluice: %s must be an integer in 0 .. 2^53-1 as a Number (a BigInt up to 2^64-1), not %.17g",
                 name, d);
        napi_throw_range_error(env, "ERR_OUT_OF_RANGE", msg);
        return false;
    }
    if (t == napi_bigint) {
        bool lossless = false;
        napi_get_value_bigint_uint64(env, v, out, &lossless);
        if (lossless)
            return true;
        snprintf(msg, sizeof msg, "sluice: %s must be a BigInt in 0n .. 2n**64n-1n", name);
        napi_throw_range_error(env, "ERR_OUT_OF_RANGE", msg);
        return false;
    }
    snprintf(msg, sizeof msg, "sluice: %s must be a Number or a BigInt, not %s", name, type_name(t));
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", msg);
    return false;
}

/* A string argument as a NUL-terminated heap copy (free() it); NULL after
 * throwing.  A NUL inside would cut the C string short: refused (for a
 * spec with SpecError, for a path with TypeError). */
static char *get_text(napi_env env, napi_value v, const char *name, bool spec)
{
    napi_valuetype t;
    size_t len = 0;
    char msg[160];
    napi_typeof(env, v, &t);
    if (t != napi_string) {
        snprintf(msg, sizeof msg, "sluice: %s must be a string, not %s", name, type_name(t));
        napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", msg);
        return NULL;
    }
    napi_get_value_string_utf8(env, v, NULL, 0, &len);
    char *s = malloc(len + 1);
    if (s == NULL) {
        throw_code(env, SLUICE_ENOMEM, name);
        return NULL;
    }
    napi_get_value_string_utf8(env, v, s, len + 1, &len);
    size_t nul = strlen(s);
    if (nul != len) {
        snprintf(msg, sizeof msg, "sluice: NUL byte at offset %zu of the %s", nul, name);
        if (spec)
            throw_sluice(env, SLUICE_EINVAL, msg, true);
        else
            napi_throw_type_error(env, "ERR_INVALID_ARG_VALUE", msg);
        free(s);
        return NULL;
    }
    return s;
}

/* ------------------------------------------------------------------------ */
/* Results                                                                   */

static napi_value make_int(napi_env env, double d)
{
    napi_value v;
    napi_create_double(env, d, &v);
    return v;
}

/* ns as whole milliseconds, rounded up (a client never retries early);
 * -1 stays -1 (never). */
static double ms_up(int64_t ns)
{
    if (ns < 0)
        return -1;
    uint64_t u = (uint64_t)ns;
    return (double)(u / 1000000u + (u % 1000000u != 0));
}

/* { allowed, remaining, retryAfterMs, waitMs, retryAfterNs, waitNs, error }:
 * remaining as a Number (exact below 2^53: every capacity the grammar
 * takes as LIMIT; a larger burst= reads rounded), the ns as BigInts. */
static napi_value make_result(napi_env env, const sluice_result *r)
{
    napi_value o, v;
    napi_create_object(env, &o);
    napi_get_boolean(env, r->allowed, &v);
    napi_set_named_property(env, o, "allowed", v);
    napi_set_named_property(env, o, "remaining", make_int(env, (double)r->remaining));
    napi_set_named_property(env, o, "retryAfterMs", make_int(env, ms_up(r->retry_after_ns)));
    napi_set_named_property(env, o, "waitMs", make_int(env, ms_up((int64_t)r->wait_ns)));
    napi_create_bigint_int64(env, r->retry_after_ns, &v);
    napi_set_named_property(env, o, "retryAfterNs", v);
    napi_create_bigint_uint64(env, r->wait_ns, &v);
    napi_set_named_property(env, o, "waitNs", v);
    napi_create_int32(env, r->error, &v);
    napi_set_named_property(env, o, "error", v);
    return o;
}

/* After a decision: a request the library could not decide (res.error
 * other than EFULL: no memory, a bad key) throws, naming the key's length;
 * EFULL is a refusal.  Returns false after throwing. */
static bool decided(napi_env env, const sluice_result *r, size_t keylen, bool keyed)
{
    if (r->error == 0 || r->error == SLUICE_EFULL)
        return true;
    char msg[ERRLEN];
    if (keyed)
        snprintf(msg, sizeof msg, "sluice: a key of %zu bytes was not decided: %s", keylen,
                 sluice_strerror(r->error));
    else
        snprintf(msg, sizeof msg, "sluice: the request was not decided: %s",
                 sluice_strerror(r->error));
    throw_sluice(env, r->error, msg, false);
    return false;
}

static napi_value boolean(napi_env env, bool b)
{
    napi_value v;
    napi_get_boolean(env, b, &v);
    return v;
}

static napi_value undefined(napi_env env)
{
    napi_value v;
    napi_get_undefined(env, &v);
    return v;
}

/* The object a method was called on, unwrapped and checked to be of
 * `kind` and open.  NULL after throwing. */
static void *this_handle(napi_env env, napi_value self, uint32_t kind, const char *cls)
{
    void *h = NULL;
    char msg[96];
    if (napi_unwrap(env, self, &h) != napi_ok || h == NULL || *(uint32_t *)h != kind) {
        snprintf(msg, sizeof msg, "sluice: the method needs a %s as `this`", cls);
        napi_throw_type_error(env, "ERR_INVALID_THIS", msg);
        return NULL;
    }
    bool open = kind == KIND_LIMITER ? ((limiter_h *)h)->lim != NULL : ((table_h *)h)->t != NULL;
    if (!open) {
        snprintf(msg, sizeof msg, "sluice: the %s is closed", cls);
        throw_sluice(env, SLUICE_EINVAL, msg, false);
        return NULL;
    }
    return h;
}

/* ------------------------------------------------------------------------ */
/* Limiter                                                                   */

static void limiter_finalize(napi_env env, void *data, void *hint)
{
    (void)env;
    (void)hint;
    limiter_h *h = data;
    sluice_limiter_free(h->lim);
    free(h);
}

static bool need_new(napi_env env, napi_callback_info info, const char *cls)
{
    napi_value nt = NULL;
    napi_get_new_target(env, info, &nt);
    if (nt == NULL) {
        char msg[96];
        snprintf(msg, sizeof msg, "sluice: %s is a class: call it with new", cls);
        napi_throw_type_error(env, "ERR_CONSTRUCT_CALL_REQUIRED", msg);
        return false;
    }
    return true;
}

/* new Limiter(spec) */
static napi_value limiter_new(napi_env env, napi_callback_info info)
{
    size_t argc = 1;
    napi_value argv[1], self;
    napi_get_cb_info(env, info, &argc, argv, &self, NULL);
    if (!need_new(env, info, "Limiter"))
        return NULL;
    char *spec = get_text(env, argv[0], "spec", true);
    if (spec == NULL)
        return NULL;
    char err[ERRLEN] = "";
    sluice_limiter *lim = sluice_limiter_new(spec, err, sizeof err);
    free(spec);
    if (lim == NULL) {
        if (err[0] != '\0')
            throw_sluice(env, SLUICE_EINVAL, err, true);
        else
            throw_code(env, SLUICE_ENOMEM, "a new Limiter");
        return NULL;
    }
    limiter_h *h = malloc(sizeof *h);
    if (h == NULL) {
        sluice_limiter_free(lim);
        throw_code(env, SLUICE_ENOMEM, "a new Limiter");
        return NULL;
    }
    h->kind = KIND_LIMITER;
    h->lim = lim;
    if (napi_wrap(env, self, h, limiter_finalize, NULL, NULL) != napi_ok) {
        limiter_finalize(env, h, NULL);
        napi_throw_error(env, NULL, "sluice: cannot wrap the Limiter");
        return NULL;
    }
    return self;
}

/* The decision of tryAcquire(permits, nowNs) and decide(permits, nowNs). */
static limiter_h *limiter_decide(napi_env env, napi_callback_info info, sluice_result *r,
                                 bool *ok)
{
    size_t argc = 2;
    napi_value argv[2], self;
    uint64_t permits, now;
    bool given;
    napi_get_cb_info(env, info, &argc, argv, &self, NULL);
    limiter_h *h = this_handle(env, self, KIND_LIMITER, "Limiter");
    if (h == NULL)
        return NULL;
    if (argc < 2)
        napi_get_undefined(env, &argv[1]);
    if (argc < 1)
        napi_get_undefined(env, &argv[0]);
    if (!get_u64(env, argv[0], "permits", false, 1, &permits, NULL) ||
        !get_u64(env, argv[1], "nowNs", true, 0, &now, &given))
        return NULL;
    if (!given)
        now = sluice_limiter_now_ns(h->lim);
    *ok = sluice_try_acquire_at(h->lim, permits, now, r);
    if (!decided(env, r, 0, false))
        return NULL;
    return h;
}

/* limiter.tryAcquire(permits = 1, nowNs?) -> boolean */
static napi_value limiter_try(napi_env env, napi_callback_info info)
{
    sluice_result r;
    bool ok = false;
    if (limiter_decide(env, info, &r, &ok) == NULL)
        return NULL;
    return boolean(env, ok);
}

/* limiter.decide(permits = 1, nowNs?) -> Result */
static napi_value limiter_decide_js(napi_env env, napi_callback_info info)
{
    sluice_result r;
    bool ok = false;
    if (limiter_decide(env, info, &r, &ok) == NULL)
        return NULL;
    return make_result(env, &r);
}

/* limiter.peek(nowNs?) -> Result: a probe (permits 0), changes nothing. */
static napi_value limiter_peek(napi_env env, napi_callback_info info)
{
    size_t argc = 1;
    napi_value argv[1], self;
    uint64_t now;
    bool given;
    sluice_result r;
    napi_get_cb_info(env, info, &argc, argv, &self, NULL);
    limiter_h *h = this_handle(env, self, KIND_LIMITER, "Limiter");
    if (h == NULL)
        return NULL;
    if (argc < 1)
        napi_get_undefined(env, &argv[0]);
    if (!get_u64(env, argv[0], "nowNs", true, 0, &now, &given))
        return NULL;
    if (!given)
        now = sluice_limiter_now_ns(h->lim);
    sluice_try_acquire_at(h->lim, 0, now, &r);
    if (!decided(env, &r, 0, false))
        return NULL;
    return make_result(env, &r);
}

/* limiter.spec -> the canonical spec */
static napi_value limiter_spec(napi_env env, napi_callback_info info)
{
    napi_value self, v;
    char buf[SLUICE_SPEC_MAX];
    napi_get_cb_info(env, info, NULL, NULL, &self, NULL);
    limiter_h *h = this_handle(env, self, KIND_LIMITER, "Limiter");
    if (h == NULL)
        return NULL;
    if (sluice_limiter_spec_format(h->lim, buf, sizeof buf) < 0)
        buf[0] = '\0';
    napi_create_string_utf8(env, buf, NAPI_AUTO_LENGTH, &v);
    return v;
}

/* limiter.close(): frees the C limiter; idempotent. */
static napi_value limiter_close(napi_env env, napi_callback_info info)
{
    napi_value self;
    void *p = NULL;
    napi_get_cb_info(env, info, NULL, NULL, &self, NULL);
    if (napi_unwrap(env, self, &p) != napi_ok || p == NULL || *(uint32_t *)p != KIND_LIMITER) {
        napi_throw_type_error(env, "ERR_INVALID_THIS", "sluice: the method needs a Limiter as `this`");
        return NULL;
    }
    limiter_h *h = p;
    sluice_limiter_free(h->lim);
    h->lim = NULL;
    return undefined(env);
}

/* ------------------------------------------------------------------------ */
/* Table and SharedTable                                                     */

static void table_finalize(napi_env env, void *data, void *hint)
{
    (void)env;
    (void)hint;
    table_h *h = data;
    sluice_table_free(h->t);
    free(h);
}

static bool wrap_table(napi_env env, napi_value self, sluice_table *t, bool shared)
{
    table_h *h = malloc(sizeof *h);
    if (h == NULL) {
        sluice_table_free(t);
        throw_code(env, SLUICE_ENOMEM, "a new table");
        return false;
    }
    h->kind = KIND_TABLE;
    h->t = t;
    h->shared = shared;
    if (napi_wrap(env, self, h, table_finalize, NULL, NULL) != napi_ok) {
        table_finalize(env, h, NULL);
        napi_throw_error(env, NULL, "sluice: cannot wrap the table");
        return false;
    }
    return true;
}

/* A size argument: an integer Number in lo .. hi. */
static bool get_size(napi_env env, napi_value v, const char *name, uint64_t lo, uint64_t hi,
                     uint64_t *out)
{
    napi_valuetype t;
    char msg[160];
    napi_typeof(env, v, &t);
    if (t != napi_number) {
        snprintf(msg, sizeof msg, "sluice: %s must be a Number, not %s", name, type_name(t));
        napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", msg);
        return false;
    }
    double d;
    napi_get_value_double(env, v, &d);
    if (!(d >= (double)lo && d <= (double)hi) || (double)(uint64_t)d != d) {
        snprintf(msg, sizeof msg, "sluice: %s must be an integer in %llu .. %llu, not %.17g", name,
                 (unsigned long long)lo, (unsigned long long)hi, d);
        napi_throw_range_error(env, "ERR_OUT_OF_RANGE", msg);
        return false;
    }
    *out = (uint64_t)d;
    return true;
}

static bool get_flags(napi_env env, napi_value v, unsigned *flags)
{
    uint64_t f;
    if (!get_u64(env, v, "flags", true, 0, &f, NULL))
        return false;
    if (f & ~(uint64_t)(SLUICE_TABLE_EVICT_LRU | SLUICE_TABLE_RECLAIM_WHEN_FULL)) {
        napi_throw_range_error(env, "ERR_OUT_OF_RANGE", "sluice: unknown table flags");
        return false;
    }
    *flags = (unsigned)f;
    return true;
}

/* new Table(spec, maxKeys, flags = 0) */
static napi_value table_new(napi_env env, napi_callback_info info)
{
    size_t argc = 3;
    napi_value argv[3], self;
    uint64_t max_keys;
    unsigned flags;
    napi_get_cb_info(env, info, &argc, argv, &self, NULL);
    if (!need_new(env, info, "Table"))
        return NULL;
    for (size_t i = argc; i < 3; i++)
        napi_get_undefined(env, &argv[i]);
    char *spec = get_text(env, argv[0], "spec", true);
    if (spec == NULL)
        return NULL;
    if (!get_size(env, argv[1], "maxKeys", 1, (uint64_t)1 << 32, &max_keys) ||
        !get_flags(env, argv[2], &flags)) {
        free(spec);
        return NULL;
    }
    char err[ERRLEN] = "";
    sluice_table *t = sluice_table_new_flags(spec, (size_t)max_keys, flags, err, sizeof err);
    free(spec);
    if (t == NULL) {
        if (err[0] != '\0')
            throw_sluice(env, SLUICE_EINVAL, err, true);
        else
            throw_code(env, SLUICE_ENOMEM, "a new Table");
        return NULL;
    }
    return wrap_table(env, self, t, false) ? self : NULL;
}

/* new SharedTable(path, spec, maxKeys, maxKeyBytes = 64, flags = 0):
 * sluice_table_open.  A spec the grammar refuses is a SpecError; any other
 * refusal (another spec or size in the region, a path that is not ours)
 * a SluiceError with the library's reason. */
static napi_value shared_new(napi_env env, napi_callback_info info)
{
    size_t argc = 5;
    napi_value argv[5], self;
    uint64_t max_keys, max_key_bytes = 64;
    unsigned flags;
    napi_valuetype t5;
    napi_get_cb_info(env, info, &argc, argv, &self, NULL);
    if (!need_new(env, info, "SharedTable"))
        return NULL;
    for (size_t i = argc; i < 5; i++)
        napi_get_undefined(env, &argv[i]);
    char *path = get_text(env, argv[0], "path", false);
    if (path == NULL)
        return NULL;
    char *spec = get_text(env, argv[1], "spec", true);
    if (spec == NULL) {
        free(path);
        return NULL;
    }
    char err[ERRLEN] = "";
    int rc = sluice_spec_check(spec, NULL, 0, err, sizeof err);
    if (rc != 0) {
        throw_sluice(env, rc, err[0] ? err : sluice_strerror(rc), true);
        goto fail;
    }
    if (!get_size(env, argv[2], "maxKeys", 1, (uint64_t)1 << 32, &max_keys))
        goto fail;
    napi_typeof(env, argv[3], &t5);
    if (t5 != napi_undefined && t5 != napi_null &&
        !get_size(env, argv[3], "maxKeyBytes", 0, SLUICE_MAX_KEY_BYTES, &max_key_bytes))
        goto fail;
    if (!get_flags(env, argv[4], &flags))
        goto fail;
    sluice_table *t = sluice_table_open(path, spec, (size_t)max_keys, (size_t)max_key_bytes,
                                        flags, err, sizeof err);
    free(path);
    free(spec);
    if (t == NULL) {
        if (err[0] != '\0')
            throw_sluice(env, SLUICE_EINVAL, err, false);
        else
            throw_code(env, SLUICE_ENOMEM, "a new SharedTable");
        return NULL;
    }
    return wrap_table(env, self, t, true) ? self : NULL;
fail:
    free(path);
    free(spec);
    return NULL;
}

/* The arguments (key, permits, nowNs) of a table's decision. */
typedef struct {
    table_h *h;
    key_arg key;
    uint64_t permits;
    uint64_t now;
    bool now_given;
} table_args;

static bool table_args_get(napi_env env, napi_callback_info info, uint64_t dflt_permits,
                           table_args *a)
{
    size_t argc = 3;
    napi_value argv[3], self;
    napi_get_cb_info(env, info, &argc, argv, &self, NULL);
    a->h = this_handle(env, self, KIND_TABLE, "Table");
    if (a->h == NULL)
        return false;
    for (size_t i = argc; i < 3; i++)
        napi_get_undefined(env, &argv[i]);
    if (!get_key(env, argv[0], &a->key))
        return false;
    if (!get_u64(env, argv[1], "permits", false, dflt_permits, &a->permits, NULL) ||
        !get_u64(env, argv[2], "nowNs", true, 0, &a->now, &a->now_given)) {
        key_done(&a->key);
        return false;
    }
    return true;
}

static bool table_decide(napi_env env, napi_callback_info info, sluice_result *r, bool *ok)
{
    table_args a;
    if (!table_args_get(env, info, 1, &a))
        return false;
    if (a.now_given)
        *ok = sluice_table_try_acquire_at(a.h->t, a.key.p, a.key.n, a.permits, a.now, r);
    else
        *ok = sluice_table_try_acquire(a.h->t, a.key.p, a.key.n, a.permits, r);
    key_done(&a.key);
    return decided(env, r, a.key.n, true);
}

/* table.tryAcquire(key, permits = 1, nowNs?) -> boolean */
static napi_value table_try(napi_env env, napi_callback_info info)
{
    sluice_result r;
    bool ok = false;
    if (!table_decide(env, info, &r, &ok))
        return NULL;
    return boolean(env, ok);
}

/* table.decide(key, permits = 1, nowNs?) -> Result */
static napi_value table_decide_js(napi_env env, napi_callback_info info)
{
    sluice_result r;
    bool ok = false;
    if (!table_decide(env, info, &r, &ok))
        return NULL;
    return make_result(env, &r);
}

/* table.peek(key, permits = 0, nowNs?) -> Result: what a request would
 * get, without making the key or changing anything. */
static napi_value table_peek(napi_env env, napi_callback_info info)
{
    table_args a;
    sluice_result r;
    if (!table_args_get(env, info, 0, &a))
        return NULL;
    if (!a.now_given)
        a.now = sluice_table_now_ns(a.h->t);
    memset(&r, 0, sizeof r);
    int rc = sluice_table_peek_at(a.h->t, a.key.p, a.key.n, a.permits, a.now, &r, NULL);
    key_done(&a.key);
    if (rc != 0 && rc != SLUICE_ENOENT) {
        r.error = rc;
        decided(env, &r, a.key.n, true);
        return NULL;
    }
    return make_result(env, &r);
}

/* table.remove(key) -> boolean (true when the key was held);
 * table.reset(key) -> undefined (idempotent). */
static napi_value table_key_op(napi_env env, napi_callback_info info, bool reset)
{
    size_t argc = 1;
    napi_value argv[1], self;
    key_arg k;
    napi_get_cb_info(env, info, &argc, argv, &self, NULL);
    table_h *h = this_handle(env, self, KIND_TABLE, "Table");
    if (h == NULL)
        return NULL;
    if (argc < 1)
        napi_get_undefined(env, &argv[0]);
    if (!get_key(env, argv[0], &k))
        return NULL;
    int rc = reset ? sluice_table_reset(h->t, k.p, k.n) : sluice_table_remove(h->t, k.p, k.n);
    key_done(&k);
    if (rc == SLUICE_ENOENT)
        return boolean(env, false);
    if (rc != 0) {
        throw_code(env, rc, reset ? "reset" : "remove");
        return NULL;
    }
    return reset ? undefined(env) : boolean(env, true);
}

static napi_value table_remove(napi_env env, napi_callback_info info)
{
    return table_key_op(env, info, false);
}

static napi_value table_reset(napi_env env, napi_callback_info info)
{
    return table_key_op(env, info, true);
}

/* table.size -> the keys held now (in use or at rest). */
static napi_value table_size(napi_env env, napi_callback_info info)
{
    napi_value self;
    sluice_table_stats st;
    napi_get_cb_info(env, info, NULL, NULL, &self, NULL);
    table_h *h = this_handle(env, self, KIND_TABLE, "Table");
    if (h == NULL)
        return NULL;
    sluice_table_stats_get(h->t, &st);
    return make_int(env, (double)st.keys);
}

/* table.close(): frees the handle (a SharedTable's region stays, for the
 * other processes); idempotent. */
static napi_value table_close(napi_env env, napi_callback_info info)
{
    napi_value self;
    void *p = NULL;
    napi_get_cb_info(env, info, NULL, NULL, &self, NULL);
    if (napi_unwrap(env, self, &p) != napi_ok || p == NULL || *(uint32_t *)p != KIND_TABLE) {
        napi_throw_type_error(env, "ERR_INVALID_THIS", "sluice: the method needs a Table as `this`");
        return NULL;
    }
    table_h *h = p;
    sluice_table_free(h->t);
    h->t = NULL;
    return undefined(env);
}

/* ------------------------------------------------------------------------ */
/* Module functions                                                          */

/* now() -> BigInt: CLOCK_MONOTONIC in ns, the axis of nowNs (the same as
 * process.hrtime.bigint() on Linux). */
static napi_value fn_now(napi_env env, napi_callback_info info)
{
    (void)info;
    napi_value v;
    napi_create_bigint_uint64(env, sluice_now_ns(), &v);
    return v;
}

static napi_value fn_version(napi_env env, napi_callback_info info)
{
    (void)info;
    napi_value v;
    napi_create_string_utf8(env, sluice_version(), NAPI_AUTO_LENGTH, &v);
    return v;
}

/* checkSpec(spec) -> the canonical spec, or throws SpecError. */
static napi_value fn_check_spec(napi_env env, napi_callback_info info)
{
    size_t argc = 1;
    napi_value argv[1], v;
    napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
    if (argc < 1)
        napi_get_undefined(env, &argv[0]);
    char *spec = get_text(env, argv[0], "spec", true);
    if (spec == NULL)
        return NULL;
    char canon[SLUICE_SPEC_MAX], err[ERRLEN] = "";
    int rc = sluice_spec_check(spec, canon, sizeof canon, err, sizeof err);
    free(spec);
    if (rc != 0) {
        throw_sluice(env, rc, err[0] ? err : sluice_strerror(rc), true);
        return NULL;
    }
    napi_create_string_utf8(env, canon, NAPI_AUTO_LENGTH, &v);
    return v;
}

/* parseSpec(spec) -> { algorithm, clock, limit, periodNs, capacity, slots,
 * nodelay }: the spec's values, defaults filled in (sluice_spec_parse);
 * throws SpecError.  limit, capacity and slots are Numbers (exact below
 * 2^53), periodNs a BigInt. */
static napi_value fn_parse_spec(napi_env env, napi_callback_info info)
{
    static const char *const clocks[] = {"monotonic", "coarse", "realtime"};
    size_t argc = 1;
    napi_value argv[1], o, v;
    sluice_spec_info si;
    napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
    if (argc < 1)
        napi_get_undefined(env, &argv[0]);
    char *spec = get_text(env, argv[0], "spec", true);
    if (spec == NULL)
        return NULL;
    char err[ERRLEN] = "";
    int rc = sluice_spec_parse(spec, &si, err, sizeof err);
    free(spec);
    if (rc != 0) {
        throw_sluice(env, rc, err[0] ? err : sluice_strerror(rc), true);
        return NULL;
    }
    const char *alg = sluice_algorithm_name(si.algorithm);
    const char *clock = si.clock >= 0 && si.clock <= 2 ? clocks[si.clock] : "unknown";
    napi_create_object(env, &o);
    napi_create_string_utf8(env, alg != NULL ? alg : "unknown", NAPI_AUTO_LENGTH, &v);
    napi_set_named_property(env, o, "algorithm", v);
    napi_create_string_utf8(env, clock, NAPI_AUTO_LENGTH, &v);
    napi_set_named_property(env, o, "clock", v);
    napi_set_named_property(env, o, "limit", make_int(env, (double)si.limit));
    napi_create_bigint_uint64(env, si.period_ns, &v);
    napi_set_named_property(env, o, "periodNs", v);
    napi_set_named_property(env, o, "capacity", make_int(env, (double)si.capacity));
    napi_set_named_property(env, o, "slots", make_int(env, (double)si.slots));
    napi_set_named_property(env, o, "nodelay", boolean(env, si.nodelay));
    return o;
}

/* unlink(path) -> boolean: removes a SharedTable's name (true if it was
 * there); processes that have it open keep using it. */
static napi_value fn_unlink(napi_env env, napi_callback_info info)
{
    size_t argc = 1;
    napi_value argv[1];
    napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
    if (argc < 1)
        napi_get_undefined(env, &argv[0]);
    char *path = get_text(env, argv[0], "path", false);
    if (path == NULL)
        return NULL;
    int rc = sluice_table_unlink(path);
    free(path);
    if (rc == SLUICE_ENOENT)
        return boolean(env, false);
    if (rc != 0) {
        throw_code(env, rc, "unlink");
        return NULL;
    }
    return boolean(env, true);
}

/* strerror(errno) -> the library's description of a code. */
static napi_value fn_strerror(napi_env env, napi_callback_info info)
{
    size_t argc = 1;
    napi_value argv[1], v;
    int32_t code = 0;
    napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
    if (argc >= 1)
        napi_get_value_int32(env, argv[0], &code);
    napi_create_string_utf8(env, sluice_strerror(code), NAPI_AUTO_LENGTH, &v);
    return v;
}

/* _init(SluiceError, SpecError): the classes every error is made of. */
static napi_value fn_init(napi_env env, napi_callback_info info)
{
    size_t argc = 2;
    napi_value argv[2];
    addon *a = NULL;
    napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
    napi_get_instance_data(env, (void **)&a);
    if (argc < 2 || a == NULL) {
        napi_throw_type_error(env, NULL, "sluice: _init(SluiceError, SpecError)");
        return NULL;
    }
    if (a->sluice_error != NULL)
        napi_delete_reference(env, a->sluice_error);
    if (a->spec_error != NULL)
        napi_delete_reference(env, a->spec_error);
    napi_create_reference(env, argv[0], 1, &a->sluice_error);
    napi_create_reference(env, argv[1], 1, &a->spec_error);
    return undefined(env);
}

static void addon_finalize(napi_env env, void *data, void *hint)
{
    (void)hint;
    addon *a = data;
    if (a->sluice_error != NULL)
        napi_delete_reference(env, a->sluice_error);
    if (a->spec_error != NULL)
        napi_delete_reference(env, a->spec_error);
    free(a);
}

/* ------------------------------------------------------------------------ */
/* Init                                                                      */

#define METHOD(name, fn) {name, NULL, fn, NULL, NULL, NULL, napi_default_method, NULL}
#define GETTER(name, fn) {name, NULL, NULL, fn, NULL, NULL, napi_default_jsproperty, NULL}

static bool export_class(napi_env env, napi_value exports, const char *name, napi_callback ctor,
                         const napi_property_descriptor *props, size_t n)
{
    napi_value cls;
    return napi_define_class(env, name, NAPI_AUTO_LENGTH, ctor, NULL, n, props, &cls) == napi_ok &&
           napi_set_named_property(env, exports, name, cls) == napi_ok;
}

static void export_int(napi_env env, napi_value exports, const char *name, int value)
{
    napi_value v;
    napi_create_int32(env, value, &v);
    napi_set_named_property(env, exports, name, v);
}

NAPI_MODULE_INIT()
{
    addon *a = calloc(1, sizeof *a);
    if (a == NULL || napi_set_instance_data(env, a, addon_finalize, NULL) != napi_ok) {
        free(a);
        napi_throw_error(env, NULL, "sluice: out of memory loading the addon");
        return NULL;
    }
    static const napi_property_descriptor lim_props[] = {
        METHOD("tryAcquire", limiter_try),
        METHOD("decide", limiter_decide_js),
        METHOD("peek", limiter_peek),
        METHOD("close", limiter_close),
        GETTER("spec", limiter_spec),
    };
    static const napi_property_descriptor tab_props[] = {
        METHOD("tryAcquire", table_try),
        METHOD("decide", table_decide_js),
        METHOD("peek", table_peek),
        METHOD("remove", table_remove),
        METHOD("reset", table_reset),
        METHOD("close", table_close),
        GETTER("size", table_size),
    };
    static const napi_property_descriptor fns[] = {
        METHOD("now", fn_now),
        METHOD("version", fn_version),
        METHOD("checkSpec", fn_check_spec),
        METHOD("parseSpec", fn_parse_spec),
        METHOD("unlink", fn_unlink),
        METHOD("strerror", fn_strerror),
        METHOD("_init", fn_init),
    };
    size_t nl = sizeof lim_props / sizeof lim_props[0];
    size_t nt = sizeof tab_props / sizeof tab_props[0];
    if (!export_class(env, exports, "Limiter", limiter_new, lim_props, nl) ||
        !export_class(env, exports, "Table", table_new, tab_props, nt) ||
        !export_class(env, exports, "SharedTable", shared_new, tab_props, nt) ||
        napi_define_properties(env, exports, sizeof fns / sizeof fns[0], fns) != napi_ok)
        return NULL;
    export_int(env, exports, "EINVAL", SLUICE_EINVAL);
    export_int(env, exports, "ENOMEM", SLUICE_ENOMEM);
    export_int(env, exports, "ERANGE", SLUICE_ERANGE);
    export_int(env, exports, "EFULL", SLUICE_EFULL);
    export_int(env, exports, "ENOENT", SLUICE_ENOENT);
    export_int(env, exports, "EBUSY", SLUICE_EBUSY);
    export_int(env, exports, "EVICT_LRU", SLUICE_TABLE_EVICT_LRU);
    export_int(env, exports, "MAX_KEY_BYTES", SLUICE_MAX_KEY_BYTES);
    return exports;
}
