/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctluser: the control socket's record per uid (struct ctluser,
 * ctlsock_i.h): the connection count the server's limits use
 * (ctlsock.c) and the ledger that bounds the client library's reports
 * (handover.c).  Both find a uid's record here, so neither calls the
 * other for it.
 */
#include "ctlsock_i.h"

#include <stdlib.h>

struct ctluser *ctluser_locked(struct ctlsock *cs, uint32_t uid)
{
	for (size_t i = 0; i < cs->nusers; i++)
		if (cs->users[i].uid == uid)
			return &cs->users[i];
	if (cs->nusers == cs->capusers) {
		size_t cap = cs->capusers ? cs->capusers * 2 : 16;
		struct ctluser *nu = realloc(cs->users, cap * sizeof(*nu));

		if (!nu)
			return NULL;
		cs->users = nu;
		cs->capusers = cap;
	}
	cs->users[cs->nusers] = (struct ctluser){ .uid = uid };
	return &cs->users[cs->nusers++];
}

void ctluser_free_all(struct ctlsock *cs)
{
	free(cs->users);
	cs->users = NULL;
	cs->nusers = cs->capusers = 0;
}
