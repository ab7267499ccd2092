# The two commands of the README:
#   make demo   install dependencies, build, train the demo model, kill it
#               twice with SIGKILL, resume, compare with an uninterrupted run
#   make test   install dependencies, build, run every test and the code
#               blocks of README.md and docs/*.md
# Extra: make build, make wheel, make format, make check-format, make asan,
#        make tsan, make fuzz (docs/reliability.md).

PRESET ?= release
# Debian's CMake (3.25, from scripts/install-deps.sh), not whichever comes
# first on PATH: another on this machine's PATH may be a newer one from PyPI
# whose policies and warnings the build was not written for.
CMAKE  ?= /usr/bin/cmake
CTEST  ?= /usr/bin/ctest
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc)

# A failing test prints only its failures, so they are what a log shows.
export GTEST_BRIEF ?= 1

.PHONY: all deps build wheel demo test test-release test-wheel check-format \
        check-docs \
        check-layering format asan tsan \
        fuzz-replay fuzz clean

all: build

deps:
	scripts/install-deps.sh

build: deps
	$(CMAKE) --preset $(PRESET) >/dev/null
	$(CMAKE) --build $(BUILD) -j $(JOBS)

# Only what the demo runs (the training program and the ckpt tool), not
# every test: a first `make demo` is minutes, not a quarter of an hour.
demo: deps
	$(CMAKE) --preset $(PRESET) >/dev/null
	$(CMAKE) --build $(BUILD) -j $(JOBS) --target train ckpt_cli
	scripts/demo.sh $(BUILD)

# The Python wheel, dist/ckpt-<version>-py3-none-linux_x86_64.whl: the
# package, libckpt.so, the ckpt tool (a `ckpt` command once installed) and
# the libraries they need (scripts/build-wheel.sh).
wheel: build
	scripts/build-wheel.sh $(BUILD) dist

# Every test of the build, the code blocks of the docs, the wheel installed
# and tested in fresh virtual environments, then the same under address and undefined-behaviour
# sanitizers, the threaded tests under the thread sanitizer, and the fuzz
# corpus replayed under address and undefined-behaviour sanitizers.
test: test-release check-docs test-wheel asan tsan fuzz-replay

test-release: build check-format check-layering
	$(CTEST) --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The wheel installed with pip into a fresh venv of /usr/bin/python3 (the
# python/tests suite less its many-rank job suites, run from outside the
# source tree) and of every other CPython 3.9+ under pyenv
# (python/tests/test_no_numpy.py), then
# examples/python/train.py and bench/peers/peers.py, then `pip install` of a
# fresh clone, built from nothing (scripts/test-wheel.sh).
test-wheel: wheel
	scripts/test-wheel.sh $(BUILD) dist

# The code blocks of README.md and docs/*.md run as written, their shown
# output compared, and every relative link resolves (scripts/check-docs.py;
# the rules are in docs/README.md); the checker's own test first.
check-docs: build
	/usr/bin/python3 scripts/test_check_docs.py
	/usr/bin/python3 scripts/check-docs.py --build $(BUILD)

# clang-format (Google style) over every C++ file the repository tracks.
check-format: deps
	git ls-files '*.cc' '*.h' | xargs clang-format --dry-run -Werror

# Backend headers above the Storage interface, inline rank messages,
# collectives whose payload is not a message of the message layer, test
# support used by library code, files grown past 700 lines, import circles
# in the Python package (scripts/check-layering.sh); the checker's own test
# first.
check-layering:
	/usr/bin/python3 scripts/test_check_layering.py
	/usr/bin/python3 scripts/test_check_collectives.py
	scripts/check-layering.sh

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

# Python (an uninstrumented interpreter cannot load an ASan module) and the
# MPI processes (OpenMPI's own allocations would read as leaks) are left out.
# This is also the thread-safety check: it compiles every target (every
# library, tool and test) with clang, -Wthread-safety and -Werror, so a
# member used without the mutex it is GUARDED_BY fails the build here. The
# tsan and fuzz builds compile only their own targets. The fuzz targets are
# built here too, and their corpus replayed by fuzz-replay, not here.
asan: deps
	$(CMAKE) --preset asan >/dev/null
	$(CMAKE) --build build/asan -j $(JOBS)
	$(CTEST) --test-dir build/asan --output-on-failure -j $(JOBS) -E '^mpi_' \
	  -LE '^fuzz$$'

# The tests that run many threads: ranks as threads, concurrent storage.
TSAN_TESTS := util_test device_test storage_test checkpoint_test \
              checkpoint_powerloss_test checkpoint_device_test \
              tiers_test
tsan: deps
	$(CMAKE) --preset tsan >/dev/null
	$(CMAKE) --build build/tsan -j $(JOBS) --target $(TSAN_TESTS)
	$(CTEST) --test-dir build/tsan --output-on-failure -j $(JOBS) \
	  -R '^($(subst $(eval) ,|,$(TSAN_TESTS)))$$'

# Each fuzz target over its committed seed corpus, once, under ASan and
# UBSan: the targets are built in the asan preset, on its libraries (after
# `make asan` only they are left to link), as replaying needs no coverage.
fuzz-replay: deps
	$(CMAKE) --preset asan >/dev/null
	$(CMAKE) --build build/asan -j $(JOBS) --target ckpt_fuzzers
	$(CTEST) --test-dir build/asan --output-on-failure -j $(JOBS) -L '^fuzz$$'

# Each fuzz target, built with coverage in the fuzz preset, replays and then
# mutates its corpus for FUZZ_SECONDS (new inputs go to build/fuzz/found/,
# crashes to build/fuzz/crash-*).
FUZZ_SECONDS ?= 300
FUZZ_TARGETS := safetensors manifest url messages index resigned
fuzz: deps
	$(CMAKE) --preset fuzz >/dev/null
	$(CMAKE) --build build/fuzz -j $(JOBS) --target ckpt_fuzzers
	$(CTEST) --test-dir build/fuzz --output-on-failure -j $(JOBS) -L '^fuzz$$'
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/found/$$t && \
	  build/fuzz/fuzz/$${t}_fuzz -max_total_time=$(FUZZ_SECONDS) \
	    -print_final_stats=1 -artifact_prefix=build/fuzz/crash-$$t- \
	    build/fuzz/found/$$t fuzz/corpus/$$t || exit 1; \
	done

clean:
	rm -rf build
