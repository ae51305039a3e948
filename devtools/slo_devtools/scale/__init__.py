"""Scale benchmark: N InferenceServices on the local dev cluster, with synthetic series for
every service in a real Prometheus, and what one control cycle costs (``slo-operator scale``,
docs/scale.md)."""
