"""A model of a vLLM replica for tests and the demo: continuous batching on a step model, vLLM's
exact metric names, an OpenAI-compatible HTTP surface."""
