/* error.c -- error codes, messages, version.
 *
 * Entry points: sluice_strerror, sluice_version, sluice_version_number;
 * sluice__errf (a one-line reason into a caller's buffer, always
 * NUL-terminated).
 */
#include "base/internal.h"

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

int sluice_version_number(void) { return SLUICE_VERSION_NUMBER; }

/* The message is formatted, then copied with every control byte (and DEL)
 * written as \xNN, so that a reason is always one printable line whatever
 * bytes the offending token held. */
void sluice__errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    char raw[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    if (n < 0) raw[0] = '\0';
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p; p++) {
        if (*p >= 0x20 && *p != 0x7f) {
            if (o + 1 >= errlen) break;
            err[o++] = (char)*p;
        } else {
            if (o + 4 >= errlen) break;
            err[o++] = '\\';
            err[o++] = 'x';
            err[o++] = hex[*p >> 4];
            err[o++] = hex[*p & 15];
        }
    }
    err[o] = '\0';
}
