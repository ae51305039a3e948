"""The activator: holds the requests of a service scaled to zero until a replica is Ready.

``routes`` is what it knows of the cluster (which InferenceService a request names, the
Ready pods of each), ``app`` the HTTP service, ``apiserver`` the watches and the annotation
write against the API server, ``serve`` the command (docs/activator.md).
"""
