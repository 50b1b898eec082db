# tch-scope: `make demo` and `make test` work on a fresh machine with only
# the Rust toolchain and python3: the first run installs libtorch 2.13.0
# (the PyPI wheel torch==2.13.0) into ${XDG_CACHE_HOME:-~/.cache}/tch-scope/
# and links it at .libtorch, which .cargo/config.toml hands to tch.

CARGO ?= cargo
BOOTSTRAP := scripts/bootstrap-libtorch.sh

.PHONY: all libtorch demo test test-rust lint fmt bench clean-libtorch

all: test

# Always re-run: cheap when the cache is there, and it re-checks a
# LIBTORCH the user set.
libtorch:
	@bash $(BOOTSTRAP) >/dev/null
	@bash scripts/bootstrap-gloo.sh

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

bench: libtorch
	$(CARGO) bench -p tch-scope --bench scopes

clean-libtorch:
	rm -f .libtorch
