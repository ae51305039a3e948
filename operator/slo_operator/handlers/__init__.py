"""Thin kopf handlers: each one calls the reconciler and maps its outcome to kopf."""
