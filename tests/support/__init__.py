"""Test support code shared by the integration and end-to-end suites."""
