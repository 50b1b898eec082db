#!/usr/bin/env bash
# Checks that the integration-test binary resolves every libtorch library
# through its rpath (no LD_LIBRARY_PATH), and keeps libtorch_cuda when the
# libtorch found has it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(cargo test --workspace --test integration --no-run --message-format=json 2>/dev/null \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
[ -x "$bin" ] || { echo "check-linkage: test binary not found" >&2; exit 1; }
out=$(env -u LD_LIBRARY_PATH ldd "$bin")
if grep -q 'not found' <<<"$out"; then
  echo "check-linkage: unresolved libraries in $bin:" >&2
  grep 'not found' <<<"$out" >&2
  exit 1
fi
for lib in libtorch_cpu.so libc10.so; do
  grep -q "$lib => " <<<"$out" || { echo "check-linkage: $lib not linked" >&2; exit 1; }
done
libdir=$(readlink -f .libtorch)/lib
if [ -f "$libdir/libtorch_cuda.so" ]; then
  grep -q 'libtorch_cuda.so => ' <<<"$out" \
    || { echo "check-linkage: libtorch_cuda.so dropped from $bin (--as-needed)" >&2; exit 1; }
fi
echo "check-linkage: ok ($(grep -c 'libtorch\|libc10' <<<"$out") libtorch libraries resolved, cuda: $([ -f "$libdir/libtorch_cuda.so" ] && echo yes || echo no))"
