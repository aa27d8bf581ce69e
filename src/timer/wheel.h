/* wheel.h -- what wheel.c offers the library's other modules beyond the
 * public sluice/wheel.h.
 *
 * A binding: an object that holds timers on a wheel and must hear of the
 * wheel's end (an asynchronous queue, async.c) embeds a sluice__wheel_binding
 * and binds it.  sluice_wheel_free() then calls its on_free once, after the
 * wheel's thread has stopped and before the timers are dropped, with no
 * lock of the wheel held: the object lets go of the wheel there, and never
 * touches it again.  An object freed first unbinds itself.
 *
 * Entry points: sluice__wheel_bind, sluice__wheel_unbind.
 */
#ifndef SLUICE_WHEEL_INTERNAL_H
#define SLUICE_WHEEL_INTERNAL_H

#include "base/internal.h"

typedef struct sluice__wheel_binding sluice__wheel_binding;
struct sluice__wheel_binding {
    sluice__wheel_binding *next, *prev; /* the wheel's, under its mutex */
    void (*on_free)(sluice__wheel_binding *b);
};

/* Bind b (on_free set) to w, or unbind it; O(1), under the wheel's mutex.
 * Neither may run at the same time as sluice_wheel_free(w). */
SLUICE__INTERNAL void sluice__wheel_bind(sluice_wheel *w, sluice__wheel_binding *b);
SLUICE__INTERNAL void sluice__wheel_unbind(sluice_wheel *w, sluice__wheel_binding *b);

#endif /* SLUICE_WHEEL_INTERNAL_H */
