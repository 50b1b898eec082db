# tch-scope: `make demo` and `make test` work on a fresh machine with only
# the Rust toolchain and python3: the first run installs libtorch 2.13.0
# (the PyPI wheel torch==2.13.0) into ${XDG_CACHE_HOME:-~/.cache}/tch-scope/
# and links it at .libtorch, which .cargo/config.toml hands to tch.

CARGO ?= cargo
BOOTSTRAP := scripts/bootstrap-libtorch.sh

.PHONY: all libtorch demo load test test-downstream test-downstream-pytorch test-oldest test-newest-pytorch gpu-bundle gpu-bundle-smoke lint fmt bench bench-against soak clean-libtorch fuzz-long stress asan

all: test

# Always re-run: cheap when the cache is there, and it re-checks a
# LIBTORCH the user set.
libtorch:
	@bash $(BOOTSTRAP) >/dev/null
	@bash scripts/bootstrap-gloo.sh
	@bash scripts/bootstrap-cuda-headers.sh
	@bash scripts/bootstrap-ccache.sh

# Every cargo command below resolves features for the whole workspace
# (--workspace, or the package's own target with the workspace's features),
# so torch-sys and the shim are built once for demo, test and lint alike.
demo: libtorch
	$(CARGO) build --workspace --examples
	$(or $(CARGO_TARGET_DIR),target)/debug/examples/demo

# tests/serve.rs runs examples/serve and examples/load as processes from
# target/debug/examples/ (only `cargo build` puts them there: the first
# line) and fetches promtool with
# scripts/bootstrap-promtool.sh (no root needed), or skips that check
# saying why. Each phase prints its time (docs/testing.md).
test: libtorch
	@bash scripts/phase.sh build $(CARGO) build --workspace --examples
	@bash scripts/phase.sh build-tests $(CARGO) test --workspace --all-targets --no-run
	@bash scripts/phase.sh tests $(CARGO) test --workspace --all-targets
	@bash scripts/phase.sh doctests $(CARGO) test --workspace --doc
	@bash scripts/phase.sh linkage bash scripts/check-linkage.sh
	@bash scripts/phase.sh downstream $(MAKE) --no-print-directory test-downstream

# The serving benchmark (docs/serving.md), three runs of examples/load,
# each starting its servers as processes on loopback, in turn (ABBA), with
# the same requests:
#  1. the last overhead: the tch-scope server unbatched (--max-batch 1)
#     against --plain, 2 workers each, on the TorchScript
#     tests/data/serve_mlp.pt and the same MLP as an AOTInductor .pt2
#     (scripts/export_pt2.py);
#  2. batching: the memory-bound 4x Linear(1024) MLP of
#     scripts/export_models.py (single rows, held to PyTorch's eval rows),
#     32 connections: batched, unbatched, plain, and FastAPI + uvicorn with
#     2 workers (scripts/serve_fastapi.py, installed into the bootstrap venv
#     by scripts/bootstrap-fastapi.sh), each server with its own default
#     workers (serve: half the cores; serve-lab --plain: one per core);
#     then batched against unbatched again with 2 workers each (unbatched's
#     best on 2 cores);
#  3. the same model, 1 connection: batched against unbatched;
#  4. the same model, single valid rows, 32 connections: batched against
#     MLServer 1.7.1 (adaptive batching 32 / 2 ms, 2 parallel workers,
#     scripts/mlserver_runtime.py; its own venv, cached, installed by
#     scripts/bootstrap-mlserver.sh), each on the fastest encoding the
#     Open Inference Protocol gives it (tch-scope: binary tensor data once
#     the server speaks the protocol; MLServer: JSON tensors, its REST API
#     has no binary extension), with the goals' ratio lines;
#  5. the encodings: the batched server, 32 connections, its own JSON
#     (/predict) against the protocol's binary tensor data, each run with
#     the server's CPU per request (the binary run needs the server's /v2
#     routes; before them both runs go to /predict, and say so).
# Each server's line says the protocol its requests went in: the batched
# server's /v2 routes when it has them (binary), the others' /predict.
# --forward-limit: after each run's rounds, the model's forward alone at
# each server's mean batch size (its /metrics), and the share of it each
# server reached (of_limit; MLServer's batches are not read: its share is
# bounded by the forward alone at batch 1, of_limit<=).
# The exports (the .pt2 needs a C++ compiler, about 30 s on 2 cores) are
# kept in target/load/, keyed by the scripts and the torch they run.
LOAD_ARGS ?= --rounds 4 --requests 20000 --concurrency 16 --workers 2
LOAD_DIR = target/load/$(shell (cat scripts/export_pt2.py scripts/export_models.py; readlink -f .libtorch) | cksum | cut -d' ' -f1)
LOAD_PYTHON = $(realpath .libtorch)/../../../../bin/python
LOAD_MODELS ?= --model tests/data/serve_mlp.pt --model $(LOAD_DIR)/serve_mlp.pt2
LOAD_MLP = --model $(LOAD_DIR)/load_mlp.pt --reference $(LOAD_DIR)/load_mlp.json
LOAD_BATCH_ARGS ?= --rounds 2 --requests 6000 --concurrency 32
LOAD_ONE_ARGS ?= --rounds 2 --requests 2000 --concurrency 1
LOAD_MLSERVER_ARGS ?= --rounds 2 --requests 6000 --concurrency 32
LOAD_ENCODING_ARGS ?= --rounds 2 --requests 6000 --concurrency 32
LOAD_BIN = $(or $(CARGO_TARGET_DIR),target)/release/examples/load
load: libtorch
	$(CARGO) build --release --workspace --example serve --example load && $(CARGO) build --release -p tch-scope-tests --bin serve-lab
	bash scripts/bootstrap-fastapi.sh >/dev/null
	bash scripts/bootstrap-mlserver.sh >/dev/null
	test -f $(LOAD_DIR)/serve_mlp.pt2 || \
		$(LOAD_PYTHON) -W ignore scripts/export_pt2.py $(LOAD_DIR)
	test -f $(LOAD_DIR)/load_mlp.json || \
		$(LOAD_PYTHON) -W ignore scripts/export_models.py load_mlp $(LOAD_DIR)
	$(LOAD_BIN) --servers unbatched,plain $(LOAD_ARGS) $(LOAD_MODELS)
	$(LOAD_BIN) --servers batched,unbatched,plain,fastapi --forward-limit \
		$(LOAD_BATCH_ARGS) $(LOAD_MLP)
	$(LOAD_BIN) --servers batched,unbatched --workers 2 --forward-limit \
		$(LOAD_BATCH_ARGS) $(LOAD_MLP)
	$(LOAD_BIN) --servers batched,unbatched $(LOAD_ONE_ARGS) $(LOAD_MLP)
	$(LOAD_BIN) --servers batched,mlserver --valid-only --forward-limit \
		$(LOAD_MLSERVER_ARGS) $(LOAD_MLP)
	$(LOAD_BIN) --servers batched,batched --protocol predict,auto --forward-limit \
		$(LOAD_ENCODING_ARGS) $(LOAD_MLP)

# tests/downstream: a crate of its own workspace that uses tch-scope as a
# user's crate does (renamed dependency, edition 2021, the README's rpath
# build.rs). Built as a user builds it: LIBTORCH from the environment, and
# from a working directory outside the repository, because cargo reads
# .cargo/config.toml from the working directory upward (--manifest-path
# does not change that), and ours would hand it LIBTORCH and
# TCH_SCOPE_GLOO_INCLUDE. Its own Cargo.lock (tracked); the workspace's
# target dir, where cargo keeps each crate apart by features and profile,
# so the registry crates the workspace built are reused.
DOWNSTREAM := $(abspath tests/downstream/Cargo.toml)
DOWNSTREAM_CARGO = cd / && env LIBTORCH=$(abspath .libtorch) \
	CXX=$${CXX:-$(abspath scripts/cxx)} CC=$${CC:-$(abspath scripts/cc)} \
	CARGO_TARGET_DIR=$(abspath target) $(CARGO)
test-downstream: libtorch
	$(DOWNSTREAM_CARGO) test --manifest-path $(DOWNSTREAM) --locked
	$(DOWNSTREAM_CARGO) run --manifest-path $(DOWNSTREAM) --locked
	$(DOWNSTREAM_CARGO) clippy --manifest-path $(DOWNSTREAM) --locked --all-targets \
		-- -W clippy::pedantic -D warnings

# The same crate with tch's other documented way to find libtorch: an
# installed PyTorch (the bootstrap venv's python first on PATH), no LIBTORCH.
test-downstream-pytorch: libtorch
	cd / && env -u LIBTORCH LIBTORCH_USE_PYTORCH=1 \
		PATH=$(realpath .libtorch)/../../../../bin:$$PATH \
		CARGO_TARGET_DIR=$(abspath target/downstream-pytorch) \
		$(CARGO) test --manifest-path $(DOWNSTREAM) --locked

# The suite against the oldest supported end: tch 0.24 + libtorch 2.11.0
# (installed once beside 2.13.0), in a copy under target/oldest with its own
# Cargo.lock and target dir (scripts/test-oldest.sh).
test-oldest:
	CARGO="$(CARGO)" bash scripts/test-oldest.sh

# Not in CI, not in `make test`: the newest PyTorch on PyPI (installed once
# into its own cached venv, ~4.7 GB) exports a .pt2 and a TorchScript file,
# and examples/newest_pytorch, built against libtorch 2.13, checks that both
# answer bitwise as that PyTorch did (scripts/test-newest-pytorch.sh).
test-newest-pytorch:
	CARGO="$(CARGO)" bash scripts/test-newest-pytorch.sh

# The GPU bundle (scripts/gpu-bundle.sh): the CUDA test binaries built here
# against torch 2.11.0 + tch 0.24 (the GPU machine's PyTorch), in
# release, stripped, with what they read, in target/gpu-bundle.tar.xz
# (at most 48 MiB). scripts/gpu-run.sh runs it there (docs/gpu.md).
gpu-bundle:
	CARGO="$(CARGO)" bash scripts/gpu-bundle.sh

# The same bundle and runner here, on the CPU, against the cached torch
# 2.11.0 venv (its python first on PATH): CUDA tests skipped, with the
# reason; fails if any test fails. Summary in target/gpu-smoke.
GPU_SMOKE_VENV := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tch-scope/venv-torch-2.11.0
gpu-bundle-smoke: gpu-bundle
	PATH="$(GPU_SMOKE_VENV)/bin:$$PATH" GPU_OUT=target/gpu-smoke \
		bash scripts/gpu-run.sh target/gpu-bundle.tar.xz

# Clippy over everything, then the peers bench, which measures tch-scope
# without the examples' `metrics` feature. Both with --workspace: the
# runtime's features stay those of the workspace, so nothing is built twice.
# Then the rustdoc with warnings as errors: a broken or private intra-doc
# link hides what it points to from readers of the docs. Last, both crates
# packaged and built from their packages as crates.io would take them, in
# one publish (cargo >= 1.90: tch-scope's `=0.1.0` macros come from the
# same run, not from crates.io), uploading nothing; the verify build
# shares target/, and asks crates.io only for the index. --allow-dirty: a
# working tree with edits packs them as they are.
lint: libtorch
	$(CARGO) fmt --all --check
	$(CARGO) fmt --manifest-path $(DOWNSTREAM) --check
	@bash scripts/phase.sh clippy $(CARGO) clippy --workspace --all-targets -- -D warnings
	@bash scripts/phase.sh clippy-peers $(CARGO) clippy --workspace --benches \
		--no-default-features --features examples/peers -- -D warnings
	@bash scripts/phase.sh doc env RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps
	@bash scripts/phase.sh publish $(CARGO) publish --dry-run --allow-dirty \
		-p tch-scope-macros -p tch-scope

fmt:
	$(CARGO) fmt --all

# Criterion benches, libtorch's C++ guards, PyTorch Python, the MLP
# workload and the macros' compile cost, in one run; writes the results
# into docs/benchmarks.md and target/bench/results.md (scripts/bench/run.sh).
bench: libtorch
	CARGO="$(CARGO)" bash scripts/bench/run.sh

# The scope benches of commit REV and of this tree, round after round in one
# run: `make bench-against REV=e542824` (the floors before leases).
bench-against: libtorch
	CARGO="$(CARGO)" bash scripts/bench/against.sh

# Long uptimes, not part of `make test`: 8 threads x 10M timed
# runs over 100 names (resident memory must grow < 1 MiB), then 100 000
# run-time names, and report() over 100 000 rows; writes docs/soak.md.
SOAK_RUNS ?= 10000000
soak: libtorch
	SOAK_RUNS=$(SOAK_RUNS) $(CARGO) bench -p tch-scope --bench soak -- --write $(abspath docs/soak.md)

# Hardening. `make test` runs these at CI size: 10 000 fuzz
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
