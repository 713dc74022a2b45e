/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_config: libFuzzer harness for the config loader (src/config.c with
 * the [quota] and [dataset] sections of src/policy.c), the code that reads
 * -c FILE at start and again on every SIGHUP.
 *
 * The input is the file's bytes, through config_load_buffer(), the parser
 * config_load() uses after reading the file.  A load either succeeds or
 * fails with a message; whatever it left behind is validated, released and
 * destroyed, so that leaks and use-after-free of half-built policies show
 * too.  Seeds: conf/stagefs.conf.example and the configs the tests write
 * (tests/fuzz/mkseeds.sh).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "cred.h"
#include "log.h"
#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sfs_config cfg;
	struct policy *p = policy_create();
	char err[1024];

	if (!p)
		return 0;
	log_level = LOG_CRIT;
	config_init(&cfg);
	policy_register(p);
	err[0] = '\0';
	if (config_load_buffer(&cfg, "fuzz.conf", (const char *)data, size, err,
			       sizeof(err)) == 0) {
		struct cred cr;

		cred_init(&cr, 1000, 1000, 0, NULL, 0);
		(void)config_validate(&cfg, err, sizeof(err));
		for (size_t i = 0; i < p->nds; i++) {
			(void)policy_dataset(p, p->ds[i].name);
			(void)policy_may_read(&p->ds[i], &cr);
			(void)policy_needs_groups(&p->ds[i]);
		}
		(void)policy_quota(p, 0);
	} else if (!err[0] || !memchr(err, '\0', sizeof(err))) {
		__builtin_trap();	/* a refusal always says why */
	}
	config_release(&cfg);
	policy_destroy(p);
	return 0;
}
