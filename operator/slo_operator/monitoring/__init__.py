"""What platform teams install beside the operator: SLO alert rules, dashboards, metrics."""
