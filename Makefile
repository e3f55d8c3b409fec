# permshard — `make demo` runs the main job, `make test` the whole test suite.
# Both set up what they need: a virtualenv in .venv with torch from PyPI, the Rust build.

VENV ?= .venv
PY := $(VENV)/bin/python
# pyo3's build script needs an interpreter: the virtualenv's once it exists, else python3.
ifneq ($(wildcard $(PY)),)
export PYO3_PYTHON := $(abspath $(PY))
endif

.PHONY: help demo docs test test-fast gpu-smoke bench bench-megatron bench-mixture bench-blend bench-blend-at-scale bench-blocks bench-stream bench-data build build-fast lint lint-rust lint-py rust-test py-test clean

# What the extension is built from: a build runs again only when one of them changed.
SOURCES := Cargo.toml Cargo.lock pyproject.toml $(shell find rust -name '*.rs' -o -name Cargo.toml)
# cargo (and maturin's cargo) schedule their own jobs: under `make -j` they run without
# make's jobserver flags, which they would try, and fail, to join.
NOJOBS := env -u MAKEFLAGS -u MFLAGS
CARGO := $(NOJOBS) cargo
# pytest over every core (pytest-xdist); override with make test PYTEST_WORKERS=1. A worker
# that runs out of tests takes some of another's (worksteal): the suite's long multi-process
# tests no longer leave a core idle at its end (8 min 4 s against 8 min 57 s on 2 cores).
PYTEST_WORKERS ?= auto
XDIST := -n $(PYTEST_WORKERS) --dist worksteal

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# The dependencies (pyproject.toml's, the package itself left out) are installed by uv
# from PyPI: it fetches and unpacks in parallel, torch's wheels in ~20 s where pip takes
# ~2 min. Compiled to bytecode as pip does: the tests' processes run `python -B`, and
# without .pyc files each would compile torch at import (5.6 s instead of 2.5 s). The
# package is built by `make build` (release, fat LTO: the demo, benchmarks) or
# `make build-fast` (the tests' build).
UV := $(NOJOBS) $(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY)
# uv trusts the platform's certificate store, as pip does (not only its own roots: a
# proxy's certificate authority installed there is trusted too); maturin's uv as well.
export UV_SYSTEM_CERTS := 1

# What the demo needs: torch, numpy and the CLI's.
$(VENV)/.base: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q uv
	$(UV) -r pyproject.toml --extra cli
	touch $@

# What the tests and linters add: the integrations, pytest, mypy, ruff, maturin, and the
# frameworks the tests compare with. megatron-core is a test reference only, without its
# dependencies (its dataset code needs only torch and numpy). A framework that does not
# install fails here: the suite tests every one of them, it never skips one.
$(VENV)/.dev: $(VENV)/.base
	$(UV) -r pyproject.toml --extra dev
	$(UV) --no-deps megatron-core==0.16.1
	$(UV) grain "ray[train]"
	$(UV) torchft==0.2.0 parameterized  # parameterized: torchft's test harness imports it
	# torchtitan pins datasets<4.8, which would take huggingface-hub below what transformers 5
	# needs: it goes in without its pins, with the packages its loader and configs import.
	$(UV) --no-deps torchtitan==0.3.0
	$(UV) tyro spmd_types==0.2.3 tensorboard
	touch $@

build: $(VENV)/.build-release  ## Build the Rust extension into the virtualenv (release, fat LTO)

$(VENV)/.build-release: $(VENV)/.base $(SOURCES)
	$(NOJOBS) $(PY) -m pip install -q --no-deps -e .
	rm -f $(VENV)/.build-fast
	touch $@

build-fast: $(VENV)/.build-fast  ## The same, without fat LTO, rebuilt incrementally (what the tests run on)

# The core crate needs no Python: under make -j it compiles while uv fetches the Python
# side, and maturin's build below reuses it.
target/.core-fast: $(SOURCES)
	$(CARGO) build --profile fast -p permshard-core
	touch $@

# maturin (pyproject's build requirement) comes before the test tools: under make -j the
# extension compiles while uv fetches them.
$(VENV)/.maturin: $(VENV)/.base
	test -x $(VENV)/bin/uv || $(PY) -m pip install -q uv  # a virtualenv made before uv
	$(UV) "maturin>=1.9.4,<2"
	touch $@

$(VENV)/.build-fast: $(VENV)/.maturin target/.core-fast $(SOURCES)
	$(NOJOBS) VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop -q --uv --profile fast
	rm -f $(VENV)/.build-release
	touch $@

demo: build  ## The main job: 4 real ranks shard a generated token file, with proofs
	$(VENV)/bin/permshard demo

lint: lint-rust lint-py  ## Everything below

lint-rust:  ## rustfmt and clippy (needs no Python environment)
	cargo fmt --all --check
	$(CARGO) clippy --workspace --all-targets --profile fast -- -D warnings

lint-py: build-fast $(VENV)/.dev  ## ruff (format and check), mypy --strict, stubtest
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m mypy.stubtest permshard._core

rust-test:  ## Rust unit, property and golden tests
	$(CARGO) test --profile fast -p permshard-core

py-test: build-fast $(VENV)/.dev  ## Python tests (real multi-process runs included), over every core
	$(PY) -m pytest $(XDIST) --durations=30

test-fast: build-fast $(VENV)/.dev  ## The fast tier: tests not marked slow or multiprocess, over every core
	$(PY) -m pytest $(XDIST) -m "not slow and not multiprocess" -q

# py-test first: under make -j2 it starts as soon as the extension is built, the lints
# and docs alongside it (they are short; the tests are the critical path).
test: py-test lint rust-test docs  ## Everything CI runs

docs: $(VENV)/.dev  ## The documentation site (mkdocs, API pages from the docstrings) into site/; broken links fail
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -q

bench: build $(VENV)/.dev  ## criterion + pytest-benchmark + side-by-side; writes docs/benchmarks.md and the plot
	cargo bench -p permshard-core --bench permutation
	$(PY) -m pytest benches --benchmark-enable --benchmark-only -q
	$(PY) -m permshard bench --n 1e6,1e7,1e8 --markdown docs/benchmarks.md --plot docs/benchmarks.png

bench-mixture: build $(VENV)/.dev  ## Mixture vs Megatron's blend build (fetches megatron-core's wheel; CPython 3.11)
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 megatron-core==0.16.1 -d target/megatron
	cd target/megatron && unzip -o -q megatron_core-*.whl 'megatron/core/datasets/helpers_cpp*'
	$(PY) benches/mixture_vs_megatron.py --markdown docs/mixture.md \
		--helpers "$$(ls target/megatron/megatron/core/datasets/helpers_cpp*.so)"

bench-blend: build  ## A blend read in a shuffled sampler's order: mix-v3 vs mix-v2 vs mix-v1 per position; writes docs/shuffled_blend.md
	$(PY) benches/shuffled_blend.py --markdown docs/shuffled_blend.md

bench-blend-at-scale: build $(VENV)/.dev  ## 10,000 Megatron prefixes: megatron-core's builder vs permshard (time, files opened per process, written, heap; needs strace); writes docs/blend_at_scale.md
	$(PY) benches/blend_at_scale.py --markdown docs/blend_at_scale.md

bench-megatron: build $(VENV)/.dev  ## megatron-core's blended GPT datasets vs permshard on a 2e9-token corpus (4 GB in /tmp)
	$(PY) -m pip install -q --no-deps megatron-core==0.16.1
	$(PY) benches/megatron_corpus.py --markdown docs/megatron.md

bench-loader: build  ## One rank's data path through a real DataLoader: today's pipeline, nanoGPT, permshard lists and arrays, the physical limit; writes docs/loader.md
	$(PY) benches/loader_end_to_end.py --markdown docs/loader.md

bench-proofs: build  ## The exact proofs side by side (inverse vs bitmap, 1e9 over 8 ranks, a rank's share of 1e12); writes docs/proofs.md
	$(PY) benches/proofs_at_scale.py --n 1e9 --markdown docs/proofs.md

bench-stream: build  ## WeightedShardedSampler vs WeightedRandomSampler, exclusions vs none; writes docs/stream.md
	printf '# The stream over a run: measured\n\n`make bench-stream` (one run, side by side).\n' > docs/stream.md
	$(PY) benches/weighted_vs_torch.py --markdown docs/stream.md
	$(PY) benches/exclusions.py --markdown docs/stream.md

bench-data: build $(VENV)/.dev  ## The data path against its references in one run (gathers, blends, perm-v2's rounds, proofs); writes docs/data_path.md
	$(PY) benches/data_path.py --markdown docs/data_path.md

gpu-smoke: build  ## On a CUDA machine: pinned batches to the GPU, NCCL's consensus and an exact proof in a group of one
	$(PY) benches/gpu_smoke.py

bench-blocks: build  ## block-v1 vs perm-v1 on a cold page cache (writes a 4 GiB file in /tmp) and its quality table
	$(PY) benches/block_order_cold_cache.py --gib 4 --markdown docs/block_order.md
	$(PY) benches/block_order_quality.py --markdown docs/block_order.md

clean:  ## Remove build outputs and the virtualenv
	cargo clean
	rm -rf $(VENV)
