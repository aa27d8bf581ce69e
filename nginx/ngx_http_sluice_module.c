/* ngx_http_sluice_module.c -- sluice's limits in nginx, shared by the workers.
 *
 * Directives (docs/nginx.md):
 *
 *   sluice_zone NAME key=$variable spec="SPEC" max_keys=N
 *               [max_key_bytes=N] [policy=evict-lru|refuse]
 *               [path=PATH];                                      http
 *   sluice NAME [shadow];                          http, server, location
 *   sluice_status CODE;                            (default 429; 503 for
 *                                                  a concurrency zone)
 *   sluice_headers on|off;                         (default off)
 *   sluice_log_level info|notice|warn|error;       (default error)
 *   sluice_metrics;                                location: the exposition
 *   $sluice_status                                 PASSED, DELAYED, REJECTED, ...
 *
 * A zone is one sluice table placed in an nginx shared memory zone: nginx
 * maps its zones before it forks the workers, so every worker decides on
 * the same keys (sluice_table_attach: the region holds offsets only, and a
 * worker killed at any instruction blocks no other).  The zone's memory is
 * the table's region (sluice_table_region_size) plus the slab pool nginx
 * puts at the head of every zone; the region is the pool's one allocation,
 * and the pool's `data` remembers it, so a reload that keeps the zone
 * (same name, same size) attaches to the same region and keeps every
 * key's state.  The size is chosen when the configuration is read, beside
 * the running zone of that name: the same size exactly when max_keys,
 * max_key_bytes and policy are the same and the region holds the new spec,
 * another size otherwise (a new zone, fresh keys).  A new spec on a kept
 * zone is tried on a scratch table by init_zone and applied by the new
 * workers (init_process, sluice_table_reconfigure_at: the carry-over of a
 * changed limit), once nginx has committed the reload: a reload that
 * fails later changes nothing that runs.  A new zone's memory is a fresh
 * mapping, zero already: it is not written (nginx -t on 10M keys stays at
 * a few MB).
 *
 * The decision runs in the preaccess phase, as limit_req's: every `sluice`
 * of the location (inherited as a whole from the enclosing level when the
 * location has none) whose key is not empty is one limit, and the enforced
 * ones form one composite decision: all or nothing, so a refusal by one
 * zone charges no other.  Shadow limits decide and count but never refuse
 * (a dry run): they are charged when the request is admitted and they
 * would admit it, and a request they would refuse is logged -- the shadow
 * rule of the library's rule sets, sluice_shadow_try_acquire_at(): a
 * request the enforced zones refuse is not decided by a shadow zone.  A refusal
 * answers sluice_status; an admission by a leaky-bucket shaper with a wait
 * holds the request on a timer for that wait (bounded by the bucket's
 * capacity: capacity x PERIOD/LIMIT at most), as limit_req's delay does.
 * A request is decided once, whatever internal redirects follow: the
 * mark is a cleanup record in the main request's pool, which a redirect
 * does not wipe (the module context, which it does, only caches it).
 * Every key goes to its table whatever its length (a long one is held by
 * its keyed digest); a request the table cannot decide is a 500 with an
 * error line, never a refusal and never "not limited".
 *
 * A zone whose spec is `concurrency N [lease=D]` limits the requests in
 * flight per key (docs/nginx.md, "Concurrency zones"): its memory holds a
 * sluice_concurrency_region instead of a table, kept across reloads when
 * the canonical spec and max_keys are.  The preaccess phase takes one
 * permit of each such zone for the main request (a subrequest takes none),
 * before the rate zones, and a refusal by any zone gives them back; the
 * permits are held in the same decision mark, whose cleanup gives them
 * back when the main request's pool is destroyed: once, whatever the end.
 * A worker killed holding permits is the region's dead holder: its
 * permits come back at the key's next sweep (sluice/concurrency.h).
 *
 * Time: every call reads the zone's own clock (sluice_table_now_ns): the
 * monotonic clock, or CLOCK_REALTIME for a calendar quota (tz=), whose
 * windows end at local midnights.  The zones of one place share one time,
 * so a place that mixes the two axes is refused at configuration.
 *
 * sluice_headers on adds the RateLimit-Policy and RateLimit fields of the
 * IETF draft, one item per enforced rate limit, and Retry-After on a
 * refusal (include/sluice/http.h formats them).  A concurrency zone adds
 * none (docs/nginx.md, "Concurrency zones": the draft's fields are a quota
 * over a window, with a reset; requests in flight have neither).
 *
 * sluice_metrics serves every zone: a rate zone's table
 * (sluice_metrics_add_table) and a concurrency zone's region
 * (sluice_metrics_add_concurrency_region: held, N, keys, waiters and the
 * permits recovered from dead workers).  The counts live in the zones, so
 * every worker serves the same numbers.
 */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sluice.h>
#include <sluice/concurrency.h>
#include <sluice/http.h>
#include <sluice/metrics.h>
#include <sluice/rules.h>

#define SLUICE_NGX_ERRLEN 256
#define SLUICE_NGX_DEFAULT_KEY_BYTES 64
#define SLUICE_NGX_FIELD_MAX 4096

typedef struct ngx_http_sluice_zone_s {
    ngx_str_t                 name;
    ngx_http_complex_value_t  key;
    char                     *spec;          /* NUL-terminated */
    size_t                    max_keys;
    size_t                    max_key_bytes;
    unsigned                  flags;
    size_t                    region_size;   /* what the spec needs */
    size_t                    region_alloc;  /* what the zone holds: more when kept */
    char                     *made_spec;     /* the spec the region was made with */
    ngx_uint_t                pending;       /* the spec is applied by init_process */
    struct ngx_http_sluice_zone_s *old;      /* the running zone of this name:
                                              * valid until init_zone only */
    ngx_shm_zone_t           *shm_zone;
    sluice_table             *table;         /* this process's handle */
    sluice_http_policy        policy;
    ngx_uint_t                conc;          /* spec="concurrency N ...": a
                                              * sluice_concurrency_region */
    char                     *canon;         /* conc: the canonical spec */
    sluice_concurrency_region *region;       /* conc: this process's handle */
    size_t                    shm_size;      /* of shm_zone */
    char                     *path;          /* path=: a named table, or NULL */
    ngx_uint_t                declared;      /* its sluice_zone was read */
    ngx_uint_t                line;          /* of the first `sluice NAME` */
    u_char                   *file;
} ngx_http_sluice_zone_t;

typedef struct {
    ngx_array_t               zones;         /* of ngx_http_sluice_zone_t * */
    ngx_array_t               places;        /* of ngx_http_sluice_place_t: each
                                              * level's limits, for the clock check */
    sluice_metrics           *metrics;       /* per process, from init_process */
} ngx_http_sluice_main_conf_t;

typedef struct {
    ngx_array_t              *limits;        /* a level's ngx_http_sluice_limit_t */
    u_char                   *file;          /* of its first `sluice` */
    ngx_uint_t                line;
} ngx_http_sluice_place_t;

typedef struct {
    ngx_http_sluice_zone_t   *zone;
    ngx_flag_t                shadow;
} ngx_http_sluice_limit_t;

typedef struct {
    ngx_array_t              *limits;        /* of ngx_http_sluice_limit_t */
    ngx_uint_t                status;
    ngx_flag_t                headers;
    ngx_uint_t                log_level;     /* of a refusal; a delay one lower */
} ngx_http_sluice_loc_conf_t;

/* $sluice_status, as limit_req's $limit_req_status */
#define NGX_HTTP_SLUICE_PASSED           1
#define NGX_HTTP_SLUICE_DELAYED          2
#define NGX_HTTP_SLUICE_REJECTED         3
#define NGX_HTTP_SLUICE_DELAYED_DRY_RUN  4
#define NGX_HTTP_SLUICE_REJECTED_DRY_RUN 5

static ngx_str_t ngx_http_sluice_status_names[] = {
    ngx_null_string,
    ngx_string("PASSED"),
    ngx_string("DELAYED"),
    ngx_string("REJECTED"),
    ngx_string("DELAYED_DRY_RUN"),
    ngx_string("REJECTED_DRY_RUN")
};

/* The request's decision, kept in the main request's pool: a cleanup
 * record whose handler is ngx_http_sluice_ctx_mark.  An internal redirect
 * (index, try_files, error_page) wipes the module contexts, not the pool's
 * cleanups, so the mark survives it, as limit_req's r->main->limit_req_status
 * does; the module context only caches it. */
typedef struct {
    ngx_uint_t                status;        /* NGX_HTTP_SLUICE_*, 0: none */
    ngx_uint_t                nheld;         /* permits of concurrency zones
                                              * held, released by the mark */
    sluice_region_permit      held[];        /* [nheld]: the record's tail */
} ngx_http_sluice_ctx_t;

static ngx_int_t ngx_http_sluice_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_sluice_add_variables(ngx_conf_t *cf);
static void *ngx_http_sluice_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_sluice_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_sluice_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child);
static char *ngx_http_sluice_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_sluice_limit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_sluice_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_sluice_init_process(ngx_cycle_t *cycle);
static void ngx_http_sluice_exit_process(ngx_cycle_t *cycle);

static ngx_conf_num_bounds_t ngx_http_sluice_status_bounds = {
    ngx_conf_check_num_bounds, 400, 599
};

static ngx_conf_enum_t ngx_http_sluice_log_levels[] = {
    { ngx_string("info"), NGX_LOG_INFO },
    { ngx_string("notice"), NGX_LOG_NOTICE },
    { ngx_string("warn"), NGX_LOG_WARN },
    { ngx_string("error"), NGX_LOG_ERR },
    { ngx_null_string, 0 }
};

static ngx_command_t ngx_http_sluice_commands[] = {
    { ngx_string("sluice_zone"),
      NGX_HTTP_MAIN_CONF | NGX_CONF_2MORE,
      ngx_http_sluice_zone,
      0,
      0,
      NULL },

    { ngx_string("sluice"),
      NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE12,
      ngx_http_sluice_limit,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("sluice_status"),
      NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sluice_loc_conf_t, status),
      &ngx_http_sluice_status_bounds },

    { ngx_string("sluice_headers"),
      NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sluice_loc_conf_t, headers),
      NULL },

    { ngx_string("sluice_log_level"),
      NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_sluice_loc_conf_t, log_level),
      &ngx_http_sluice_log_levels },

    { ngx_string("sluice_metrics"),
      NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS,
      ngx_http_sluice_metrics,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};

static ngx_http_module_t ngx_http_sluice_module_ctx = {
    ngx_http_sluice_add_variables,         /* preconfiguration */
    ngx_http_sluice_init,                  /* postconfiguration */
    ngx_http_sluice_create_main_conf,      /* create main configuration */
    NULL,                                  /* init main configuration */
    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */
    ngx_http_sluice_create_loc_conf,       /* create location configuration */
    ngx_http_sluice_merge_loc_conf         /* merge location configuration */
};

ngx_module_t ngx_http_sluice_module = {
    NGX_MODULE_V1,
    &ngx_http_sluice_module_ctx,           /* module context */
    ngx_http_sluice_commands,              /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_sluice_init_process,          /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_sluice_exit_process,          /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};

/* ---- configuration ---------------------------------------------------- */

static void *
ngx_http_sluice_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_sluice_main_conf_t *mcf = ngx_pcalloc(cf->pool, sizeof(*mcf));

    if (mcf == NULL) {
        return NULL;
    }
    if (ngx_array_init(&mcf->zones, cf->pool, 4, sizeof(ngx_http_sluice_zone_t *)) != NGX_OK
        || ngx_array_init(&mcf->places, cf->pool, 4, sizeof(ngx_http_sluice_place_t)) != NGX_OK)
    {
        return NULL;
    }
    return mcf;
}

static void *
ngx_http_sluice_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_sluice_loc_conf_t *lcf = ngx_pcalloc(cf->pool, sizeof(*lcf));

    if (lcf == NULL) {
        return NULL;
    }
    lcf->limits = NGX_CONF_UNSET_PTR;
    lcf->status = NGX_CONF_UNSET_UINT;
    lcf->headers = NGX_CONF_UNSET;
    lcf->log_level = NGX_CONF_UNSET_UINT;
    return lcf;
}

static char *
ngx_http_sluice_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_sluice_loc_conf_t *prev = parent;
    ngx_http_sluice_loc_conf_t *conf = child;

    (void) cf;
    /* the limits are inherited as a whole, as limit_req's are */
    ngx_conf_merge_ptr_value(conf->limits, prev->limits, NULL);
    /* 0: the kind's default, 429 for a rate, 503 for a concurrency zone
     * (limit_conn's) -- ngx_http_sluice_status */
    ngx_conf_merge_uint_value(conf->status, prev->status, 0);
    ngx_conf_merge_value(conf->headers, prev->headers, 0);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_ERR);
    return NGX_CONF_OK;
}

/* The zone of the running configuration (the cycle being replaced) with
 * this name, or NULL: while a new configuration is read, ngx_cycle is still
 * the running one, and its zones and their data live until it is freed.
 * The tag tells sluice's zones from another module's. */
static ngx_http_sluice_zone_t *
ngx_http_sluice_old_zone(ngx_str_t *name)
{
    ngx_cycle_t *old = (ngx_cycle_t *) ngx_cycle;
    ngx_list_part_t *part;
    ngx_shm_zone_t *shm;
    ngx_uint_t i;

    if (old == NULL) {
        return NULL;
    }
    for (part = &old->shared_memory.part; part != NULL; part = part->next) {
        shm = part->elts;
        for (i = 0; i < part->nelts; i++) {
            if (shm[i].tag == &ngx_http_sluice_module && shm[i].data != NULL
                && shm[i].shm.name.len == name->len
                && ngx_strncmp(shm[i].shm.name.data, name->data, name->len) == 0)
            {
                return shm[i].data;
            }
        }
    }
    return NULL;
}

/* The first of the kind of limit, max_keys, max_key_bytes, policy that
 * differs, or NULL. */
static const char *
ngx_http_sluice_changed(const ngx_http_sluice_zone_t *oz, const ngx_http_sluice_zone_t *z)
{
    if (oz->conc != z->conc) {
        return "the kind of limit (rate or concurrency)";
    }
    if (oz->max_keys != z->max_keys) {
        return "max_keys";
    }
    if (oz->max_key_bytes != z->max_key_bytes) {
        return "max_key_bytes";
    }
    if (oz->flags != z->flags) {
        return "policy";
    }
    return NULL;
}

/* Would the region take the change of spec oz -> z?  Tried on a scratch
 * table of one key made with the spec the region was made with (the ring
 * of a sliding window is sized by it), so the running zone is not touched
 * before nginx commits the new configuration. */
static ngx_int_t
ngx_http_sluice_try_change(ngx_http_sluice_zone_t *z, ngx_log_t *log, char *err, size_t errlen)
{
    size_t size = sluice_table_region_size(z->made_spec, 1, z->max_key_bytes, err, errlen);
    sluice_table *t;
    void *mem;
    int rc;

    if (size == 0) {
        return NGX_ERROR;
    }
    mem = ngx_memalign(64, size, log);
    if (mem == NULL) {
        ngx_snprintf((u_char *) err, errlen, "no memory to try the change%Z");
        return NGX_ERROR;
    }
    ngx_memzero(mem, size);
    t = sluice_table_attach(mem, size, z->made_spec, 1, z->max_key_bytes, z->flags, err, errlen);
    rc = t == NULL ? -1 : sluice_table_reconfigure_at(t, z->spec, sluice_table_now_ns(t), err,
                                                      errlen);
    sluice_table_free(t);
    ngx_free(mem);
    return rc == 0 ? NGX_OK : NGX_ERROR;
}

/* A zone with path=: the named table sluice_table_open() makes or attaches
 * (a POSIX shared memory object for "/name", a file otherwise), so its keys
 * outlive nginx (stop, start, binary upgrade) and application processes
 * can open it too.  A change of spec on a reload is handled as for a zone
 * in nginx's memory (tried now, applied by the new workers); a change of
 * max_keys, max_key_bytes or policy is refused by the table (another path,
 * or sluice_table_unlink, starts afresh). */
static ngx_int_t
ngx_http_sluice_open_zone(ngx_http_sluice_zone_t *z, ngx_http_sluice_zone_t *oz, ngx_log_t *log)
{
    char err[SLUICE_NGX_ERRLEN];

    z->table = sluice_table_open(z->path, z->spec, z->max_keys, z->max_key_bytes, z->flags, err,
                                 sizeof err);
    if (z->table == NULL && oz != NULL && oz->path != NULL && ngx_strcmp(oz->path, z->path) == 0
        && ngx_http_sluice_changed(oz, z) == NULL)
    {
        z->table = sluice_table_open(z->path, oz->spec, z->max_keys, z->max_key_bytes, z->flags,
                                     err, sizeof err);
        z->made_spec = oz->spec; /* the ring the file was made with is unknown here */
        if (z->table != NULL && ngx_http_sluice_try_change(z, log, err, sizeof err) != NGX_OK) {
            sluice_table_free(z->table);
            z->table = NULL;
        }
        z->made_spec = z->spec;
        z->pending = z->table != NULL;
    }
    if (z->table == NULL) {
        ngx_log_error(NGX_LOG_EMERG, log, 0, "sluice_zone \"%V\": path \"%s\": %s", &z->name,
                      z->path, err);
        return NGX_ERROR;
    }
    return NGX_OK;
}

/* The region of a concurrency zone: made once, kept across reloads that
 * keep the zone (same name, same size: the size is kept exactly when the
 * canonical spec and max_keys are), so the permits held by the old workers'
 * requests stay counted, and their releases (by the old workers, as those
 * requests end) land in the region the new workers decide on.  Another
 * spec or max_keys is a new zone: its keys start with nothing held, while
 * the old workers' requests go on holding theirs in the old one. */
static ngx_int_t
ngx_http_sluice_init_conc_zone(ngx_shm_zone_t *shm_zone, ngx_http_sluice_zone_t *oz)
{
    ngx_http_sluice_zone_t *z = shm_zone->data;
    ngx_slab_pool_t *shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;
    char err[SLUICE_NGX_ERRLEN];
    void *region;

    if (oz != NULL || shm_zone->shm.exists) {
        region = shpool->data;
    } else {
        region = ngx_slab_alloc(shpool, z->region_alloc); /* zero already, as above */
        if (region == NULL) {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "sluice_zone \"%V\": no room for %uz bytes in its shared memory",
                          &z->name, z->region_alloc);
            return NGX_ERROR;
        }
        shpool->data = region;
        if (z->old != NULL) {
            ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                          "sluice_zone \"%V\": spec or max_keys changed: a new zone, its"
                          " keys start with no permit held", &z->name);
        }
    }
    z->region = sluice_concurrency_region_attach(region, z->region_alloc, z->spec, z->max_keys,
                                                 err, sizeof err);
    if (z->region == NULL) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0, "sluice_zone \"%V\": %s", &z->name,
                      err);
        return NGX_ERROR;
    }
    return NGX_OK;
}

/* The region of a zone: made once, kept across reloads that keep the zone
 * (same name, same size: the size is chosen at parse time so that it is
 * kept exactly when max_keys, max_key_bytes and policy are, and the region
 * holds the new spec).  A change of spec is not applied here: nginx may
 * still fail this reload (another zone, another module), and the running
 * workers decide on the same region.  The handle is attached with the spec
 * the region holds, the change is tried on a scratch table, and the new
 * workers apply it (init_process), once the configuration is committed. */
static ngx_int_t
ngx_http_sluice_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_sluice_zone_t *z = shm_zone->data;
    ngx_http_sluice_zone_t *oz = data;
    ngx_slab_pool_t *shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;
    char err[SLUICE_NGX_ERRLEN];
    const char *what;
    void *region;

    if (z->path != NULL) {
        return ngx_http_sluice_open_zone(z, oz, shm_zone->shm.log);
    }
    if (z->conc) {
        return ngx_http_sluice_init_conc_zone(shm_zone, oz);
    }
    if (oz != NULL || shm_zone->shm.exists) {
        region = shpool->data;
    } else {
        /* A new zone is a fresh anonymous mapping, zero already: no
         * ngx_slab_calloc, which would write (and make resident) every byte
         * of it -- 1.5 GB for 10M keys, even under nginx -t. */
        region = ngx_slab_alloc(shpool, z->region_alloc);
        if (region == NULL) {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "sluice_zone \"%V\": no room for %uz bytes in its shared memory",
                          &z->name, z->region_alloc);
            return NGX_ERROR;
        }
        shpool->data = region;
        if (z->old != NULL && (what = ngx_http_sluice_changed(z->old, z)) != NULL) {
            ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                          "sluice_zone \"%V\": %s changed: a new zone, its keys start afresh",
                          &z->name, what);
        }
    }

    z->table = sluice_table_attach(region, z->region_alloc, z->spec, z->max_keys,
                                   z->max_key_bytes, z->flags, err, sizeof err);
    if (z->table == NULL && oz != NULL) {
        z->table = sluice_table_attach(region, z->region_alloc, oz->spec, oz->max_keys,
                                       oz->max_key_bytes, oz->flags, err, sizeof err);
        if (z->table != NULL && ngx_http_sluice_try_change(z, shm_zone->shm.log, err, sizeof err)
                                    != NGX_OK)
        {
            sluice_table_free(z->table);
            z->table = NULL;
        }
        z->pending = z->table != NULL;
    }
    if (z->table == NULL) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0, "sluice_zone \"%V\": %s",
                      &z->name, err);
        return NGX_ERROR;
    }
    return NGX_OK;
}

static void
ngx_http_sluice_free_zone(void *data)
{
    ngx_http_sluice_zone_t *z = data;

    sluice_concurrency_region_free(z->region); /* NULL for a rate zone */
    z->region = NULL;
    sluice_table_free(z->table); /* the handle; the region stays */
    z->table = NULL;
}

/* nginx splits `spec="token-bucket 10/s burst=5"` at its spaces (a quote
 * only quotes at the start of an argument): join value[*i] and the
 * arguments after it, one space apart, up to the one that ends the quote.
 * `"spec=token-bucket 10/s"` (quoted whole) comes in one piece. */
static char *
ngx_http_sluice_join_spec(ngx_conf_t *cf, ngx_str_t *value, ngx_uint_t n, ngx_uint_t *i,
                          ngx_str_t *out)
{
    ngx_str_t first = value[*i];
    size_t len, k;
    ngx_uint_t j;
    u_char *p;

    first.data += 5; /* "spec=" */
    first.len -= 5;
    if (first.len == 0 || first.data[0] != '"') {
        *out = first;
        return NGX_CONF_OK;
    }
    len = 0;
    for (j = *i; j < n; j++) {
        len += value[j].len + 1;
        if (value[j].len > 0 && value[j].data[value[j].len - 1] == '"'
            && !(j == *i && value[j].len == 6))
        {
            break;
        }
    }
    if (j == n) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "unterminated quote in \"%V\"", &value[*i]);
        return NGX_CONF_ERROR;
    }
    p = ngx_pnalloc(cf->pool, len);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }
    out->data = p;
    p = ngx_cpymem(p, first.data + 1, first.len - 1);
    for (k = *i + 1; k <= j; k++) {
        *p++ = ' ';
        p = ngx_cpymem(p, value[k].data, value[k].len);
    }
    out->len = (size_t) (p - out->data) - 1; /* drop the closing quote */
    *i = j;
    return NGX_CONF_OK;
}

/* The zone called `name`, made (undeclared) when `sluice NAME` comes
 * before its `sluice_zone`, as limit_req allows; NULL on no memory. */
static ngx_http_sluice_zone_t *
ngx_http_sluice_zone_get(ngx_conf_t *cf, ngx_http_sluice_main_conf_t *mcf, ngx_str_t *name)
{
    ngx_http_sluice_zone_t **zones = mcf->zones.elts, *z, **slot;
    ngx_uint_t i;

    for (i = 0; i < mcf->zones.nelts; i++) {
        if (zones[i]->name.len == name->len
            && ngx_strncmp(zones[i]->name.data, name->data, name->len) == 0)
        {
            return zones[i];
        }
    }
    z = ngx_pcalloc(cf->pool, sizeof(*z));
    slot = ngx_array_push(&mcf->zones);
    if (z == NULL || slot == NULL) {
        return NULL;
    }
    z->name = *name;
    z->file = cf->conf_file->file.name.data;
    z->line = cf->conf_file->line;
    *slot = z;
    return z;
}

/* One parameter once: `seen` collects the bits of those read so far. */
static ngx_int_t
ngx_http_sluice_once(ngx_conf_t *cf, ngx_uint_t *seen, ngx_uint_t bit, ngx_str_t *value)
{
    if (*seen & bit) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "duplicate parameter \"%V\"", value);
        return NGX_ERROR;
    }
    *seen |= bit;
    return NGX_OK;
}

static char *
ngx_http_sluice_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_sluice_main_conf_t *mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_sluice_module);
    ngx_http_sluice_zone_t *z;
    ngx_http_compile_complex_value_t ccv;
    ngx_str_t *value = cf->args->elts, spec = ngx_null_string, key = ngx_null_string;
    ngx_str_t *rate_only = NULL; /* a parameter a concurrency zone refuses */
    ngx_uint_t i, n = cf->args->nelts, seen = 0;
    ngx_int_t num;
    long phys_pages, page_bytes;
    char err[SLUICE_NGX_ERRLEN], name[SLUICE_HTTP_NAME_MAX + 1];
    ngx_pool_cleanup_t *cln;
    size_t size, pages;

    (void) cmd;
    (void) conf;
    if (value[1].len == 0 || value[1].len > SLUICE_HTTP_NAME_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sluice_zone: the name must have 1 to %d bytes", SLUICE_HTTP_NAME_MAX);
        return NGX_CONF_ERROR;
    }
    z = ngx_http_sluice_zone_get(cf, mcf, &value[1]);
    if (z == NULL) {
        return NGX_CONF_ERROR;
    }
    if (z->declared) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "duplicate sluice_zone \"%V\"", &z->name);
        return NGX_CONF_ERROR;
    }
    z->declared = 1;
    z->max_key_bytes = SLUICE_NGX_DEFAULT_KEY_BYTES;
    /* nginx zones evict the least recently used key when full, as
     * limit_req's do: a flood of new keys cannot lock every new client out
     * (docs/nginx.md, "Full zones"); policy=refuse keeps the contract's
     * default. */
    z->flags = SLUICE_TABLE_EVICT_LRU;

    for (i = 2; i < n; i++) {
        if (ngx_strncmp(value[i].data, "key=", 4) == 0) {
            if (ngx_http_sluice_once(cf, &seen, 1, &value[i]) != NGX_OK) {
                return NGX_CONF_ERROR;
            }
            key.data = value[i].data + 4;
            key.len = value[i].len - 4;
        } else if (ngx_strncmp(value[i].data, "spec=", 5) == 0) {
            if (ngx_http_sluice_once(cf, &seen, 2, &value[i]) != NGX_OK) {
                return NGX_CONF_ERROR;
            }
            if (ngx_http_sluice_join_spec(cf, value, n, &i, &spec) != NGX_CONF_OK) {
                return NGX_CONF_ERROR;
            }
        } else if (ngx_strncmp(value[i].data, "max_keys=", 9) == 0) {
            if (ngx_http_sluice_once(cf, &seen, 4, &value[i]) != NGX_OK) {
                return NGX_CONF_ERROR;
            }
            num = ngx_atoi(value[i].data + 9, value[i].len - 9);
            if (num == NGX_ERROR || num < 1 || (uint64_t) num > 4294967296ULL) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid \"%V\": 1 .. 2^32 keys", &value[i]);
                return NGX_CONF_ERROR;
            }
            z->max_keys = (size_t) num;
        } else if (ngx_strncmp(value[i].data, "max_key_bytes=", 14) == 0) {
            if (ngx_http_sluice_once(cf, &seen, 8, &value[i]) != NGX_OK) {
                return NGX_CONF_ERROR;
            }
            num = ngx_atoi(value[i].data + 14, value[i].len - 14);
            if (num == NGX_ERROR || num < 1 || num > SLUICE_MAX_KEY_BYTES) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid \"%V\": 1 .. %d bytes",
                                   &value[i], SLUICE_MAX_KEY_BYTES);
                return NGX_CONF_ERROR;
            }
            z->max_key_bytes = (size_t) num;
            rate_only = &value[i];
        } else if (ngx_strncmp(value[i].data, "path=", 5) == 0) {
            if (ngx_http_sluice_once(cf, &seen, 32, &value[i]) != NGX_OK) {
                return NGX_CONF_ERROR;
            }
            if (value[i].len == 5) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid \"%V\": an empty path",
                                   &value[i]);
                return NGX_CONF_ERROR;
            }
            z->path = ngx_pnalloc(cf->pool, value[i].len - 5 + 1);
            if (z->path == NULL) {
                return NGX_CONF_ERROR;
            }
            ngx_memcpy(z->path, value[i].data + 5, value[i].len - 5);
            z->path[value[i].len - 5] = '\0';
            rate_only = &value[i];
        } else if (value[i].len == 13 && ngx_strncmp(value[i].data, "policy=refuse", 13) == 0) {
            if (ngx_http_sluice_once(cf, &seen, 16, &value[i]) != NGX_OK) {
                return NGX_CONF_ERROR;
            }
            z->flags &= ~SLUICE_TABLE_EVICT_LRU;
            rate_only = &value[i];
        } else if (value[i].len == 16 && ngx_strncmp(value[i].data, "policy=evict-lru", 16) == 0) {
            if (ngx_http_sluice_once(cf, &seen, 16, &value[i]) != NGX_OK) {
                return NGX_CONF_ERROR;
            }
            z->flags |= SLUICE_TABLE_EVICT_LRU;
            rate_only = &value[i];
        } else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\"", &value[i]);
            return NGX_CONF_ERROR;
        }
    }
    if (key.len == 0 || spec.len == 0 || z->max_keys == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"sluice_zone %V\" needs key=, spec= and max_keys=", &z->name);
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ccv));
    ccv.cf = cf;
    ccv.value = &key;
    ccv.complex_value = &z->key;
    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    z->spec = ngx_pnalloc(cf->pool, spec.len + 1);
    if (z->spec == NULL) {
        return NGX_CONF_ERROR;
    }
    ngx_memcpy(z->spec, spec.data, spec.len);
    z->spec[spec.len] = '\0';

    /* nginx -t names the token: the spec, then the region it needs. */
    ngx_memcpy(name, z->name.data, z->name.len);
    name[z->name.len] = '\0';
    z->conc = spec.len >= 11 && ngx_strncmp(spec.data, "concurrency", 11) == 0
              && (spec.len == 11 || spec.data[11] == ' ');
    if (z->conc) {
        /* a concurrency zone is a sluice_concurrency_region: a key's
         * digest, no eviction (a key holding permits is never dropped),
         * in nginx's memory only */
        if (rate_only != NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "sluice_zone \"%V\": \"%V\" is not a parameter of a concurrency"
                               " zone (key=, spec=, max_keys= only)", &z->name, rate_only);
            return NGX_CONF_ERROR;
        }
        z->canon = ngx_pnalloc(cf->pool, SLUICE_NGX_ERRLEN);
        if (z->canon == NULL) {
            return NGX_CONF_ERROR;
        }
        if (sluice_concurrency_spec_check(z->spec, z->canon, SLUICE_NGX_ERRLEN, err, sizeof err)
            != 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "sluice_zone \"%V\": spec \"%s\": %s",
                               &z->name, z->spec, err);
            return NGX_CONF_ERROR;
        }
        z->region_size = sluice_concurrency_region_size(z->spec, z->max_keys, err, sizeof err);
    } else {
        if (sluice_http_policy_init(&z->policy, name, z->spec, err, sizeof err) != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "sluice_zone \"%V\": spec \"%s\": %s",
                               &z->name, z->spec, err);
            return NGX_CONF_ERROR;
        }
        z->region_size = sluice_table_region_size(z->spec, z->max_keys, z->max_key_bytes,
                                                  err, sizeof err);
    }
    if (z->region_size == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "sluice_zone \"%V\": %s", &z->name, err);
        return NGX_CONF_ERROR;
    }
    /* A table is reserved whole (nothing is allocated later): more than the
     * machine's memory is refused here, not by a failed mmap at start. */
    phys_pages = sysconf(_SC_PHYS_PAGES);
    page_bytes = sysconf(_SC_PAGESIZE);
    if (phys_pages > 0 && page_bytes > 0
        && z->region_size / (size_t) page_bytes >= (size_t) phys_pages)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "sluice_zone \"%V\": max_keys=%uz needs %uz bytes of shared memory,"
                           " more than this machine's %uz", &z->name, z->max_keys,
                           z->region_size, (size_t) phys_pages * (size_t) page_bytes);
        return NGX_CONF_ERROR;
    }

    /* The size decides whether nginx keeps the running zone (same name,
     * same size) or makes a new one.  Kept when max_keys, max_key_bytes
     * and policy are the same and the region holds the new spec: then the
     * old size, whatever it was.  Otherwise a new zone, of a size the old
     * one does not have, so that a change is never attached to a region
     * made for other parameters. */
    z->old = ngx_http_sluice_old_zone(&z->name);
    z->region_alloc = z->region_size;
    z->made_spec = z->spec;
    if (z->path != NULL) {
        /* the table is the named region; nginx's zone only carries the
         * zone from one configuration to the next (the same size always) */
        size = 8 * ngx_pagesize;
    } else if (z->old != NULL && ngx_http_sluice_changed(z->old, z) == NULL
               && z->region_size <= z->old->region_alloc
               && (!z->conc || ngx_strcmp(z->old->canon, z->canon) == 0))
    {
        z->region_alloc = z->old->region_alloc;
        size = z->old->shm_size;
        /* a copy: the old configuration's memory goes with it */
        z->made_spec = ngx_pnalloc(cf->pool, ngx_strlen(z->old->made_spec) + 1);
        if (z->made_spec == NULL) {
            return NGX_CONF_ERROR;
        }
        ngx_memcpy(z->made_spec, z->old->made_spec, ngx_strlen(z->old->made_spec) + 1);
    } else {
        /* the slab pool's own pages and page descriptors, then the region */
        pages = z->region_size / ngx_pagesize + 1;
        size = 8 * ngx_pagesize + pages * (ngx_pagesize + 64);
        if (z->old != NULL && size == z->old->shm_size) {
            size += ngx_pagesize;
        }
    }
    z->shm_size = size;
    z->shm_zone = ngx_shared_memory_add(cf, &z->name, size, &ngx_http_sluice_module);
    if (z->shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }
    if (z->shm_zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "shared memory \"%V\" is already used", &z->name);
        return NGX_CONF_ERROR;
    }
    z->shm_zone->init = ngx_http_sluice_init_zone;
    z->shm_zone->data = z;
    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NGX_CONF_ERROR;
    }
    cln->handler = ngx_http_sluice_free_zone;
    cln->data = z;
    return NGX_CONF_OK;
}

static char *
ngx_http_sluice_limit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_sluice_main_conf_t *mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_sluice_module);
    ngx_http_sluice_loc_conf_t *lcf = conf;
    ngx_http_sluice_zone_t *z;
    ngx_http_sluice_limit_t *limit, *limits;
    ngx_http_sluice_place_t *place;
    ngx_str_t *value = cf->args->elts;
    ngx_uint_t i;
    ngx_flag_t shadow = 0;

    (void) cmd;
    if (cf->args->nelts == 3) {
        if (value[2].len != 6 || ngx_strncmp(value[2].data, "shadow", 6) != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid parameter \"%V\"", &value[2]);
            return NGX_CONF_ERROR;
        }
        shadow = 1;
    }
    /* the zone may be declared later in the file: checked at the end */
    z = ngx_http_sluice_zone_get(cf, mcf, &value[1]);
    if (z == NULL) {
        return NGX_CONF_ERROR;
    }
    if (lcf->limits == NGX_CONF_UNSET_PTR) {
        lcf->limits = ngx_array_create(cf->pool, 2, sizeof(ngx_http_sluice_limit_t));
        place = ngx_array_push(&mcf->places);
        if (lcf->limits == NULL || place == NULL) {
            return NGX_CONF_ERROR;
        }
        place->limits = lcf->limits;
        place->file = cf->conf_file->file.name.data;
        place->line = cf->conf_file->line;
    }
    limits = lcf->limits->elts;
    for (i = 0; i < lcf->limits->nelts; i++) {
        if (limits[i].zone == z) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "duplicate sluice \"%V\"", &value[1]);
            return NGX_CONF_ERROR;
        }
    }
    if (lcf->limits->nelts >= SLUICE_COMPOSITE_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "at most %d sluice limits in one place",
                           SLUICE_COMPOSITE_MAX);
        return NGX_CONF_ERROR;
    }
    limit = ngx_array_push(lcf->limits);
    if (limit == NULL) {
        return NGX_CONF_ERROR;
    }
    limit->zone = z;
    limit->shadow = shadow;
    return NGX_CONF_OK;
}

/* ---- the decision ----------------------------------------------------- */

/* Append `name: value` to the response's headers. */
static ngx_int_t
ngx_http_sluice_add_header(ngx_http_request_t *r, const char *name, const char *value, size_t len)
{
    ngx_table_elt_t *h = ngx_list_push(&r->headers_out.headers);
    u_char *v;

    if (h == NULL) {
        return NGX_ERROR;
    }
    v = ngx_pnalloc(r->pool, len);
    if (v == NULL) {
        h->hash = 0;
        return NGX_ERROR;
    }
    ngx_memcpy(v, value, len);
    h->hash = 1;
    h->key.data = (u_char *) name;
    h->key.len = ngx_strlen(name);
    h->value.data = v;
    h->value.len = len;
#if defined(nginx_version) && nginx_version >= 1023000
    h->next = NULL;
#endif
    return NGX_OK;
}

static ngx_int_t
ngx_http_sluice_headers(ngx_http_request_t *r, ngx_http_sluice_zone_t **zones,
                        const sluice_result *per, ngx_uint_t n, const sluice_result *res,
                        uint64_t now)
{
    char buf[SLUICE_NGX_FIELD_MAX], num[32];
    size_t len = 0;
    ngx_uint_t i;
    int64_t retry = -1;
    sluice_http_state st;

    for (i = 0; i < n; i++) {
        (void) sluice_http_policy_value(&zones[i]->policy, NULL, 0, buf, sizeof buf, &len);
    }
    if (len < sizeof buf && ngx_http_sluice_add_header(r, "RateLimit-Policy", buf, len) != NGX_OK) {
        return NGX_ERROR;
    }
    len = 0;
    for (i = 0; i < n; i++) {
        (void) sluice_http_ratelimit_value(&zones[i]->policy, &per[i], now, NULL, 0, buf,
                                           sizeof buf, &len);
        if (!res->allowed && !per[i].allowed
            && sluice_http_state_get(&zones[i]->policy, &per[i], now, &st) == 0
            && st.retry_after_s > retry)
        {
            retry = st.retry_after_s;
        }
    }
    if (len < sizeof buf && ngx_http_sluice_add_header(r, "RateLimit", buf, len) != NGX_OK) {
        return NGX_ERROR;
    }
    if (!res->allowed && retry >= 0) {
        len = (size_t) (ngx_snprintf((u_char *) num, sizeof num, "%L", retry) - (u_char *) num);
        if (ngx_http_sluice_add_header(r, "Retry-After", num, len) != NGX_OK) {
            return NGX_ERROR;
        }
    }
    return NGX_OK;
}

static void
ngx_http_sluice_delay(ngx_http_request_t *r)
{
    ngx_event_t *wev = r->connection->write;

    if (wev->delayed) {
        /* woken by a write event before the timer: wait on */
        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        }
        return;
    }
    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}

/* The status of a refusal: sluice_status, or the kind's default. */
static ngx_int_t
ngx_http_sluice_status(ngx_http_sluice_loc_conf_t *lcf, ngx_uint_t dflt)
{
    return (ngx_int_t) (lcf->status != 0 ? lcf->status : dflt);
}

/* Give back the concurrency permits the request holds, last taken first.
 * Each is released once: nheld drops before the release. */
static void
ngx_http_sluice_release(ngx_http_sluice_ctx_t *ctx)
{
    uint64_t now = sluice_now_ns();

    while (ctx->nheld > 0) {
        ctx->nheld--;
        (void) sluice_region_permit_release_at(&ctx->held[ctx->nheld], now);
    }
}

/* The cleanup handler that marks a request decided.  It runs once, when
 * the main request's pool is destroyed -- whatever the request's end: a
 * response sent, a client gone, a timeout, an error page -- and gives back
 * the concurrency permits the request holds. */
static void
ngx_http_sluice_ctx_mark(void *data)
{
    ngx_http_sluice_release(data);
}

/* The main request's decision, or NULL when none was made yet.  The
 * cleanups are the main request's own list, bounded by what it registered. */
static ngx_http_sluice_ctx_t *
ngx_http_sluice_get_ctx(ngx_http_request_t *r)
{
    ngx_http_request_t *m = r->main;
    ngx_http_sluice_ctx_t *ctx = ngx_http_get_module_ctx(m, ngx_http_sluice_module);
    ngx_pool_cleanup_t *cln;

    if (ctx != NULL) {
        return ctx;
    }
    for (cln = m->pool->cleanup; cln != NULL; cln = cln->next) {
        if (cln->handler == ngx_http_sluice_ctx_mark) {
            ctx = cln->data;
            ngx_http_set_ctx(m, ctx, ngx_http_sluice_module);
            return ctx;
        }
    }
    return NULL;
}

static ngx_int_t
ngx_http_sluice_handler(ngx_http_request_t *r)
{
    ngx_http_sluice_loc_conf_t *lcf = ngx_http_get_module_loc_conf(r, ngx_http_sluice_module);
    ngx_http_sluice_limit_t *limits;
    ngx_http_sluice_ctx_t *ctx;
    ngx_pool_cleanup_t *cln;
    ngx_http_sluice_zone_t *zs[SLUICE_COMPOSITE_MAX], *ez[SLUICE_COMPOSITE_MAX];
    ngx_http_sluice_zone_t *cz[SLUICE_COMPOSITE_MAX];
    ngx_str_t ckey[SLUICE_COMPOSITE_MAX];
    sluice_limit_ref refs[SLUICE_COMPOSITE_MAX];
    bool shadow[SLUICE_COMPOSITE_MAX];
    sluice_rule_outcome out[SLUICE_COMPOSITE_MAX];
    ngx_str_t key;
    sluice_result res, per[SLUICE_COMPOSITE_MAX];
    ngx_uint_t i, n = 0, ne = 0, at[SLUICE_COMPOSITE_MAX], dry = 0, delay_level, nc = 0;
    uint64_t now;
    ngx_msec_t delay;

    if (lcf->limits == NULL || lcf->limits->nelts == 0) {
        return NGX_DECLINED;
    }
    if (ngx_http_sluice_get_ctx(r) != NULL) {
        return NGX_DECLINED; /* decided already (a delay ended, a redirect) */
    }
    /* Concurrency zones are the main request's: a subrequest (SSI,
     * auth_request, mirror) takes no permit of its own -- the request it
     * serves holds one (limit_conn's rule). */
    limits = lcf->limits->elts;
    for (i = 0; i < lcf->limits->nelts; i++) {
        nc += limits[i].zone->conc && r == r->main;
    }
    cln = ngx_pool_cleanup_add(r->main->pool, sizeof(*ctx) + nc * sizeof(sluice_region_permit));
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    cln->handler = ngx_http_sluice_ctx_mark;
    ctx = cln->data;
    ngx_memzero(ctx, sizeof(*ctx));
    ngx_http_set_ctx(r->main, ctx, ngx_http_sluice_module);

    /* Every key goes to its table, whatever its length: the table holds a
     * key longer than max_key_bytes by its keyed digest (an error below is
     * a 500, never "not limited"). */
    nc = 0;
    for (i = 0; i < lcf->limits->nelts; i++) {
        ngx_http_sluice_zone_t *z = limits[i].zone;

        if (z->conc && r != r->main) {
            continue;
        }
        if (ngx_http_complex_value(r, &z->key, &key) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        if (key.len == 0) {
            continue; /* an empty key is not limited, as limit_req's */
        }
        if (z->conc) {
            cz[nc] = z;
            ckey[nc++] = key;
            continue;
        }
        zs[n] = z;
        shadow[n] = limits[i].shadow ? true : false;
        refs[n++] = sluice_ref_key(z->table, key.data, key.len);
    }
    if (n == 0 && nc == 0) {
        return NGX_DECLINED;
    }

    /* The concurrency zones first, one permit each, held in the mark
     * (released when the main request ends); then the rate zones.  All or
     * nothing: a refusal by any zone gives back the permits taken. */
    for (i = 0; i < nc; i++) {
        if (!sluice_concurrency_region_acquire_at(cz[i]->region, ckey[i].data, ckey[i].len, 1,
                                                  sluice_now_ns(), &ctx->held[i], &res))
        {
            ngx_http_sluice_release(ctx);
            if (res.error != 0 && res.error != SLUICE_EFULL) {
                ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                              "sluice zone \"%V\": cannot decide (%s), key of %uz bytes",
                              &cz[i]->name, sluice_strerror(res.error), ckey[i].len);
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }
            ngx_log_error(lcf->log_level, r->connection->log, 0,
                          "sluice: limiting requests in flight by zone \"%V\"%s", &cz[i]->name,
                          res.error == SLUICE_EFULL ? " (zone full of keys in use)" : "");
            ctx->status = NGX_HTTP_SLUICE_REJECTED;
            return ngx_http_sluice_status(lcf, NGX_HTTP_SERVICE_UNAVAILABLE);
        }
        ctx->nheld = i + 1;
    }
    if (n == 0) {
        ctx->status = NGX_HTTP_SLUICE_PASSED;
        return NGX_DECLINED;
    }
    delay_level = lcf->log_level == NGX_LOG_INFO ? NGX_LOG_INFO : lcf->log_level + 1;

    /* the library's shadow rule (sluice/rules.h): the enforced zones as one
     * composite, then, only when it admits, each shadow zone on its own,
     * charged when it would admit */
    now = sluice_table_now_ns(zs[0]->table); /* one axis: check_clocks */
    (void) sluice_shadow_try_acquire_at(refs, shadow, n, 1, now, &res, out);
    for (i = 0; i < n; i++) {
        if (!shadow[i]) {
            ez[ne] = zs[i];
            at[ne] = i;
            per[ne++] = out[i].res;
        }
    }
    if (!res.allowed && res.error != 0 && res.error != SLUICE_EFULL) {
        /* not a refusal: the table could not decide (no memory); an
         * error of its own, as a 500 */
        for (i = 0; i < ne && per[i].error == 0; i++) {
        }
        i = i < ne ? at[i] : 0;
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "sluice zone \"%V\": cannot decide (%s), key of %uz bytes",
                      &zs[i]->name, sluice_strerror(res.error), refs[i].keylen);
        ngx_http_sluice_release(ctx);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (i = 0; i < n; i++) {
        if (!shadow[i] || out[i].decision == SLUICE_RULE_DENIED_ELSEWHERE) {
            continue; /* enforced, or not decided: the request was refused */
        }
        if (out[i].decision == SLUICE_RULE_DENIED_SHADOW && out[i].res.error != 0
            && out[i].res.error != SLUICE_EFULL) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "sluice zone \"%V\" (shadow): cannot decide (%s), key of %uz bytes",
                          &zs[i]->name, sluice_strerror(out[i].res.error), refs[i].keylen);
        } else if (out[i].decision == SLUICE_RULE_DENIED_SHADOW) {
            ngx_log_error(lcf->log_level, r->connection->log, 0,
                          "sluice zone \"%V\" would refuse the request (shadow)", &zs[i]->name);
            dry = NGX_HTTP_SLUICE_REJECTED_DRY_RUN;
        } else if (out[i].res.wait_ns > 0 && dry == 0) {
            dry = NGX_HTTP_SLUICE_DELAYED_DRY_RUN;
        }
    }
    if (ne == 0) {
        ctx->status = dry ? dry : NGX_HTTP_SLUICE_PASSED;
        return NGX_DECLINED;
    }

    if (lcf->headers && ngx_http_sluice_headers(r, ez, per, ne, &res, now) != NGX_OK) {
        ngx_http_sluice_release(ctx);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    if (!res.allowed) {
        for (i = 0; i < ne && per[i].allowed; i++) {
        }
        ngx_log_error(lcf->log_level, r->connection->log, 0,
                      "sluice: limiting requests by zone \"%V\"%s",
                      &ez[i < ne ? i : 0]->name,
                      res.error == SLUICE_EFULL ? " (zone full of keys in use)" : "");
        ctx->status = NGX_HTTP_SLUICE_REJECTED;
        ngx_http_sluice_release(ctx);
        return ngx_http_sluice_status(lcf, NGX_HTTP_TOO_MANY_REQUESTS);
    }
    if (res.wait_ns == 0) {
        ctx->status = dry ? dry : NGX_HTTP_SLUICE_PASSED;
        return NGX_DECLINED;
    }

    /* a leaky-bucket shaper: hold the request for its turn */
    ctx->status = NGX_HTTP_SLUICE_DELAYED;
    delay = (ngx_msec_t) ((res.wait_ns + 999999) / 1000000);
    ngx_log_error(delay_level, r->connection->log, 0,
                  "sluice: delaying request by %M ms", delay);
    if (r->connection->read->ready) {
        ngx_post_event(r->connection->read, &ngx_posted_events);
    } else if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_sluice_delay;
    r->connection->write->delayed = 1;
    ngx_add_timer(r->connection->write, delay);
    return NGX_AGAIN;
}

/* $sluice_status: what the module did with the request (empty when it
 * decided nothing: no sluice here, or every key empty). */
static ngx_int_t
ngx_http_sluice_status_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
                                uintptr_t data)
{
    ngx_http_sluice_ctx_t *ctx = ngx_http_sluice_get_ctx(r);

    (void) data;
    if (ctx == NULL || ctx->status == 0 || ctx->status > NGX_HTTP_SLUICE_REJECTED_DRY_RUN) {
        v->not_found = 1;
        return NGX_OK;
    }
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->len = ngx_http_sluice_status_names[ctx->status].len;
    v->data = ngx_http_sluice_status_names[ctx->status].data;
    return NGX_OK;
}

static ngx_int_t
ngx_http_sluice_add_variables(ngx_conf_t *cf)
{
    static ngx_str_t name = ngx_string("sluice_status");
    ngx_http_variable_t *var = ngx_http_add_variable(cf, &name, NGX_HTTP_VAR_NOCACHEABLE);

    if (var == NULL) {
        return NGX_ERROR;
    }
    var->get_handler = ngx_http_sluice_status_variable;
    return NGX_OK;
}

/* ---- metrics ------------------------------------------------------------ */

static ngx_int_t
ngx_http_sluice_metrics_handler(ngx_http_request_t *r)
{
    ngx_http_sluice_main_conf_t *mcf = ngx_http_get_module_main_conf(r, ngx_http_sluice_module);
    ngx_buf_t *b;
    ngx_chain_t out;
    ngx_int_t rc;
    size_t need = 0, cap = 16384;
    u_char *p = NULL;
    int wr;

    if (!(r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }
    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }
    if (mcf->metrics == NULL) {
        return NGX_HTTP_SERVICE_UNAVAILABLE;
    }
    for (int tries = 0; tries < 4; tries++) {
        p = ngx_pnalloc(r->pool, cap);
        if (p == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        wr = sluice_metrics_write(mcf->metrics, (char *) p, cap, &need);
        if (wr == 0) {
            break;
        }
        if (wr != SLUICE_ENOSPC) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        cap = need + 4096; /* the counters may grow between the calls */
        p = NULL;
    }
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = (off_t) need;
    ngx_str_set(&r->headers_out.content_type, "text/plain; version=0.0.4; charset=utf-8");
    r->headers_out.content_type_len = sizeof("text/plain") - 1;
    if (need == 0) {
        r->header_only = 1; /* nothing to expose: no empty buffer */
    }
    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }
    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    b->pos = p;
    b->last = p + need;
    b->memory = 1;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;
    out.buf = b;
    out.next = NULL;
    return ngx_http_output_filter(r, &out);
}

static char *
ngx_http_sluice_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t *clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    (void) cmd;
    (void) conf;
    clcf->handler = ngx_http_sluice_metrics_handler;
    return NGX_CONF_OK;
}

/* ---- life ----------------------------------------------------------------- */

/* The zones of one place are decided at one time, read from their first
 * zone's clock (sluice_table_now_ns): a calendar quota (tz=) counts in
 * nanoseconds since the Unix epoch, the other specs on the monotonic
 * clock, and the two do not compare.  A place that mixes them is refused
 * here, naming both zones. */
static ngx_int_t
ngx_http_sluice_check_clocks(ngx_conf_t *cf, ngx_http_sluice_main_conf_t *mcf)
{
    ngx_http_sluice_place_t *places = mcf->places.elts;
    ngx_http_sluice_limit_t *limits;
    sluice_spec_info info;
    char err[SLUICE_NGX_ERRLEN];
    ngx_uint_t i, j, seen;
    int epoch, first = 0;

    for (i = 0; i < mcf->places.nelts; i++) {
        limits = places[i].limits->elts;
        seen = 0; /* 1 + the place's first rate limit, 0: none yet */
        for (j = 0; j < places[i].limits->nelts; j++) {
            if (limits[j].zone->conc) {
                /* no clock to agree on; and no dry run of one: a permit
                 * it took would have to be held, one it refused logged */
                if (limits[j].shadow) {
                    ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                                  "sluice \"%V\" shadow in %s:%ui: a concurrency zone cannot"
                                  " be a shadow", &limits[j].zone->name, places[i].file,
                                  places[i].line);
                    return NGX_ERROR;
                }
                continue;
            }
            if (sluice_spec_parse(limits[j].zone->spec, &info, err, sizeof err) != 0) {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0, "sluice_zone \"%V\": %s",
                              &limits[j].zone->name, err);
                return NGX_ERROR;
            }
            epoch = info.clock == SLUICE_CLOCK_REALTIME;
            if (seen == 0) {
                first = epoch;
                seen = j + 1;
            } else if (epoch != first) {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                              "sluice \"%V\" and \"%V\" in %s:%ui: limits on different clocks"
                              " (a calendar quota, tz=, counts from the Unix epoch; the other"
                              " specs on the monotonic clock): put them in different places",
                              &limits[seen - 1].zone->name, &limits[j].zone->name, places[i].file,
                              places[i].line);
                return NGX_ERROR;
            }
        }
    }
    return NGX_OK;
}

static ngx_int_t
ngx_http_sluice_init(ngx_conf_t *cf)
{
    ngx_http_core_main_conf_t *cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
    ngx_http_sluice_main_conf_t *mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_sluice_module);
    ngx_http_sluice_zone_t **zones = mcf->zones.elts;
    ngx_http_handler_pt *h;
    ngx_uint_t i;

    for (i = 0; i < mcf->zones.nelts; i++) {
        if (!zones[i]->declared) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "unknown sluice_zone \"%V\" in %s:%ui (declare it at the http level)",
                          &zones[i]->name, zones[i]->file, zones[i]->line);
            return NGX_ERROR;
        }
    }
    if (ngx_http_sluice_check_clocks(cf, mcf) != NGX_OK) {
        return NGX_ERROR;
    }
    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }
    *h = ngx_http_sluice_handler;
    return NGX_OK;
}

/* Each worker exposes every zone; the counters live in the zones, so every
 * worker shows the same numbers. */
static ngx_int_t
ngx_http_sluice_init_process(ngx_cycle_t *cycle)
{
    ngx_http_sluice_main_conf_t *mcf;
    ngx_http_sluice_zone_t **zones;
    char name[SLUICE_HTTP_NAME_MAX + 1], err[SLUICE_NGX_ERRLEN];
    ngx_uint_t i;

    if (ngx_http_cycle_get_module_main_conf(cycle, ngx_http_core_module) == NULL) {
        return NGX_OK; /* no http block */
    }
    mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_sluice_module);
    if (mcf == NULL || mcf->zones.nelts == 0) {
        return NGX_OK;
    }
    mcf->metrics = sluice_metrics_new();
    if (mcf->metrics == NULL) {
        return NGX_ERROR;
    }
    zones = mcf->zones.elts;
    for (i = 0; i < mcf->zones.nelts; i++) {
        ngx_memcpy(name, zones[i]->name.data, zones[i]->name.len);
        name[zones[i]->name.len] = '\0';
        if (zones[i]->conc) {
            /* no spec to apply; the region's held permits, N, keys and
             * permits recovered from dead workers, the same in every worker */
            if (sluice_metrics_add_concurrency_region(mcf->metrics, name, zones[i]->region) != 0) {
                ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                              "sluice: cannot expose zone \"%V\" in the metrics", &zones[i]->name);
            }
            continue;
        }
        /* A change of spec of a kept zone, now that the configuration is
         * committed (init_zone tried it).  Every new worker applies it; the
         * region keeps one current spec, so the second finds it done. */
        if (zones[i]->pending
            && sluice_table_reconfigure_at(zones[i]->table, zones[i]->spec,
                                           sluice_table_now_ns(zones[i]->table), err,
                                           sizeof err) != 0)
        {
            ngx_log_error(NGX_LOG_ALERT, cycle->log, 0, "sluice_zone \"%V\": spec \"%s\": %s",
                          &zones[i]->name, zones[i]->spec, err);
        }
        if (sluice_metrics_add_table(mcf->metrics, name, zones[i]->table) != 0) {
            ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                          "sluice: cannot expose zone \"%V\" in the metrics", &zones[i]->name);
        }
    }
    return NGX_OK;
}

static void
ngx_http_sluice_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_sluice_main_conf_t *mcf;

    if (ngx_http_cycle_get_module_main_conf(cycle, ngx_http_core_module) == NULL) {
        return;
    }
    mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_sluice_module);
    if (mcf != NULL && mcf->metrics != NULL) {
        sluice_metrics_free(mcf->metrics);
        mcf->metrics = NULL;
    }
}
