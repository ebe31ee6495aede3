"""The pipetune service: REST API, database, background run manager and dashboard.
``service.main.create_app`` builds the FastAPI app; ``service.cli`` is the ``pipetune``
command."""
