"""What GitOps tools need to show the operator's objects (Argo CD health checks)."""
