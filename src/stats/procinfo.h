/* SPDX-License-Identifier: Apache-2.0 */
/*
 * procinfo: who is reading, from /proc: a reader thread's process, start
 * time, process group, cgroup and job.  Used once per reader thread by the
 * stats module (results are cached there), never per READ.
 *
 * The job of a reader is, in this order (docs/feedrate.md):
 *   0. in a Kubernetes pod (a component of its cgroup v2 path is
 *      kubepods-...-pod<UID>.slice or pod<UID>, under kubelet's root):
 *      "k8s:NAMESPACE/POD", or "k8s:NAMESPACE/JOB" with STAGEFS_JOB=JOB
 *      (or "k8s:pod/UID" for a pod the CSI plugin has not named: pods.h);
 *      a pod names jobs in its own namespace only;
 *   1. the value of STAGEFS_JOB in its environment, as it was when the
 *      process started (/proc/PID/environ: a later setenv() is not seen,
 *      but children started after it inherit it), unless it starts with
 *      "k8s:" (the daemon's names for pods: ignored);
 *   2. "slurm:job_N" if a component of its cgroup v2 path is job_N (Slurm's
 *      cgroup layout);
 *   3. "cgroup:NAME", NAME being the last component of its cgroup v2 path,
 *      unless that is the root or a generic systemd unit (*.slice,
 *      init.scope, session-N.scope, user@N.service): containers
 *      (docker-ID.scope, cri-containerd-ID.scope) and services are jobs;
 *   4. "pgid:N", its process group: a shell pipeline, or a launcher with
 *      the workers it forked.
 */
#ifndef STAGEFS_PROCINFO_H
#define STAGEFS_PROCINFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PROCINFO_JOB_MAX	128	/* bytes kept of a job name, NUL included */
#define PROCINFO_ENV_JOB	"STAGEFS_JOB"

struct procinfo {
	pid_t tid;		/* the thread FUSE named (fuse_req_ctx()->pid) */
	pid_t tgid;		/* its process */
	pid_t pgid;
	uint64_t start;		/* start time of @tid, clock ticks after boot */
	char comm[17];
	char job[PROCINFO_JOB_MAX];
};

/*
 * Read everything about thread @tid from /proc.  Returns 0, or -ESRCH when
 * it is gone, or another -errno.  The job is always set when 0 is returned
 * (the pgid rule cannot fail).
 */
int procinfo_read(pid_t tid, struct procinfo *pi);

/* True while thread @tid of process @tgid exists (one syscall; a zombie counts). */
bool procinfo_running(pid_t tgid, pid_t tid);

/*
 * True while thread @tid of process @tgid, started at @start, still runs
 * (a zombie counts as gone, so does a new thread that reused the id).
 */
bool procinfo_alive(pid_t tgid, pid_t tid, uint64_t start);

/*
 * The uid of the Kubernetes pod whose cgroup is @cgroup (a cgroup v2 path:
 * kubepods[.slice]/.../kubepods-QOS-pod<UID>.slice or .../pod<UID>, under
 * kubelet's root only) into @uid (PODS_UID_LEN + 1 bytes); false if none.
 */
bool procinfo_pod_uid(const char *cgroup, char *uid);
/* The same for thread @tid, from /proc/TID/cgroup. */
bool procinfo_pod_of(pid_t tid, char *uid);

/*
 * The job rule above as a pure function: @env_job is STAGEFS_JOB's value
 * or NULL, @cgroup the cgroup v2 path or NULL.  Writes a NUL-terminated
 * name (cut to @len - 1 bytes) to @out.
 */
void procinfo_job_rule(const char *env_job, const char *cgroup, pid_t pgid,
		       char *out, size_t len);

#endif
