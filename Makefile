# The two commands the README opens with:
#   make render   preview what the operator deploys for the 8B example on H100 (no cluster)
#   make test     everything CI runs: build/reuse the control plane, lint, unit + integration
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: render test venv binaries lint unit integration crds clean

$(BIN)/slo-operator: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# torch (extra "profile") runs the GPU-profile code on the CPU in tests; it is the big
# download of a cold run (about 5 GB installed: PyPI's wheel carries the CUDA libraries),
# so `make render` does not need it.
$(VENV)/.profile-deps: $(BIN)/slo-operator
	$(BIN)/pip install --quiet -e '.[dev,profile]'
	touch $@

venv: $(BIN)/slo-operator

render: venv
	$(BIN)/slo-operator render -f examples/llama-8b-h100.yaml

binaries:
	bash hack/build-binaries.sh

lint: venv
	$(BIN)/ruff check operator runtime tests bench
	$(BIN)/mypy operator/slo_operator
	$(BIN)/lint-imports

unit: venv
	$(BIN)/pytest -q tests/unit

test: venv $(VENV)/.profile-deps binaries lint
	$(BIN)/pytest -q -p no:cacheprovider tests

crds: venv
	$(BIN)/slo-operator crds --out-dir crds
	cp crds/*.yaml charts/slo-operator/crds/
