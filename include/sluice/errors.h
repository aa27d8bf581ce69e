/* sluice/errors.h -- the error codes every sluice header uses.
 *
 * Included by sluice.h and sluice/wheel.h; it can be included on its own.
 * One sign convention throughout: a function that can fail returns 0 on
 * success or one of these negative codes; sluice_strerror() describes one.
 */
#ifndef SLUICE_ERRORS_H
#define SLUICE_ERRORS_H

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; what this header declares
 * is part of its exported interface. */
#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility push(default)
#endif

/* Negative error codes.  One sign convention throughout: 0 is success. */
enum {
    SLUICE_OK = 0,
    SLUICE_EINVAL = -1,  /* a bad argument or spec */
    SLUICE_ENOMEM = -2,  /* an allocation failed */
    SLUICE_ERANGE = -3,  /* a number outside what the grammar accepts */
    SLUICE_EFULL = -4,   /* a table holds max_keys keys, none reclaimable */
    SLUICE_ENOSPC = -5,    /* an output buffer is too small */
    SLUICE_ENOENT = -6,    /* no such timer, reservation or key */
    SLUICE_EBUSY = -7,     /* the object is in use (e.g. a timer firing) */
    SLUICE_ETIMEDOUT = -8, /* a deadline passed */
    SLUICE_EBACKEND = -9,  /* the backend (Redis) failed or is unreachable */
    SLUICE_ECANCELED = -10 /* cancelled */
};

/* A static, human-readable description of an error code ("unknown error"
 * for a code this version does not know).  Thread-safe. */
const char *sluice_strerror(int code);

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_ERRORS_H */
