# SPDX-License-Identifier: Apache-2.0
# stagefs: top-level Makefile.  Run ./configure first; it writes config.mk
# (flags and libraries) and config.h (feature macros).

-include config.mk

ifeq ($(CONFIGURED),)
all check check-sanitizers demo docs fuzz install man:
	@echo "run ./configure first (./configure --install-deps on a fresh machine)"; exit 1
else

V ?= 0
ifeq ($(V),0)
Q = @
quiet = @printf '  %-7s %s\n' $(1) $(2);
else
Q =
quiet =
endif

WARN    = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
          -Wno-unused-parameter -Wformat=2 -Wno-format-nonliteral
CPPFLAGS_ALL = -Isrc -I. -include ./config.h -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 \
          $(FUSE_CFLAGS) $(S3_CFLAGS) $(CUDA_CFLAGS) $(CPPFLAGS)
CFLAGS_ALL = -std=gnu11 $(OPTFLAGS) $(WARN) $(SANFLAGS) -fPIC -pthread $(CFLAGS)
LDFLAGS_ALL = $(SANFLAGS) -pthread $(LDFLAGS)

SRC_OBJS      = $(patsubst %.c,%.o,$(wildcard src/*.c src/*/*.c))
FUSE_OBJS     = $(patsubst %.c,%.o,$(wildcard fuse/*.c fuse/ctl/*.c))
PREFETCH_OBJS = $(patsubst %.c,%.o,$(wildcard prefetch/*.c))
TOOL_SRCS     = $(wildcard tools/stagefs-*.c)
TOOLS         = $(patsubst tools/%.c,%,$(TOOL_SRCS))
# the benchmarks' programs (tools/bench/: the readers tools/bench.sh times)
BENCH_PROGS   = tools/bench/readbench tools/bench/peerbench tools/bench/aubench \
                tools/bench/scale_dataset
UNIT_SRCS     = $(wildcard tests/unit/test_*.c)
UNIT_TESTS    = $(patsubst %.c,%,$(UNIT_SRCS))
TEST_HELPERS  = $(patsubst %.c,%,$(wildcard tests/helpers/*.c))

LIBS_CORE = $(CEPHFS_LIBS) $(S3_LIBS) $(RADOS_LIBS) $(XXHASH_LIBS) $(INIH_LIBS) $(CRYPTO_LIBS) $(URING_LIBS) -lm
LIBS_ALL  = $(FUSE_LIBS) $(LIBS_CORE) $(CUDA_LIBS)

# the GPU benchmark (tools/bench.sh gpu) needs the CUDA runtime
ifeq ($(HAVE_CUDA),y)
GPU_BENCH     = tools/bench/gpubench
endif

# the Slurm SPANK plugin (docs/slurm.md), where configure found Slurm's
# headers (libslurm-dev); without them it is left out
ifeq ($(HAVE_SLURM),y)
SPANK_PLUGIN  = slurm/spank_stagefs.so
endif

# the CSI node plugin's message classes (csi/README.md), where configure
# found protoc and Python's grpc
ifneq ($(PROTOC),)
CSI_PB        = csi/csi_pb2.py
endif

all: stagefs $(TOOLS) $(BENCH_PROGS) gpudirect/libstagefs.so $(GPU_BENCH) $(SPANK_PLUGIN) $(CSI_PB)

csi/csi_pb2.py: csi/proto/csi.proto
	$(call quiet,PROTOC,$@)$(PROTOC) -Icsi/proto --python_out=csi csi/proto/csi.proto

# Header dependencies come from the compiler (-MMD -MP: each object's .d
# lists the headers it included); an object without its .d yet (built
# before this rule) is rebuilt once, so that it has one.
.SECONDEXPANSION:
%.o: %.c config.h $$(if $$(wildcard $$*.d),,FORCE)
	$(call quiet,CC,$@)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -MMD -MP -c -o $@ $<

-include $(wildcard */*.d */*/*.d tests/fuzz/obj/*.d tests/fuzz/obj/*/*.d)

# configure writes version.h from VERSION
version.h: VERSION
	@echo "VERSION is newer than version.h (or it is missing): re-run ./configure"; exit 1

FORCE:

# XXH3's AVX2 code (src/xxh_avx2.h), where configure found the compiler
# takes -mavx2; util.c runs it only on CPUs that have AVX2
src/xxh_avx2.o: CFLAGS += $(AVX2_CFLAGS)

src/libsfs.a: $(SRC_OBJS)
	$(call quiet,AR,$@)rm -f $@ && $(AR) rcs $@ $^

prefetch/libprefetch.a: $(PREFETCH_OBJS)
	$(call quiet,AR,$@)rm -f $@ && $(AR) rcs $@ $^

# Each program links only what it uses.  prefetch/ and src/ stay archives, so
# the linker takes only the members a program refers to; the object lists
# are wildcards, so a new file in fuse/, prefetch/ or src/ is picked up.

# the BPF program that counts passthrough reads (fuse/ptacct.c embeds it
# through the skeleton header bpftool generates); without HAVE_BPF the
# daemon estimates those reads
ifeq ($(HAVE_BPF),y)
fuse/bpf/ptread.bpf.o: fuse/bpf/ptread.bpf.c fuse/bpf/ptread.h
	$(call quiet,BPF,$@)$(BPF_CLANG) -g -O2 -target bpf $(BPF_CFLAGS) -c -o $@ $<

fuse/bpf/ptread.skel.h: fuse/bpf/ptread.bpf.o
	$(call quiet,GEN,$@)$(BPFTOOL) gen skeleton $< name ptread >$@.tmp && mv $@.tmp $@

fuse/ptacct.o: fuse/bpf/ptread.skel.h
endif

# the daemon: the FUSE front end, the prefetcher and the core (no gpudirect/:
# pinned buffers belong to the client library)
stagefs: $(FUSE_OBJS) prefetch/libprefetch.a src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(FUSE_LIBS) $(LIBS_CORE) $(BPF_LIBS)

# the subcommands (tools/stagefs-NAME.c): each links its own object and the
# archives in stagefs-NAME_LINK, src/libsfs.a unless it says otherwise.  None
# uses prefetch/, gpudirect/ or libfuse today (they talk to the daemon over
# its control socket); a tool that starts to, names the archive here.
TOOL_LINK_DEFAULT = src/libsfs.a
stagefs-gc_LINK      = src/libsfs.a
stagefs-publish_LINK = src/libsfs.a
stagefs-quota_LINK   = src/libsfs.a
stagefs-restart_LINK = src/libsfs.a
stagefs-top_LINK     = src/libsfs.a
stagefs-warmup_LINK  = src/libsfs.a

define tool_rule
$(1): tools/$(1).o $$(or $$($(1)_LINK),$$(TOOL_LINK_DEFAULT))
	$$(call quiet,LD,$$@)$$(CC) $$(LDFLAGS_ALL) -o $$@ $$^ $$(LIBS_CORE)
endef
$(foreach t,$(TOOLS),$(eval $(call tool_rule,$(t))))

# the client library (C API gpudirect/libstagefs.h; gpudirect/stagefs.py loads
# it).  LIBSTAGEFS_SOVERSION is its ABI: raise it when a function or struct
# changes incompatibly (struct sfs_client_stats only grows at its end);
# gpudirect/libstagefs.map names the functions it exports.
LIBSTAGEFS_SOVERSION = 0
VERSION := $(shell sed -n 1p VERSION 2>/dev/null)
gpudirect/libstagefs.so: gpudirect/libstagefs.o gpudirect/libstagefs_ctl.o gpudirect/pinned.o src/libsfs.a gpudirect/libstagefs.map
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -shared -Wl,-soname,libstagefs.so.$(LIBSTAGEFS_SOVERSION) -Wl,--version-script,gpudirect/libstagefs.map -Wl,--no-undefined -Wl,--exclude-libs,ALL -o $@ $(filter-out %.map,$^) $(XXHASH_LIBS) $(URING_LIBS) $(CUDA_LIBS) -lm

# Slurm loads it into srun, sbatch, slurmd and slurmstepd: only the SPANK
# symbols are exported (the map), the pieces of src/libsfs.a it uses stay
# inside it, and Slurm's own functions come from the process that loads it
slurm/spank_stagefs.so: $(patsubst %.c,%.o,$(wildcard slurm/*.c)) src/libsfs.a slurm/spank_stagefs.map
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -shared -Wl,--version-script=slurm/spank_stagefs.map -Wl,--exclude-libs,ALL -o $@ $(filter %.o %.a,$^) $(XXHASH_LIBS) -lm

# the reader tools/bench.sh times (plain C, no stagefs code)
tools/bench/readbench: tools/bench/readbench.o
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $<

# a peer group member asking another for chunks (tools/bench.sh peers)
tools/bench/peerbench: tools/bench/peerbench.o src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_CORE)

# simulated accelerators and their utilization (tools/bench.sh au); -g reads
# with the client library into a GPU's memory
tools/bench/aubench: tools/bench/aubench.o tools/bench/aubgpu.o gpudirect/libstagefs.o gpudirect/libstagefs_ctl.o gpudirect/pinned.o src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(XXHASH_LIBS) $(URING_LIBS) $(CUDA_LIBS) -lpthread -lm

# a published dataset of N files without publishing them (rados-scalecheck.sh,
# and the rados tests that need many files: manifest_lazy, peers_large)
tools/bench/scale_dataset: tools/bench/scale_dataset.o src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_CORE)

# libstagefs's GPU feed rate against its ceilings (tools/bench.sh gpu)
tools/bench/gpubench: tools/bench/gpubench.o gpudirect/libstagefs.o gpudirect/libstagefs_ctl.o gpudirect/pinned.o src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(XXHASH_LIBS) $(URING_LIBS) $(CUDA_LIBS) -lm

tests/unit/test_%: tests/unit/test_%.o src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $< src/libsfs.a $(LIBS_CORE) $(CMOCKA_LIBS)

# the Slurm plugin's peer places (slurm/spank_fair.c: no Slurm in it, so
# it builds without Slurm's headers)
tests/unit/test_spank_fair: tests/unit/test_spank_fair.o slurm/spank_fair.o
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(CMOCKA_LIBS)

# the scheduler's tests drive prefetch/ through prefetch/prefetch.h
tests/unit/test_prefetch_sched: tests/unit/test_prefetch_sched.o prefetch/libprefetch.a src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_CORE) $(CMOCKA_LIBS)

# the handle numbers and open files' records of fuse/ (no FUSE in them)
tests/unit/test_handles: tests/unit/test_handles.o fuse/handles.o src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_CORE) $(CMOCKA_LIBS)

# the table of inodes pushed at OPEN (fuse/pushmap.c, no FUSE in it)
tests/unit/test_pushmap: tests/unit/test_pushmap.o fuse/pushmap.o
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(CMOCKA_LIBS)

# the engine's buffer pool lives in prefetch/ (its one user)
tests/unit/test_bufpool: tests/unit/test_bufpool.o prefetch/libprefetch.a src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_CORE) $(CMOCKA_LIBS)

tests/helpers/%: tests/helpers/%.o src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $< src/libsfs.a $(LIBS_ALL)

test-progs: all $(UNIT_TESTS) $(TEST_HELPERS)

# The whole suite; then, unless TESTS picks some, the unit tests once more
# under ASan/LSan/UBSan, built in .sanitize/ (tests/sanitize.sh --unit).
check: test-progs
	$(Q)tests/run.sh $(TESTS)
ifeq ($(TESTS),)
	$(Q)tests/sanitize.sh --unit
endif

# The suite (or TESTS) under the sanitizers, built in .sanitize/: the normal
# build is not touched.
check-sanitizers:
	$(Q)tests/sanitize.sh $(TESTS)

demo: all
	$(Q)tools/dev/demo.sh

# The man pages (man/NAME.SECTION.scd, scdoc(5)); `make docs` regenerates
# the settings sections of stagefs.8 and stagefs.conf.5 from src/config.c.
MAN_SRCS  = $(wildcard man/*.scd)
MAN_PAGES = $(MAN_SRCS:.scd=)

man: $(MAN_PAGES)

$(MAN_PAGES): man/%: man/%.scd
ifeq ($(SCDOC),)
	@echo "scdoc not found: apt-get install scdoc (or ./configure --install-deps), then ./configure"; exit 1
else
	$(call quiet,SCDOC,$@)$(SCDOC) <$< >$@.tmp && mv $@.tmp $@
endif

# `make install PREFIX=/opt/stagefs` moves the tree at install time (the
# binary also finds its subcommands in BINDIR/../libexec/stagefs); the
# compiled-in default is ./configure --prefix.  The Debian packaging
# (debian/rules) sets LIBDIR and SYSTEMDUNITDIR to Debian's paths.
# /etc/stagefs/stagefs.conf is installed only where there is none yet.
PREFIX ?= $(prefix)
LIBDIR ?= $(PREFIX)/lib
MANDIR ?= $(PREFIX)/share/man
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
install: all man
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/libexec/stagefs \
		$(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(PREFIX)/include \
		$(DESTDIR)$(PREFIX)/share/stagefs/python $(DESTDIR)$(PREFIX)/share/stagefs/prometheus \
		$(DESTDIR)$(sysconfdir)/stagefs $(DESTDIR)$(SYSTEMDUNITDIR) \
		$(foreach s,1 3 5 8,$(DESTDIR)$(MANDIR)/man$(s))
	install -m 0755 stagefs $(DESTDIR)$(PREFIX)/bin/stagefs
	for t in $(TOOLS); do install -m 0755 $$t $(DESTDIR)$(PREFIX)/libexec/stagefs/$$t; done
	install -m 0644 gpudirect/libstagefs.so $(DESTDIR)$(LIBDIR)/libstagefs.so.$(LIBSTAGEFS_SOVERSION)
	ln -sf libstagefs.so.$(LIBSTAGEFS_SOVERSION) $(DESTDIR)$(LIBDIR)/libstagefs.so
	sed -e 's|@prefix@|$(PREFIX)|g' -e 's|@libdir@|$(LIBDIR)|g' -e 's|@version@|$(VERSION)|g' \
		conf/libstagefs.pc.in >$(DESTDIR)$(LIBDIR)/pkgconfig/libstagefs.pc
	install -m 0644 gpudirect/libstagefs.h $(DESTDIR)$(PREFIX)/include/libstagefs.h
	install -m 0644 gpudirect/stagefs.py tools/stagefs_hints.py $(DESTDIR)$(PREFIX)/share/stagefs/python/
	install -m 0644 conf/stagefs-alerts.yml $(DESTDIR)$(PREFIX)/share/stagefs/prometheus/
	install -m 0644 conf/stagefs.conf.example $(DESTDIR)$(sysconfdir)/stagefs/stagefs.conf.example
	test -e $(DESTDIR)$(sysconfdir)/stagefs/stagefs.conf || \
		install -m 0644 conf/stagefs.conf.example $(DESTDIR)$(sysconfdir)/stagefs/stagefs.conf
	sed -e 's|@bindir@|$(PREFIX)/bin|g' -e 's|@sysconfdir@|$(sysconfdir)|g' -e 's|@unitdir@|$(SYSTEMDUNITDIR)|g' \
		conf/stagefs.service.in >$(DESTDIR)$(SYSTEMDUNITDIR)/stagefs.service
	for m in $(MAN_PAGES); do install -m 0644 $$m $(DESTDIR)$(MANDIR)/man$${m##*.}/; done
ifneq ($(PROTOC),)
	install -d $(DESTDIR)$(PREFIX)/lib/stagefs/csi
	install -m 0644 csi/csi_pb2.py $(DESTDIR)$(PREFIX)/lib/stagefs/csi/csi_pb2.py
	install -m 0755 csi/stagefs_csi.py $(DESTDIR)$(PREFIX)/lib/stagefs/csi/stagefs_csi.py
	ln -sf ../lib/stagefs/csi/stagefs_csi.py $(DESTDIR)$(PREFIX)/bin/stagefs-csi
endif
ifeq ($(HAVE_SLURM),y)
	install -d $(DESTDIR)$(SLURM_PLUGINDIR)
	install -m 0644 slurm/spank_stagefs.so $(DESTDIR)$(SLURM_PLUGINDIR)/spank_stagefs.so
endif

# conf/stagefs.conf.example and the settings reference in
# docs/configuration.md are generated from the option table in src/config.c;
# tests/integration/gendocs.sh fails when the committed copies are stale
docs: stagefs
	$(Q)tools/dev/gendocs.sh ./stagefs

# libFuzzer harnesses (tests/fuzz/): src/ built again with clang and
# -fsanitize=fuzzer-no-link,address,undefined into tests/fuzz/obj/, each
# harness linked against that.  tests/fuzz/run.sh runs them;
# tests/integration/fuzz.sh runs each for a few seconds in the suite.
FUZZ_CC       ?= clang
FUZZ_SAN       = -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                 -fno-omit-frame-pointer
FUZZ_CFLAGS    = -std=gnu11 -g -O1 $(filter-out -Werror,$(WARN)) $(FUZZ_SAN) -pthread
FUZZ_SRC_OBJS  = $(patsubst src/%.c,tests/fuzz/obj/%.o,$(wildcard src/*.c src/*/*.c))
FUZZ_TARGETS   = $(patsubst %.c,%,$(wildcard tests/fuzz/fuzz_*.c))

tests/fuzz/obj/%.o: src/%.c config.h $$(if $$(wildcard tests/fuzz/obj/$$*.d),,FORCE)
	@mkdir -p $(dir $@)
	$(call quiet,FUZZCC,$@)$(FUZZ_CC) $(CPPFLAGS_ALL) $(FUZZ_CFLAGS) -MMD -MP -fsanitize=fuzzer-no-link -c -o $@ $<

tests/fuzz/obj/libsfs.a: $(FUZZ_SRC_OBJS)
	$(call quiet,AR,$@)rm -f $@ && $(AR) rcs $@ $^

tests/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/obj/libsfs.a
	$(call quiet,FUZZLD,$@)$(FUZZ_CC) $(CPPFLAGS_ALL) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< tests/fuzz/obj/libsfs.a $(LIBS_CORE)

# the seed writer is an ordinary program (tests/fuzz/mkseeds.sh runs it)
tests/fuzz/mkseed_manifest: tests/fuzz/mkseed_manifest.o src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_CORE)

fuzz: $(FUZZ_TARGETS) tests/fuzz/mkseed_manifest

clean:
	rm -f */*.o */*/*.o */*.d */*/*.d src/libsfs.a gpudirect/libstagefs.so prefetch/libprefetch.a stagefs $(TOOLS) $(UNIT_TESTS) $(TEST_HELPERS) $(BENCH_PROGS) tools/bench/gpubench slurm/spank_stagefs.so csi/csi_pb2.py
	rm -f $(MAN_PAGES)
	rm -rf tests/fuzz/obj $(FUZZ_TARGETS) tests/fuzz/mkseed_manifest

distclean: clean
	rm -f config.h version.h config.mk config.log
	rm -rf .sanitize

.PHONY: FORCE all check check-sanitizers demo docs fuzz install man clean distclean test-progs
.SECONDARY:
endif

# The Debian packages (debian/), built by tools/dev/mkdeb.sh with
# dpkg-buildpackage in a copy of the tree, build/deb/ (this tree's build and
# configuration are not touched); the .debs land in build/deb/.
deb:
	$(Q)tools/dev/mkdeb.sh

.PHONY: deb
