/* sluice_node.c -- the Node-API addon: sluice's limiters and tables in
 * JavaScript (bindings/node, docs/node.md).
 *
 * Sections: errors, arguments (keys, permits, times, specs), results and
 * handles, limiters, tables (in process and shared: one handle type, two
 * constructors), the module's functions, init.  index.js makes the classes
 * on these functions (Limiter, Table, SharedTable, their options, the
 * rate-limiter-flexible verbs, the express-rate-limit store) and gives this
 * file its two error classes (_init).
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
 * Handles are Node-API externals (a pointer with a finalizer), kept by
 * index.js in a private field of each object and passed as the first
 * argument: napi_unwrap costs a property lookup per call, several times
 * the rest of a tryAcquire.  A handle carries a kind word, checked on
 * every call, so a table's handle is never read as a limiter's.
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

/* The addon's state in one JavaScript environment (a thread or worker
 * has its own), passed to every function as its data.  The scratch is an
 * ArrayBuffer index.js reads as Float64Array [remaining, retryAfterMs,
 * waitMs, error, resetMs] and BigInt64Array [retryAfterNs, waitNs] (at byte
 * 48): a decide()
 * writes its details there and returns only `allowed`, and index.js makes
 * the result object (a JavaScript object literal costs far less than
 * properties set one by one through Node-API). */
typedef struct {
    napi_ref sluice_error; /* SluiceError (index.js), set by _init */
    napi_ref spec_error;   /* SpecError */
    napi_ref scratch;      /* the ArrayBuffer, kept alive */
    double *f;             /* its first 40 bytes */
    int64_t *b;            /* 16 bytes at 48 */
} addon;

/* may_fail: a decision may end in an error instead of deciding (sliding-log
 * and sliding-wheel grow their rings: SLUICE_ENOMEM), so tryAcquire asks
 * for the details to tell an error from a refusal; the other algorithms
 * cannot fail, and tryAcquire passes no result struct (the library then
 * skips computing remaining and the wait). */
typedef struct {
    uint32_t kind;
    bool may_fail;
    sluice_limiter *lim; /* NULL once closed */
} limiter_h;

typedef struct {
    uint32_t kind;
    bool may_fail; /* also for keys longer than 16 bytes (a copy) */
    bool shared;
    sluice_table *t; /* NULL once closed */
} table_h;

static bool alg_may_fail(const char *spec)
{
    sluice_spec_info si;
    if (sluice_spec_parse(spec, &si, NULL, 0) != 0)
        return true;
    return si.algorithm == SLUICE_ALG_SLIDING_LOG || si.algorithm == SLUICE_ALG_SLIDING_WHEEL;
}

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
/* Results and handles                                                       */

static napi_value make_int(napi_env env, double d)
{
    napi_value v;
    napi_create_double(env, d, &v);
    return v;
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

/* ns as whole milliseconds, rounded up (a client never retries early);
 * -1 stays -1 (never). */
static double ms_up(int64_t ns)
{
    if (ns < 0)
        return -1;
    uint64_t u = (uint64_t)ns;
    return (double)(u / 1000000u + (u % 1000000u != 0));
}

/* A decision's details into the scratch: remaining as a double (exact
 * below 2^53: every capacity the grammar takes as LIMIT; a larger burst=
 * reads rounded), the waits in ms rounded up and in exact ns. */
static void put_result(addon *a, const sluice_result *r)
{
    int64_t wait = r->wait_ns > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)r->wait_ns;
    a->f[0] = (double)r->remaining;
    a->f[1] = ms_up(r->retry_after_ns);
    a->f[2] = ms_up(wait);
    a->f[3] = r->error;
    a->b[0] = r->retry_after_ns;
    a->b[1] = wait;
}

/* After a decision: a request the library could not decide (res.error
 * other than EFULL: no memory) throws, naming the key's length; EFULL is a
 * refusal.  Returns false after throwing. */
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

/* The handle in `v`, checked to be of `kind` and open; NULL after
 * throwing. */
static void *get_handle(napi_env env, napi_value v, uint32_t kind)
{
    void *p = NULL;
    if (napi_get_value_external(env, v, &p) != napi_ok || p == NULL || *(uint32_t *)p != kind) {
        napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "sluice: not a handle of this kind");
        return NULL;
    }
    const char *cls = NULL;
    if (kind == KIND_LIMITER && ((limiter_h *)p)->lim == NULL)
        cls = "Limiter";
    else if (kind == KIND_TABLE && ((table_h *)p)->t == NULL)
        cls = ((table_h *)p)->shared ? "SharedTable" : "Table";
    if (cls != NULL) {
        char msg[64];
        snprintf(msg, sizeof msg, "sluice: the %s is closed", cls);
        throw_sluice(env, SLUICE_EINVAL, msg, false);
        return NULL;
    }
    return p;
}

/* The arguments of a call: up to 5, missing ones undefined, the addon. */
typedef struct {
    napi_value v[5];
    addon *a;
} call_args;

static void args(napi_env env, napi_callback_info info, call_args *c)
{
    size_t argc = 5;
    void *data = NULL;
    napi_get_cb_info(env, info, &argc, c->v, NULL, &data);
    c->a = data;
}

static napi_value external(napi_env env, void *h, napi_finalize fin)
{
    napi_value v;
    if (napi_create_external(env, h, fin, NULL, &v) != napi_ok) {
        fin(env, h, NULL);
        napi_throw_error(env, NULL, "sluice: cannot make a handle");
        return NULL;
    }
    return v;
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

/* ------------------------------------------------------------------------ */
/* Limiters                                                                  */

static void limiter_finalize(napi_env env, void *data, void *hint)
{
    (void)env;
    (void)hint;
    limiter_h *h = data;
    sluice_limiter_free(h->lim);
    free(h);
}

/* limiterNew(spec) -> handle */
static napi_value limiter_new(napi_env env, napi_callback_info info)
{
    call_args c;
    args(env, info, &c);
    char *spec = get_text(env, c.v[0], "spec", true);
    if (spec == NULL)
        return NULL;
    char err[ERRLEN] = "";
    sluice_limiter *lim = sluice_limiter_new(spec, err, sizeof err);
    bool may_fail = alg_may_fail(spec);
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
    h->may_fail = may_fail;
    h->lim = lim;
    return external(env, h, limiter_finalize);
}

/* The decision of (handle, permits = 1, nowNs?); NULL after throwing.  r
 * NULL: no details wanted (tryAcquire). */
static limiter_h *limiter_decide(napi_env env, call_args *c, uint64_t dflt_permits, int first,
                                 sluice_result *r, bool *ok)
{
    uint64_t permits = 0, now;
    bool given;
    limiter_h *h = get_handle(env, c->v[0], KIND_LIMITER);
    if (h == NULL)
        return NULL;
    if ((first == 1 && !get_u64(env, c->v[1], "permits", false, dflt_permits, &permits, NULL)) ||
        !get_u64(env, c->v[first + 1], "nowNs", true, 0, &now, &given))
        return NULL;
    if (first == 0)
        permits = dflt_permits;
    if (!given)
        now = sluice_limiter_now_ns(h->lim);
    if (r == NULL && !h->may_fail) {
        *ok = sluice_try_acquire_at(h->lim, permits, now, NULL);
        return h;
    }
    sluice_result own;
    if (r == NULL)
        r = &own;
    *ok = sluice_try_acquire_at(h->lim, permits, now, r);
    return decided(env, r, 0, false) ? h : NULL;
}

/* limiterTry(h, permits = 1, nowNs?) -> boolean */
static napi_value limiter_try(napi_env env, napi_callback_info info)
{
    call_args c;
    bool ok = false;
    args(env, info, &c);
    if (limiter_decide(env, &c, 1, 1, NULL, &ok) == NULL)
        return NULL;
    return boolean(env, ok);
}

/* limiterTryNow(h) -> boolean: tryAcquire() without arguments (one permit,
 * the limiter's clock), the common call, with no argument to check. */
static napi_value limiter_try_now(napi_env env, napi_callback_info info)
{
    size_t argc = 1;
    napi_value v;
    napi_get_cb_info(env, info, &argc, &v, NULL, NULL);
    limiter_h *h = get_handle(env, v, KIND_LIMITER);
    if (h == NULL)
        return NULL;
    if (!h->may_fail) /* the library's live call: its clock read inline */
        return boolean(env, sluice_try_acquire(h->lim, 1));
    uint64_t now = sluice_limiter_now_ns(h->lim);
    sluice_result r;
    bool ok = sluice_try_acquire_at(h->lim, 1, now, &r);
    return decided(env, &r, 0, false) ? boolean(env, ok) : NULL;
}

/* limiterDecide(h, permits = 1, nowNs?) -> allowed, details in the scratch */
static napi_value limiter_decide_js(napi_env env, napi_callback_info info)
{
    call_args c;
    sluice_result r;
    bool ok = false;
    args(env, info, &c);
    if (limiter_decide(env, &c, 1, 1, &r, &ok) == NULL)
        return NULL;
    put_result(c.a, &r);
    return boolean(env, ok);
}

/* limiterPeek(h, nowNs?) -> a probe (permits 0, changes nothing), details
 * in the scratch */
static napi_value limiter_peek(napi_env env, napi_callback_info info)
{
    call_args c;
    sluice_result r;
    bool ok = false;
    args(env, info, &c);
    if (limiter_decide(env, &c, 0, 0, &r, &ok) == NULL)
        return NULL;
    put_result(c.a, &r);
    return boolean(env, ok);
}

/* limiterSpec(h) -> the canonical spec */
static napi_value limiter_spec(napi_env env, napi_callback_info info)
{
    call_args c;
    napi_value v;
    char buf[SLUICE_SPEC_MAX];
    args(env, info, &c);
    limiter_h *h = get_handle(env, c.v[0], KIND_LIMITER);
    if (h == NULL)
        return NULL;
    if (sluice_limiter_spec_format(h->lim, buf, sizeof buf) < 0)
        buf[0] = '\0';
    napi_create_string_utf8(env, buf, NAPI_AUTO_LENGTH, &v);
    return v;
}

/* limiterClose(h): frees the C limiter now; idempotent. */
static napi_value limiter_close(napi_env env, napi_callback_info info)
{
    call_args c;
    void *p = NULL;
    args(env, info, &c);
    if (napi_get_value_external(env, c.v[0], &p) == napi_ok && p != NULL &&
        *(uint32_t *)p == KIND_LIMITER) {
        limiter_h *h = p;
        sluice_limiter_free(h->lim);
        h->lim = NULL;
    }
    return undefined(env);
}

/* ------------------------------------------------------------------------ */
/* Tables                                                                    */

static void table_finalize(napi_env env, void *data, void *hint)
{
    (void)env;
    (void)hint;
    table_h *h = data;
    sluice_table_free(h->t);
    free(h);
}

static napi_value table_handle(napi_env env, sluice_table *t, bool shared, bool may_fail)
{
    table_h *h = malloc(sizeof *h);
    if (h == NULL) {
        sluice_table_free(t);
        throw_code(env, SLUICE_ENOMEM, "a new table");
        return NULL;
    }
    h->kind = KIND_TABLE;
    h->t = t;
    h->shared = shared;
    h->may_fail = may_fail;
    return external(env, h, table_finalize);
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

/* tableNew(spec, maxKeys, flags = 0) -> handle */
static napi_value table_new(napi_env env, napi_callback_info info)
{
    call_args c;
    uint64_t max_keys;
    unsigned flags;
    args(env, info, &c);
    char *spec = get_text(env, c.v[0], "spec", true);
    if (spec == NULL)
        return NULL;
    if (!get_size(env, c.v[1], "maxKeys", 1, (uint64_t)1 << 32, &max_keys) ||
        !get_flags(env, c.v[2], &flags)) {
        free(spec);
        return NULL;
    }
    char err[ERRLEN] = "";
    sluice_table *t = sluice_table_new_flags(spec, (size_t)max_keys, flags, err, sizeof err);
    bool may_fail = alg_may_fail(spec);
    free(spec);
    if (t == NULL) {
        if (err[0] != '\0')
            throw_sluice(env, SLUICE_EINVAL, err, true);
        else
            throw_code(env, SLUICE_ENOMEM, "a new Table");
        return NULL;
    }
    return table_handle(env, t, false, may_fail);
}

/* sharedNew(path, spec, maxKeys, maxKeyBytes = 64, flags = 0) -> handle:
 * sluice_table_open.  A spec the grammar refuses is a SpecError; any other
 * refusal (another spec or size in the region, a path that is not ours)
 * a SluiceError with the library's reason. */
static napi_value shared_new(napi_env env, napi_callback_info info)
{
    call_args c;
    uint64_t max_keys, max_key_bytes = 64;
    unsigned flags;
    napi_valuetype t4;
    sluice_table *t = NULL;
    char err[ERRLEN] = "";
    args(env, info, &c);
    char *path = get_text(env, c.v[0], "path", false);
    if (path == NULL)
        return NULL;
    char *spec = get_text(env, c.v[1], "spec", true);
    if (spec == NULL) {
        free(path);
        return NULL;
    }
    int rc = sluice_spec_check(spec, NULL, 0, err, sizeof err);
    if (rc != 0) {
        throw_sluice(env, rc, err[0] ? err : sluice_strerror(rc), true);
        goto out;
    }
    if (!get_size(env, c.v[2], "maxKeys", 1, (uint64_t)1 << 32, &max_keys))
        goto out;
    napi_typeof(env, c.v[3], &t4);
    if (t4 != napi_undefined && t4 != napi_null &&
        !get_size(env, c.v[3], "maxKeyBytes", 0, SLUICE_MAX_KEY_BYTES, &max_key_bytes))
        goto out;
    if (!get_flags(env, c.v[4], &flags))
        goto out;
    t = sluice_table_open(path, spec, (size_t)max_keys, (size_t)max_key_bytes, flags, err,
                          sizeof err);
    if (t == NULL) {
        if (err[0] != '\0')
            throw_sluice(env, SLUICE_EINVAL, err, false);
        else
            throw_code(env, SLUICE_ENOMEM, "a new SharedTable");
    }
out:
    free(path);
    free(spec);
    return t != NULL ? table_handle(env, t, true, false) : NULL;
}

/* The arguments (h, key, permits, nowNs) of a table's decision. */
typedef struct {
    table_h *h;
    key_arg key;
    uint64_t permits;
    uint64_t now;
    bool now_given;
} table_args;

static bool table_args_get(napi_env env, call_args *c, uint64_t dflt_permits, table_args *a)
{
    a->h = get_handle(env, c->v[0], KIND_TABLE);
    if (a->h == NULL)
        return false;
    if (!get_key(env, c->v[1], &a->key))
        return false;
    if (!get_u64(env, c->v[2], "permits", false, dflt_permits, &a->permits, NULL) ||
        !get_u64(env, c->v[3], "nowNs", true, 0, &a->now, &a->now_given)) {
        key_done(&a->key);
        return false;
    }
    return true;
}

/* r NULL: no details wanted (tryAcquire); asked for all the same where
 * the decision may fail (a shared table never allocates). */
static bool table_decide(napi_env env, call_args *c, sluice_result *r, bool *ok)
{
    table_args a;
    sluice_result own;
    if (!table_args_get(env, c, 1, &a))
        return false;
    if (r == NULL && (a.h->shared || (!a.h->may_fail && a.key.n <= 16))) {
        if (a.now_given)
            *ok = sluice_table_try_acquire_at(a.h->t, a.key.p, a.key.n, a.permits, a.now, NULL);
        else
            *ok = sluice_table_try_acquire(a.h->t, a.key.p, a.key.n, a.permits, NULL);
        key_done(&a.key);
        return true;
    }
    if (r == NULL)
        r = &own;
    if (a.now_given)
        *ok = sluice_table_try_acquire_at(a.h->t, a.key.p, a.key.n, a.permits, a.now, r);
    else
        *ok = sluice_table_try_acquire(a.h->t, a.key.p, a.key.n, a.permits, r);
    key_done(&a.key);
    return decided(env, r, a.key.n, true);
}

/* tableTry(h, key, permits = 1, nowNs?) -> boolean */
static napi_value table_try(napi_env env, napi_callback_info info)
{
    call_args c;
    bool ok = false;
    args(env, info, &c);
    if (!table_decide(env, &c, NULL, &ok))
        return NULL;
    return boolean(env, ok);
}

/* tableDecide(h, key, permits = 1, nowNs?) -> allowed, details in the
 * scratch */
static napi_value table_decide_js(napi_env env, napi_callback_info info)
{
    call_args c;
    sluice_result r;
    bool ok = false;
    args(env, info, &c);
    if (!table_decide(env, &c, &r, &ok))
        return NULL;
    put_result(c.a, &r);
    return boolean(env, ok);
}

/* tableDecideReset(h, key, permits = 1) -> allowed: decide at the table's
 * clock, then read the key's rest time at that instant: the details in
 * the scratch, and in f[4] the ms (rounded up) until the key is back at
 * rest, every permit it holds returned (a fixed window's end; 0 for a key
 * that holds none).  The rate-limiter-flexible verbs' msBeforeNext, in
 * one call. */
static napi_value table_decide_reset(napi_env env, napi_callback_info info)
{
    call_args c;
    table_args a;
    sluice_result r;
    sluice_key_state st;
    args(env, info, &c);
    if (!table_args_get(env, &c, 1, &a))
        return NULL;
    uint64_t now = sluice_table_now_ns(a.h->t);
    bool ok = sluice_table_try_acquire_at(a.h->t, a.key.p, a.key.n, a.permits, now, &r);
    int rc = sluice_table_peek_at(a.h->t, a.key.p, a.key.n, 0, now, NULL, &st);
    key_done(&a.key);
    if (!decided(env, &r, a.key.n, true))
        return NULL;
    put_result(c.a, &r);
    c.a->f[4] = rc == 0 && st.rest_ns > now ? ms_up((int64_t)(st.rest_ns - now)) : 0;
    return boolean(env, ok);
}

/* tablePeek(h, key, permits = 0, nowNs?) -> what a request would get,
 * without making the key or changing anything (details in the scratch). */
static napi_value table_peek(napi_env env, napi_callback_info info)
{
    call_args c;
    table_args a;
    sluice_result r;
    args(env, info, &c);
    if (!table_args_get(env, &c, 0, &a))
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
    put_result(c.a, &r);
    return boolean(env, r.allowed);
}

/* tableRemove(h, key) -> boolean (true when the key was held);
 * tableReset(h, key) -> undefined (idempotent). */
static napi_value table_key_op(napi_env env, napi_callback_info info, bool reset)
{
    call_args c;
    key_arg k;
    args(env, info, &c);
    table_h *h = get_handle(env, c.v[0], KIND_TABLE);
    if (h == NULL || !get_key(env, c.v[1], &k))
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

/* tableSize(h) -> the keys held now (in use or at rest). */
static napi_value table_size(napi_env env, napi_callback_info info)
{
    call_args c;
    sluice_table_stats st;
    args(env, info, &c);
    table_h *h = get_handle(env, c.v[0], KIND_TABLE);
    if (h == NULL)
        return NULL;
    sluice_table_stats_get(h->t, &st);
    return make_int(env, (double)st.keys);
}

/* tableClose(h): frees the handle (a SharedTable's region stays, for the
 * other processes); idempotent. */
static napi_value table_close(napi_env env, napi_callback_info info)
{
    call_args c;
    void *p = NULL;
    args(env, info, &c);
    if (napi_get_value_external(env, c.v[0], &p) == napi_ok && p != NULL &&
        *(uint32_t *)p == KIND_TABLE) {
        table_h *h = p;
        sluice_table_free(h->t);
        h->t = NULL;
    }
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
    if (a->scratch != NULL)
        napi_delete_reference(env, a->scratch);
    free(a);
}

/* ------------------------------------------------------------------------ */
/* Init                                                                      */

static void export_int(napi_env env, napi_value exports, const char *name, int value)
{
    napi_value v;
    napi_create_int32(env, value, &v);
    napi_set_named_property(env, exports, name, v);
}

/* The two entry points NAPI_MODULE_INIT defines, declared first, so the
 * project's -Wmissing-prototypes holds for this file too. */
NAPI_MODULE_EXPORT int32_t node_api_module_get_api_version_v1(void);
NAPI_MODULE_EXPORT napi_value napi_register_module_v1(napi_env env, napi_value exports);

NAPI_MODULE_INIT()
{
    addon *a = calloc(1, sizeof *a);
    napi_value ab;
    void *mem = NULL;
    if (a == NULL || napi_set_instance_data(env, a, addon_finalize, NULL) != napi_ok) {
        free(a);
        napi_throw_error(env, NULL, "sluice: out of memory loading the addon");
        return NULL;
    }
    if (napi_create_arraybuffer(env, 64, &mem, &ab) != napi_ok ||
        napi_create_reference(env, ab, 1, &a->scratch) != napi_ok ||
        napi_set_named_property(env, exports, "_scratch", ab) != napi_ok)
        return NULL;
    a->f = mem;
    a->b = (int64_t *)((char *)mem + 48);
#define FN(name, fn) {name, NULL, fn, NULL, NULL, NULL, napi_default_method, a}
    const napi_property_descriptor fns[] = {
        FN("limiterNew", limiter_new),
        FN("limiterTry", limiter_try),
        FN("limiterTryNow", limiter_try_now),
        FN("limiterDecide", limiter_decide_js),
        FN("limiterPeek", limiter_peek),
        FN("limiterSpec", limiter_spec),
        FN("limiterClose", limiter_close),
        FN("tableNew", table_new),
        FN("sharedNew", shared_new),
        FN("tableTry", table_try),
        FN("tableDecide", table_decide_js),
        FN("tablePeek", table_peek),
        FN("tableDecideReset", table_decide_reset),
        FN("tableRemove", table_remove),
        FN("tableReset", table_reset),
        FN("tableSize", table_size),
        FN("tableClose", table_close),
        FN("now", fn_now),
        FN("version", fn_version),
        FN("checkSpec", fn_check_spec),
        FN("parseSpec", fn_parse_spec),
        FN("unlink", fn_unlink),
        FN("strerror", fn_strerror),
        FN("_init", fn_init),
    };
#undef FN
    if (napi_define_properties(env, exports, sizeof fns / sizeof fns[0], fns) != napi_ok)
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
