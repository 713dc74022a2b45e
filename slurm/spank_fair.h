/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spank_fair: which nodes of the jobs running on a node make its peer
 * group when together they are more than the group can hold (issue 27;
 * docs/slurm.md, "The job's nodes as the peer group").
 *
 * The places are shared max-min fairly between the jobs: round by round,
 * in the order of their job ids, each job that still has a node outside
 * the group brings one in, until the places are gone or every node is in.
 * So no job gets more than its fair share while another is held below it,
 * and a job that needs fewer leaves the rest to those that need more.  An
 * address already in the group (another job's node too, or a second node
 * of the job at the same address) costs no place and no turn.  Within a
 * job its nodes come in the order of its list (its node list's).  The
 * result depends only on the job ids and the lists, never on the order
 * the lists are given in (directory order).
 *
 * Pure: no Slurm, no I/O, no global state, so that a unit test links it
 * alone (tests/unit/test_spank_fair.c) and the plugin compiles the same
 * file (slurm/spank_peers.c).
 */
#ifndef STAGEFS_SPANK_FAIR_H
#define STAGEFS_SPANK_FAIR_H

#include <stddef.h>
#include <stdint.h>

/* One job's list, and what fair_select() made of it. */
struct fair_job {
	uint32_t jobid;			/* one entry per job: merge a job's lists first */
	const char *const *addrs;	/* its nodes' peer addresses, in its list's order */
	size_t naddrs;
	size_t unlisted;		/* its nodes left out of addrs (past the list's cap) */
	/* set by fair_select() */
	size_t taken;			/* the places it was given (addresses it brought in) */
	size_t in;			/* entries of addrs whose address is in the group */
	size_t left_out;		/* naddrs - in + unlisted */
	size_t next_;			/* private: its next entry to try */
};

/*
 * Choose at most @max distinct addresses of @jobs' lists (compared as
 * strings) into @group (room for @max), in the order they were chosen, and
 * set each job's taken, in and left_out.  @jobs is sorted by job id.
 * Returns the number chosen.
 */
size_t fair_select(struct fair_job *jobs, size_t njobs, size_t max, const char **group);

#endif
