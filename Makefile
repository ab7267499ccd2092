# The two commands of the README:
#   make demo   install dependencies, build, train the demo model, kill it
#               twice with SIGKILL, resume, compare with an uninterrupted run
#   make test   install dependencies, build, run every test
# Extra: make build, make format, make check-format, make asan.

PRESET ?= release
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc)

.PHONY: all deps build demo test check-format format asan clean

all: build

deps:
	scripts/install-deps.sh

build: deps
	cmake --preset $(PRESET) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	scripts/demo.sh $(BUILD)

test: build check-format
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# clang-format (Google style) over every C++ file the repository tracks.
check-format: deps
	git ls-files '*.cc' '*.h' | xargs clang-format --dry-run -Werror

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

asan:
	$(MAKE) test PRESET=asan

clean:
	rm -rf build
