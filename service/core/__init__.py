"""Settings, the database engine, metrics: what every part of the service shares."""
