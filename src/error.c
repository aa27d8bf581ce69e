/* error.c -- error codes, messages, version. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

const char *sluice_strerror(int code)
{
    switch (code) {
    case SLUICE_OK: return "success";
    case SLUICE_EINVAL: return "invalid argument";
    case SLUICE_ENOMEM: return "out of memory";
    case SLUICE_ERANGE: return "number out of range";
    case SLUICE_EFULL: return "full: a bound is reached (max_keys, max_timers, queue)";
    case SLUICE_ENOSPC: return "buffer too small";
    case SLUICE_ENOENT: return "no such object";
    case SLUICE_EBUSY: return "busy";
    case SLUICE_ETIMEDOUT: return "timed out";
    case SLUICE_EBACKEND: return "backend error";
    case SLUICE_ECANCELED: return "cancelled";
    default: return "unknown error";
    }
}

const char *sluice_version(void) { return SLUICE_VERSION_STRING; }

void sluice__errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
