/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuid: a GPU's index on the node, from its PCI address.
 *
 * A CUDA device ordinal is per process: CUDA_VISIBLE_DEVICES (which Slurm
 * and most launchers set per rank) renumbers the GPUs a process sees, so
 * every rank may call its GPU "0".  The client library therefore reports
 * the PCI address of the device it copied to as well, and the daemon turns
 * it into the index nvidia-smi, NVML and DCGM show: the position of the
 * device among the NVIDIA display-class PCI devices bound to the nvidia
 * driver, in PCI address order.  Only sysfs is read; no GPU library is
 * needed.
 */
#ifndef STAGEFS_GPUID_H
#define STAGEFS_GPUID_H

#include <stddef.h>

#define GPUID_SYSFS	"/sys/bus/pci/devices"
#define GPUID_BUS_LEN	13	/* "dddd:bb:dd.f" and the NUL */

/*
 * Normalize a PCI address as CUDA ("0000:3B:00.0") or NVML
 * ("00000000:3B:00.0") write it to sysfs's form ("0000:3b:00.0") in @out.
 * Returns 0 or -EINVAL.
 */
int gpuid_normalize(const char *bus_id, char out[GPUID_BUS_LEN]);

/*
 * The node index of the GPU at PCI address @bus_id, looked up under
 * @sysfs (GPUID_SYSFS; tests pass a fake tree).  Returns the index (>= 0),
 * -EINVAL for a malformed address, -ENOENT when no NVIDIA GPU bound to the
 * nvidia driver is at that address, or another -errno from reading @sysfs.
 */
int gpuid_index(const char *sysfs, const char *bus_id);

#endif
