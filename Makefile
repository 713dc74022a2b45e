# stagefs: top-level Makefile.  Run ./configure first; it writes config.mk
# (flags and libraries) and config.h (feature macros).

-include config.mk

ifeq ($(CONFIGURED),)
all check demo docs install:
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
          $(FUSE_CFLAGS) $(CUDA_CFLAGS)
CFLAGS_ALL = -std=gnu11 $(OPTFLAGS) $(WARN) $(SANFLAGS) -fPIC -pthread $(CFLAGS)
LDFLAGS_ALL = $(SANFLAGS) -pthread $(LDFLAGS)

SRC_OBJS      = $(patsubst %.c,%.o,$(wildcard src/*.c))
FUSE_OBJS     = $(patsubst %.c,%.o,$(wildcard fuse/*.c))
PREFETCH_OBJS = $(patsubst %.c,%.o,$(wildcard prefetch/*.c))
GPU_OBJS      = $(patsubst %.c,%.o,$(filter-out gpudirect/libstagefs%.c,$(wildcard gpudirect/*.c)))
TOOL_SRCS     = $(wildcard tools/stagefs-*.c)
TOOLS         = $(patsubst tools/%.c,%,$(TOOL_SRCS))
UNIT_SRCS     = $(wildcard tests/unit/test_*.c)
UNIT_TESTS    = $(patsubst %.c,%,$(UNIT_SRCS))
TEST_HELPERS  = $(patsubst %.c,%,$(wildcard tests/helpers/*.c))

LIBS_CORE = $(RADOS_LIBS) $(XXHASH_LIBS) $(INIH_LIBS) $(URING_LIBS) -lm
LIBS_ALL  = $(FUSE_LIBS) $(LIBS_CORE) $(CUDA_LIBS)

# the GPU benchmark (tools/bench.sh gpu) needs the CUDA runtime
ifeq ($(HAVE_CUDA),y)
GPU_BENCH     = tools/gpubench
endif

all: stagefs $(TOOLS) tools/readbench gpudirect/libstagefs.so $(GPU_BENCH)

%.o: %.c config.h $(wildcard src/*.h fuse/*.h prefetch/*.h gpudirect/*.h)
	$(call quiet,CC,$@)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -c -o $@ $<

src/libsfs.a: $(SRC_OBJS)
	$(call quiet,AR,$@)rm -f $@ && $(AR) rcs $@ $^

prefetch/libprefetch.a: $(PREFETCH_OBJS)
	$(call quiet,AR,$@)rm -f $@ && $(AR) rcs $@ $^ $(if $^,,)

stagefs: $(FUSE_OBJS) $(PREFETCH_OBJS) $(GPU_OBJS) src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $(FUSE_OBJS) $(PREFETCH_OBJS) $(GPU_OBJS) src/libsfs.a $(LIBS_ALL)

stagefs-%: tools/stagefs-%.o $(PREFETCH_OBJS) $(GPU_OBJS) src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $< $(PREFETCH_OBJS) $(GPU_OBJS) src/libsfs.a $(LIBS_ALL)

# the client library (C API gpudirect/libstagefs.h; gpudirect/stagefs.py loads it)
gpudirect/libstagefs.so: gpudirect/libstagefs.o gpudirect/libstagefs_ctl.o gpudirect/pinned.o src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -shared -Wl,-soname,libstagefs.so -Wl,--no-undefined -Wl,--exclude-libs,ALL -o $@ $^ $(XXHASH_LIBS) $(URING_LIBS) $(CUDA_LIBS) -lm

# the reader tools/bench.sh times (plain C, no stagefs code)
tools/readbench: tools/readbench.o
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $<

# libstagefs's GPU feed rate against its ceilings (tools/bench.sh gpu)
tools/gpubench: tools/gpubench.o gpudirect/libstagefs.o gpudirect/libstagefs_ctl.o gpudirect/pinned.o src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(XXHASH_LIBS) $(URING_LIBS) $(CUDA_LIBS) -lm

tests/unit/test_%: tests/unit/test_%.o src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $< src/libsfs.a $(LIBS_CORE) $(CMOCKA_LIBS)

tests/helpers/%: tests/helpers/%.o src/libsfs.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS_ALL) -o $@ $< src/libsfs.a $(LIBS_ALL)

test-progs: all $(UNIT_TESTS) $(TEST_HELPERS)

check: test-progs
	$(Q)tests/run.sh $(TESTS)

demo: all
	$(Q)tools/demo.sh

# `make install PREFIX=/opt/stagefs` moves the tree at install time (the
# binary also finds its subcommands in BINDIR/../libexec/stagefs); the
# compiled-in default is ./configure --prefix.
PREFIX ?= $(prefix)
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/libexec/stagefs \
		$(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
		$(DESTDIR)$(PREFIX)/share/stagefs/python $(DESTDIR)$(sysconfdir)/stagefs
	install -m 0755 stagefs $(DESTDIR)$(PREFIX)/bin/stagefs
	for t in $(TOOLS); do install -m 0755 $$t $(DESTDIR)$(PREFIX)/libexec/stagefs/$$t; done
	install -m 0755 gpudirect/libstagefs.so $(DESTDIR)$(PREFIX)/lib/libstagefs.so
	install -m 0644 gpudirect/libstagefs.h $(DESTDIR)$(PREFIX)/include/libstagefs.h
	install -m 0644 gpudirect/stagefs.py tools/stagefs_hints.py $(DESTDIR)$(PREFIX)/share/stagefs/python/
	install -m 0644 conf/stagefs.conf.example $(DESTDIR)$(sysconfdir)/stagefs/stagefs.conf.example
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/system
	sed -e 's|@bindir@|$(PREFIX)/bin|g' -e 's|@sysconfdir@|$(sysconfdir)|g' -e 's|@prefix@|$(PREFIX)|g' \
		conf/stagefs.service.in >$(DESTDIR)$(PREFIX)/lib/systemd/system/stagefs.service

# conf/stagefs.conf.example and the settings reference in
# docs/configuration.md are generated from the option table in src/config.c;
# tests/integration/gendocs.sh fails when the committed copies are stale
docs: stagefs
	$(Q)tools/gendocs.sh ./stagefs

clean:
	rm -f */*.o */*/*.o src/libsfs.a gpudirect/libstagefs.so prefetch/libprefetch.a stagefs $(TOOLS) $(UNIT_TESTS) $(TEST_HELPERS) tools/readbench tools/gpubench

distclean: clean
	rm -f config.h config.mk config.log

.PHONY: all check demo docs install clean distclean test-progs
.SECONDARY:
endif
