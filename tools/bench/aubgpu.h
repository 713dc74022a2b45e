/* SPDX-License-Identifier: Apache-2.0 */
/*
 * aubgpu: aubench's accelerators on a real GPU; see aubgpu.c.
 */
#ifndef STAGEFS_AUBGPU_H
#define STAGEFS_AUBGPU_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Use GPU @dev from now on and load the compute step's kernel.  0 (the
 * kernel may still have failed to load: aubgpu_compute_via() says), or
 * -ENODEV with the reason in @why.
 */
int aubgpu_open(int dev, char *why, size_t len);
/* How a training step computes: "gpu N (...)" or "sleep (why)". */
const char *aubgpu_compute_via(void);
/* @len bytes of the GPU's memory (any thread), or NULL. */
void *aubgpu_alloc(size_t len);
void aubgpu_free(void *p);
/*
 * Occupy the GPU for @seconds on the caller's stream *@stream (created at
 * the first call; NULL before it) and wait.  0, -ENOTSUP when there is no
 * kernel (the caller sleeps instead), -EIO.
 */
int aubgpu_compute(void **stream, double seconds);
/* The stream aubgpu_compute() made, destroyed. */
void aubgpu_stream_done(void *stream);

#endif
