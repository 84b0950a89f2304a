"""A study: its config expanded into runs and checked before any job."""
