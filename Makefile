# The two commands the README opens with:
#   make demo     a live SLO demo on a local control plane with fake GPU nodes (no GPU needed)
#   make test     everything CI runs: build/reuse the control plane, lint, unit + integration + e2e
# Also: make render (preview what the operator deploys, no cluster), make bench.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo render bench test venv binaries lint unit integration crds profiles clean

# The three distributions, editable: runtime/ (slo-runtime), operator/ (slo-operator) and
# devtools/ (slo-devtools: demo, bench, dev cluster, and the test tools as extra "dev").
# A user who wants only the controller runs `pip install ./runtime ./operator`.
$(BIN)/slo-operator: runtime/pyproject.toml operator/pyproject.toml devtools/pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ./runtime -e ./operator -e './devtools[dev]'
	touch $@

# torch (extra "profile") runs the GPU-profile code on the CPU in tests; it is the big
# download of a cold run (about 5 GB installed: PyPI's wheel carries the CUDA libraries),
# so `make render` does not need it.
$(VENV)/.profile-deps: $(BIN)/slo-operator
	$(BIN)/pip install --quiet -e './runtime[profile]'
	touch $@

venv: $(BIN)/slo-operator

# SLO_FETCH_RELEASES=1 (make demo SLO_FETCH_RELEASES=1, make binaries ..., or exported): fetch
# the checksum-verified upstream release binaries instead of building them from source
# (docs/dev-cluster.md). make exports command-line variables to every recipe, so it reaches
# hack/build-binaries.sh both from `binaries` and from the demo, which runs that script itself.
# DEMO_ARGS, e.g. make demo DEMO_ARGS="--keep" or "--duration 300 --speed 10".
demo: venv
	$(BIN)/slo-operator demo $(DEMO_ARGS)

bench: venv
	$(BIN)/slo-operator bench --trace azure-code,azure-conv --trace servegen-day --trace ramp \
		--trace long-context --trace tight-itl --jobs 2 --out docs/bench $(BENCH_ARGS)

render: venv
	$(BIN)/slo-operator render -f examples/llama-8b-h100.yaml

binaries:
	bash hack/build-binaries.sh
	bash hack/build-glua.sh

lint: venv
	$(BIN)/ruff check operator runtime devtools tests bench
	$(BIN)/mypy operator/slo_operator
	$(BIN)/lint-imports

unit: venv
	$(BIN)/pytest -q tests --ignore=tests/integration --ignore=tests/e2e

# The operator image (Dockerfile), built daemonlessly with buildah by hack/build-image.sh
# (docs/install.md, "Building the image"): the Debian base is made once with debootstrap
# and then reused, so a warm run rebuilds only the operator's stages. `make test` builds it
# where buildah is installed and the user is root (debootstrap and buildah's vfs storage
# with chroot isolation need root); elsewhere the image tests skip with a message (under
# CI=true they fail).
# IMAGE_TAG, e.g. make image IMAGE_TAG=localhost/slo-operator:mine.
.PHONY: image
image:
	bash hack/build-image.sh $(IMAGE_TAG)

IMAGE_STEP := $(if $(and $(shell command -v buildah),$(filter 0,$(shell id -u))),image)

test: venv $(VENV)/.profile-deps binaries lint $(IMAGE_STEP)
	$(BIN)/pytest -q -p no:cacheprovider tests

crds: venv
	$(BIN)/slo-operator crds --out-dir crds
	cp crds/*.yaml charts/slo-operator/crds/

# Node profiles live in one place: operator/slo_operator/data/profiles/ (package data the
# operator reads). After a run on a GPU node, `slo-runtime profile --plan profiles/plan-h200.json
# --out DIR`, `make profiles PROFILE_RUN=DIR` writes the node profiles of DIR there (probes,
# plans, logs and broken files left out) and removes packaged profiles DIR does not hold.
profiles: venv
	@test -n "$(PROFILE_RUN)" || { echo "usage: make profiles PROFILE_RUN=DIR (the --out directory of slo-runtime profile)" >&2; exit 2; }
	$(BIN)/slo-operator profiles --from "$(PROFILE_RUN)" --out-dir operator/slo_operator/data/profiles

# The scale benchmark (docs/scale.md): N = 10, 100, 1000 InferenceServices on the local dev
# cluster; SCALE_ARGS, e.g. make scale SCALE_ARGS="-n 10 -n 100 --interval 5".
.PHONY: scale
scale: venv binaries
	$(BIN)/slo-operator scale $(SCALE_ARGS)
