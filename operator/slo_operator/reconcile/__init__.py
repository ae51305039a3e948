"""One reconcile for every trigger: observe, decide, apply, report."""
