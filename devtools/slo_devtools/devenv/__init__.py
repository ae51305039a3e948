"""A local development environment: real control plane with fake GPU nodes, real Prometheus,
replica models of vLLM and trace-driven load. Used by the tests and by ``slo-operator demo``;
never imported by the operator itself."""
