#!/usr/bin/env bash
# An installed homodyne works for a C++ program with find_package(homodyne): installs the build
# into a temporary prefix, configures and builds tests/install/consumer against it, and runs it
# (a fit of data made in memory; exit 0 when it recovers the truth). Only the public headers are
# installed (include/homodyne/ of the source tree, nothing else under include/), and each of them
# compiles on its own against the installed prefix alone. The package passes no instruction-set
# flag on, and a portable build's libraries use AVX registers only in the pass kernel's variants.
# Usage: find_package_test.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
for file in lib/cmake/homodyne/homodyneConfig.cmake include/homodyne/fit.h lib/libhomodyne_pipeline.a; do
  [ -e "$work/prefix/$file" ] || { echo "FAIL: $file not installed"; exit 1; }
done
# The package carries no instruction-set flag (-march, -mtune, -mavx2, ...): a program built
# against it must run on every CPU the libraries run on (docs/design.md section 2b).
isa_flags=$(grep -EHno -e '-m(arch|tune|cpu)=[^ ;">]*' \
  -e '-m(avx|sse|fma|bmi|f16c|lzcnt|popcnt|movbe|aes|pclmul|vaes|gfni|sha|adx|amx)[0-9a-z_.-]*' \
  "$work/prefix/lib/cmake/homodyne/"*.cmake || true)
if [ -n "$isa_flags" ]; then
  echo "FAIL: the installed CMake package passes instruction-set flags on:"; echo "$isa_flags"
  exit 1
fi
# A portable x86-64 build (HOMODYNE_NATIVE_ARCH=OFF): only the modes' pass bodies' AVX2 and AVX-512
# variants (objects *_pass_variant.cc.o, chosen at run time) use the 256- and 512-bit
# registers; every other object of the installed libraries is baseline x86-64.
if [ "$(uname -m)" = x86_64 ] && grep -q '^HOMODYNE_NATIVE_ARCH:BOOL=OFF$' "$build_dir/CMakeCache.txt"; then
  wide=$(objdump -d --no-show-raw-insn "$work/prefix/lib/"libhomodyne_*.a | awk '
    /^In archive/ { next }
    /:[ \t]+file format/ { member = $1; next }
    /%[yz]mm[0-9]/ && member !~ /_pass_variant\.cc\.o:$/ { count[member]++ }
    END { for (m in count) print m, count[m], "instructions on ymm/zmm registers" }')
  if [ -n "$wide" ]; then
    echo "FAIL: objects outside the pass kernel's variants use AVX registers:"; echo "$wide"
    exit 1
  fi
  if grep -q '^HOMODYNE_HAS_MARCH_X86_64_V4:INTERNAL=1$' "$build_dir/CMakeCache.txt"; then
    variants=$(objdump -d --no-show-raw-insn "$work/prefix/lib/libhomodyne_model.a" | grep -c '%zmm' || true)
    [ "$variants" -gt 0 ] || { echo "FAIL: no AVX-512 code in libhomodyne_model.a (the avx512 kernel)"; exit 1; }
  fi
fi
# Exactly the public headers, nothing else.
source_headers=$(cd "$here/../../include" && find homodyne -type f | sort)
installed_headers=$(cd "$work/prefix/include" && find . -type f | sed 's|^\./||' | sort)
if [ "$source_headers" != "$installed_headers" ]; then
  echo "FAIL: installed headers differ from include/homodyne/:"
  diff <(echo "$source_headers") <(echo "$installed_headers") || true
  exit 1
fi
# Each public header on its own, with only the installed prefix (and the system) to include from.
consumer_source="$work/consumer_source"
cp -r "$here/consumer" "$consumer_source"
: > "$consumer_source/headers.cmake"
for header in $installed_headers; do
  name=$(basename "$header" .h)
  printf '#include <%s>\n' "$header" > "$consumer_source/header_$name.cc"
  echo "target_sources(public_headers PRIVATE header_$name.cc)" >> "$consumer_source/headers.cmake"
done
cmake -S "$consumer_source" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; echo "FAIL: configuring the consumer"; exit 1; }
cmake --build "$work/consumer" > "$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log"; echo "FAIL: building the consumer"; exit 1; }
"$work/consumer/consumer" || { echo "FAIL: the consumer's fit"; exit 1; }
echo "find_package(homodyne): ok"
