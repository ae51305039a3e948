"""Discrete-event benchmark of the SLO loop against peer autoscalers on public traces."""
