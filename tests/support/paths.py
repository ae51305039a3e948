"""Where the repository and the test fixtures are, for tests at any depth."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"
# Real node-label sets (GPU Feature Discovery, AMD node labeller): one copy, the dev fleet's
# package data; sources in tests/fixtures/hardware/README.md.
NODE_LABELS = REPO / "devtools" / "slo_devtools" / "data" / "hardware" / "node-labels.yaml"
