"""The REST API (v1): routers per resource, their dependencies, error handlers."""
