#!/bin/sh
# The layering rules a reviewer would otherwise have to remember
# (README, "Source tree"):
#   - the library layers (src/checkpoint, format, data, lease, staging,
#     messages, tiers) know a storage backend only through the Storage interface: no header of src/storage/<backend>/ is included there;
#   - messages between ranks are encoded and decoded only in the message
#     layer (src/messages/messages.h), never as JSON built inline; every
#     collective's payload is one of its messages
#     (scripts/check_collectives.py says how that is checked);
#   - no non-test source file under src/, tools/ or bench/ grows past 700
#     lines, and
#     the manager stays a facade (400);
#   - no layer includes a header of a layer above it (the tiers above the
#     checkpoint layer, the runner above the tiers, the benchmark of
#     `ckpt bench` in bench/core above the library and below the tools);
#   - the tools hold no benchmark machinery: it lives in bench/core, and
#     tools/ckpt/bench.cc is only the command's front;
#   - the ckpt command (tools/) uses the checkpoint layer through its public
#     API (include/ckpt): it includes no header of src/checkpoint, the
#     manager's internals (none is needed: Delete, GarbageCollect, List and
#     Describe report what the commands print);
#   - test support lives in src/testing and only tests use it: no library
#     or tool source (src/, include/, tools/, but tests) includes a header
#     of src/testing;
#   - no test makes a temporary folder but through the fixtures;
#   - the Python package keeps to 700 lines a file and has no import circle
#     (scripts/check-python-layering.py).
# Prints every breach and exits 1 when there is one.
set -eu
cd "$(dirname "$0")/.."
status=0

leaks=$(git grep -nE '#include "storage/(file|s3|memory)/' -- \
  'src/checkpoint/*' 'src/format/*' 'src/data/*' 'src/lease/*' \
  'src/staging/*' 'src/messages/*' 'src/tiers/*' || true)
if [ -n "$leaks" ]; then
  echo "check-layering: a backend header included above the Storage interface:"
  echo "$leaks"
  status=1
fi

inline_json=$(git grep -nE 'json::parse|\.dump\(\)' -- 'src/checkpoint/*.cc' \
  ':!src/checkpoint/*_test.cc' || true)
if [ -n "$inline_json" ]; then
  echo "check-layering: JSON built or parsed in src/checkpoint (rank" \
    "messages belong in src/messages, manifests in src/format):"
  echo "$inline_json"
  status=1
fi

# Upward includes: each layer knows only those below it (docs/design.md,
# "Layers"). Staging memory, the data path, the lease and the message
# layer sit below the checkpoint layer's protocols, the tiers above them, the runner above the
# tiers; the catalog and the checkpoint layer know nothing of a local
# tier's layout (format/tier_layout.h): the tiers tell them.
upward=$(git grep -nE '#include "(tiers/|runner/|ckpt/tiered\.h|ckpt/runner\.h)' \
  -- 'src/util/*' 'src/device/*' 'src/format/*' 'src/storage/*' \
  'src/dist/*' 'src/catalog/*' 'src/staging/*' 'src/data/*' 'src/lease/*' \
  'src/messages/*' 'src/checkpoint/*' ':!*_test.cc' || true)
upward="$upward$(git grep -nE '#include "(checkpoint/|ckpt/checkpoint_manager\.h)' \
  -- 'src/staging/*' 'src/data/*' 'src/lease/*' ':!*_test.cc' || true)"
# The message layer carries the public API's types (ckpt/checkpoint_manager.h)
# but knows none of the protocols that send its messages.
upward="$upward$(git grep -nE '#include "checkpoint/' -- 'src/messages/*' \
  ':!*_test.cc' || true)"
upward="$upward$(git grep -nE '#include "(runner/|ckpt/runner\.h)' -- \
  'src/tiers/*' ':!*_test.cc' || true)"
upward="$upward$(git grep -nE '#include "format/tier_layout\.h"' -- \
  'src/catalog/*' 'src/checkpoint/*' ':!*_test.cc' || true)"
# bench/core sits above the library and below the tools: the library does
# not include it, and it includes no header of a tool (a tool's headers are
# named without a folder; every layer's are named with theirs).
upward="$upward$(git grep -nE '#include "core/' -- 'src/*' 'include/*' \
  ':!*_test.cc' || true)"
upward="$upward$(git grep -nE '#include "[^/"]+"' -- 'bench/core/*' || true)"
if [ -n "$upward" ]; then
  echo "check-layering: a header of a layer above included from below:"
  echo "$upward"
  status=1
fi

# Headers of src/checkpoint that tools/ may include: none. A command that
# needs one is missing a public call; name the header here only with the
# reason why not.
tools_internal=$(git grep -nE '#include "checkpoint/' -- 'tools/*' \
  ':!*_test.cc' || true)
if [ -n "$tools_internal" ]; then
  echo "check-layering: the ckpt command includes an internal header of" \
    "src/checkpoint (use the public API, include/ckpt):"
  echo "$tools_internal"
  status=1
fi

testing=$(git grep -nE '#include "testing/' -- 'src/*' 'include/*' 'tools/*' \
  'bench/core/*' ':!src/testing/*' ':!*_test.cc' || true)
if [ -n "$testing" ]; then
  echo "check-layering: test support (src/testing) included by library or" \
    "tool code:"
  echo "$testing"
  status=1
fi

# The benchmarks live in one place, bench/: the measuring and the report of
# `ckpt bench` are bench/core's, and the command only parses its flags and
# prints what the library returns.
machinery=$(git ls-files 'tools/*/bench_*' || true)
if [ -n "$machinery" ]; then
  echo "check-layering: benchmark machinery under tools/ (it belongs in" \
    "bench/core; tools/ckpt/bench.cc is only the command's front):"
  echo "$machinery"
  status=1
fi

# Temporary folders of tests come from the fixtures (testing::TempDir,
# pytest's tmp_path, TemporaryDirectory), which remove them: a bare mkdtemp
# leaves one behind whenever a test fails before its own cleanup.
temps=$(git grep -nE '\bmkdtemp\b' -- '*test*' ':!src/testing/*' || true)
if [ -n "$temps" ]; then
  echo "check-layering: mkdtemp in a test outside the fixtures (src/testing/temp_dir.h):"
  echo "$temps"
  status=1
fi

if ! /usr/bin/python3 scripts/check-python-layering.py; then
  status=1
fi

if ! /usr/bin/python3 scripts/check_collectives.py; then
  status=1
fi

for f in $(git ls-files 'src/*.cc' 'src/*.h' 'tools/*.cc' 'tools/*.h' \
  'bench/*.cc' 'bench/*.h' |
  grep -v '_test\.cc$'); do
  limit=700
  [ "$f" = src/checkpoint/manager.cc ] && limit=400
  lines=$(wc -l <"$f")
  if [ "$lines" -gt "$limit" ]; then
    echo "check-layering: $f has $lines lines (limit $limit): split it by mechanism"
    status=1
  fi
done
exit $status
