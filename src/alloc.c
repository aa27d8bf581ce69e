/* alloc.c -- the library's allocator hook (as hiredis's): every allocation
 * the library makes goes through these, so the tests can fail the Nth. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static sluice_allocator g_alloc = {malloc, realloc, free};

sluice_allocator sluice_set_allocator(const sluice_allocator *a)
{
    sluice_allocator old = g_alloc;
    if (a && a->malloc_fn && a->free_fn) {
        g_alloc = *a;
    } else {
        g_alloc.malloc_fn = malloc;
        g_alloc.realloc_fn = realloc;
        g_alloc.free_fn = free;
    }
    return old;
}

void *sluice__malloc(size_t n) { return g_alloc.malloc_fn(n ? n : 1); }

void *sluice__calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    /* libc's calloc maps fresh zero pages for large blocks without touching
     * them: a table sized for millions of keys costs only what it uses */
    if (g_alloc.malloc_fn == malloc) return calloc(n ? n : 1, size ? size : 1);
    void *p = sluice__malloc(n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

/* A zeroed block aligned to a cache line (for structs with _Alignas(64)):
 * over-allocate through the hook, round up, and keep the hook's pointer
 * just before the block. */
void *sluice__calloc64(size_t n)
{
    if (n > SIZE_MAX - 64) return NULL;
    unsigned char *raw = sluice__malloc(n + 64);
    if (!raw) return NULL;
    unsigned char *p = (unsigned char *)(((uintptr_t)raw + 64) & ~(uintptr_t)63);
    memcpy(p - sizeof raw, &raw, sizeof raw); /* p - raw >= 16: room for it */
    memset(p, 0, n);
    return p;
}

void sluice__free64(void *p)
{
    if (!p) return;
    unsigned char *raw;
    memcpy(&raw, (unsigned char *)p - sizeof raw, sizeof raw);
    sluice__free(raw);
}

void sluice__free(void *p)
{
    if (p) g_alloc.free_fn(p);
}
