#!/usr/bin/env bash
# The pass kernel's variants keep to themselves (src/model/homodyne/homodyne_pass_variant.h): each object
# compiled for an instruction-set level defines global symbols only in its own namespace
# homodyne::pass_kernel::LEVEL. A weak copy of an inline or template function (Eigen, the standard
# library, vector_math.h) in an AVX-512 object could be the one the linker keeps for the whole
# program, and the baseline code would then stop with SIGILL on a CPU without AVX-512.
# Usage: pass_kernel_symbols_test.sh NM LEVEL OBJECT...
set -u
nm_program=$1
level=$2
shift 2
failures=0
for object in "$@"; do
  symbols=$("$nm_program" --defined-only --extern-only --demangle "$object") ||
    { echo "FAIL: $nm_program could not read $object"; exit 1; }
  own=$(grep -c " homodyne::pass_kernel::$level::" <<<"$symbols")
  foreign=$(grep -v " homodyne::pass_kernel::$level::" <<<"$symbols" | grep -v '^$')
  if [ "$own" -eq 0 ]; then
    echo "FAIL: $object defines nothing in homodyne::pass_kernel::$level"; failures=$((failures + 1))
  fi
  if [ -n "$foreign" ]; then
    echo "FAIL: $object (level $level) defines symbols outside its namespace:"
    echo "$foreign"
    failures=$((failures + 1))
  fi
  [ "$failures" -eq 0 ] && echo "ok: $object: $own symbols, all in homodyne::pass_kernel::$level"
done
[ "$failures" -eq 0 ]
