"""Settings: the schema, run specs, errors, seeds derived from an experiment's identity."""
