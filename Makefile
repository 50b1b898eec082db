# tch-scope: `make demo` and `make test` work on a fresh machine with only
# the Rust toolchain and python3: the first run installs libtorch 2.13.0
# (the PyPI wheel torch==2.13.0) into ${XDG_CACHE_HOME:-~/.cache}/tch-scope/
# and links it at .libtorch, which .cargo/config.toml hands to tch.

CARGO ?= cargo
BOOTSTRAP := scripts/bootstrap-libtorch.sh

.PHONY: all libtorch demo test test-rust lint fmt bench clean-libtorch fuzz-long stress asan

all: test

# Always re-run: cheap when the cache is there, and it re-checks a
# LIBTORCH the user set.
libtorch:
	@bash $(BOOTSTRAP) >/dev/null
	@bash scripts/bootstrap-gloo.sh
	@bash scripts/bootstrap-cuda-headers.sh

demo: libtorch
	$(CARGO) run -p examples --example demo

test: libtorch
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc
	bash scripts/check-linkage.sh

lint: libtorch
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# Criterion benches, libtorch's C++ guards, PyTorch Python, the MLP
# workload and the macros' compile cost, in one run; prints the README's
# table and keeps it in target/bench/README-table.md (scripts/bench/run.sh).
bench: libtorch
	CARGO="$(CARGO)" bash scripts/bench/run.sh

# Hardening (issue 10). `make test` runs these at CI size: 10 000 fuzz
# cases, 8 threads x 100 000 scopes (sync and async).
FUZZ_CASES ?= 1000000
STRESS_SCOPES ?= 1000000

# The macro fuzzer at full size, in release.
fuzz-long:
	TCH_SCOPE_FUZZ_CASES=$(FUZZ_CASES) $(CARGO) test --release -p tch-scope-macros --lib \
		fuzz -- --nocapture

# 8 threads x 1M random nested scopes each (and as many async), in release.
stress: libtorch
	TCH_SCOPE_STRESS_SCOPES=$(STRESS_SCOPES) $(CARGO) test --release -p tch-scope-tests \
		--test stress -- --nocapture

# The test suite with the shim under AddressSanitizer + LeakSanitizer
# (clang's runtime from Debian's libclang-rt-dev, installed if missing).
asan: libtorch
	bash scripts/asan.sh

clean-libtorch:
	rm -f .libtorch
