/* SPDX-License-Identifier: Apache-2.0 */
/*
 * aubgpu: aubench's accelerators on a real GPU (aubench -g DEV).
 *
 * The readers' samples go into device memory (aubgpu_alloc), and each
 * training step occupies the GPU for its compute time (aubgpu_compute): a
 * one-thread kernel that spins on the GPU's global timer, on a stream of
 * the accelerator's own, waited for.  Many simulated accelerators share
 * one GPU as many streams: each step holds one SM, so up to one step per
 * SM runs at once (132 on an H100 or H200).
 *
 * The kernel is PTX, compiled by the driver when it is loaded
 * (cudaLibraryLoadData, CUDA 12 and later), so that the build needs no
 * nvcc, only the runtime that gpubench links.  Where it cannot be loaded
 * the step sleeps, and aubgpu_compute_via() says why.  Built without CUDA,
 * aubgpu_open() fails with -ENODEV.
 */
#include "aubgpu.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "config.h"

#ifdef CONFIG_HAVE_CUDA
#include <cuda_runtime_api.h>

/* spin(ns): return once the global timer has moved @ns nanoseconds on */
static const char spin_ptx[] =
	".version 7.0\n"
	".target sm_52\n"
	".address_size 64\n"
	".visible .entry aubgpu_spin(.param .u64 aubgpu_spin_ns)\n"
	"{\n"
	"\t.reg .pred p;\n"
	"\t.reg .b64 t0, t1, d, n;\n"
	"\tld.param.u64 n, [aubgpu_spin_ns];\n"
	"\tmov.u64 t0, %globaltimer;\n"
	"SPIN:\n"
	"\tmov.u64 t1, %globaltimer;\n"
	"\tsub.u64 d, t1, t0;\n"
	"\tsetp.lt.u64 p, d, n;\n"
	"\t@p bra SPIN;\n"
	"\tret;\n"
	"}\n";

static int g_dev = -1;
static cudaKernel_t g_spin;
static bool g_spin_ok;
static char g_via[160] = "sleep (no GPU asked for)";

int aubgpu_open(int dev, char *why, size_t len)
{
	cudaLibrary_t lib;
	cudaError_t e;
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || dev >= n) {
		snprintf(why, len, "no GPU %d (%d found)", dev, n);
		return -ENODEV;
	}
	e = cudaSetDevice(dev);
	if (e != cudaSuccess) {
		snprintf(why, len, "cudaSetDevice(%d): %s", dev, cudaGetErrorString(e));
		return -ENODEV;
	}
	g_dev = dev;
	e = cudaLibraryLoadData(&lib, spin_ptx, NULL, NULL, 0, NULL, NULL, 0);
	if (e == cudaSuccess)
		e = cudaLibraryGetKernel(&g_spin, lib, "aubgpu_spin");
	if (e == cudaSuccess) {
		g_spin_ok = true;
		snprintf(g_via, sizeof(g_via), "gpu %d (a spin kernel a step)", dev);
	} else {
		snprintf(g_via, sizeof(g_via), "sleep (the spin kernel did not load: %s)",
			 cudaGetErrorString(e));
	}
	return 0;
}

const char *aubgpu_compute_via(void)
{
	return g_via;
}

void *aubgpu_alloc(size_t len)
{
	void *p = NULL;

	if (g_dev < 0 || cudaSetDevice(g_dev) != cudaSuccess ||
	    cudaMalloc(&p, len) != cudaSuccess)
		return NULL;
	return p;
}

void aubgpu_free(void *p)
{
	if (p)
		cudaFree(p);
}

int aubgpu_compute(void **stream, double seconds)
{
	unsigned long long ns = (unsigned long long)(seconds * 1e9);
	void *args[] = { &ns };
	cudaStream_t st;

	if (!g_spin_ok)
		return -ENOTSUP;
	if (!*stream) {
		if (cudaSetDevice(g_dev) != cudaSuccess ||
		    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
			return -EIO;
		*stream = st;
	}
	st = *stream;
	if (cudaLaunchKernel((const void *)g_spin, (dim3){ 1, 1, 1 }, (dim3){ 1, 1, 1 },
			     args, 0, st) != cudaSuccess ||
	    cudaStreamSynchronize(st) != cudaSuccess)
		return -EIO;
	return 0;
}

void aubgpu_stream_done(void *stream)
{
	if (stream)
		cudaStreamDestroy((cudaStream_t)stream);
}

#else	/* !CONFIG_HAVE_CUDA */

int aubgpu_open(int dev, char *why, size_t len)
{
	snprintf(why, len, "aubench was built without CUDA (GPU %d)", dev);
	return -ENODEV;
}

const char *aubgpu_compute_via(void)
{
	return "sleep (built without CUDA)";
}

void *aubgpu_alloc(size_t len)
{
	(void)len;
	return NULL;
}

void aubgpu_free(void *p)
{
	(void)p;
}

int aubgpu_compute(void **stream, double seconds)
{
	(void)stream;
	(void)seconds;
	return -ENOTSUP;
}

void aubgpu_stream_done(void *stream)
{
	(void)stream;
}
#endif
