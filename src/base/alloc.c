/* alloc.c -- the library's allocator hook (as hiredis's): every allocation
 * the core and libsluice-redis make goes through these, so the tests can
 * fail the Nth, and an application can count or place the memory.
 *
 * Zeroed memory is asked of the hook's calloc_fn, never made by malloc and
 * memset: a table for 10^6 keys allocates about 60 MB at creation, and a
 * calloc that maps fresh zero pages leaves them untouched (not resident)
 * until keys arrive.  The same holds for the cache-line aligned blocks:
 * sluice__calloc64 asks calloc_fn for n + 64 bytes and aligns inside, so it
 * writes only the 8 bytes just before the block (the hook's pointer, kept
 * for sluice__free64) and never touches the rest.
 *
 * Huge pages: a table's probe arrays are one block of up to hundreds of MB,
 * read at random.  In 4 KB pages nearly every lookup also misses the TLB
 * and walks the page tables; in 2 MB pages a table of 10^6 keys is 30 TLB
 * entries.  sluice__advise_huge asks for them (madvise MADV_HUGEPAGE, for
 * the whole 2 MB pages inside the block) when the block came from the
 * default calloc: memory from an application's allocator is left as it is.
 * The price: the kernel makes a page resident 2 MB at a time, so a table
 * made for many keys and holding few is resident in 2 MB steps rather than
 * 4 KB ones (docs/benchmarks-notebook.md, "Admissions without the lock,
 * huge pages").
 *
 * Entry points: sluice_set_allocator, sluice_get_allocator (the hook);
 * sluice__malloc, __calloc, __free (through it); sluice__calloc64,
 * sluice__free64 (64-byte aligned, for striped lines); sluice__advise_huge.
 */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "base/internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static sluice_allocator g_alloc = {.malloc_fn = malloc, .calloc_fn = calloc, .free_fn = free};

int sluice_set_allocator(const sluice_allocator *a)
{
    if (!a) {
        g_alloc = (sluice_allocator){.malloc_fn = malloc, .calloc_fn = calloc, .free_fn = free};
        return 0;
    }
    if (!a->malloc_fn || !a->calloc_fn || !a->free_fn) return SLUICE_EINVAL;
    for (size_t i = 0; i < sizeof a->reserved / sizeof a->reserved[0]; i++)
        if (a->reserved[i]) return SLUICE_EINVAL;
    g_alloc = *a;
    return 0;
}

void sluice_get_allocator(sluice_allocator *out) { *out = g_alloc; }

void *sluice__malloc(size_t n) { return g_alloc.malloc_fn(n ? n : 1); }

void *sluice__calloc(size_t n, size_t size)
{
    if (n == 0 || size == 0) return g_alloc.calloc_fn(1, 1);
    if (n > SIZE_MAX / size) return NULL;
    return g_alloc.calloc_fn(n, size);
}

/* A zeroed block aligned to a cache line (for structs with _Alignas(64)):
 * over-allocate through the hook, round up, and keep the hook's pointer
 * just before the block.  The hook's blocks are aligned for max_align_t
 * (at least 8), so p - raw >= 8: room for it. */
void *sluice__calloc64(size_t n)
{
    if (n > SIZE_MAX - 64) return NULL;
    unsigned char *raw = sluice__calloc(1, n + 64);
    if (!raw) return NULL;
    unsigned char *p = (unsigned char *)(((uintptr_t)raw + 64) & ~(uintptr_t)63);
    memcpy(p - sizeof raw, &raw, sizeof raw);
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

void sluice__advise_huge(void *p, size_t n)
{
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)1 << 21;
    if (!p || g_alloc.calloc_fn != calloc) return;
    const uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    const uintptr_t b = ((uintptr_t)p + n) & ~(huge - 1);
    if (b > a) (void)madvise((void *)a, b - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}
