"""The study's error for an impossible setting (torch-free, imported by specs and schema alike)."""


class ConfigError(ValueError):
    """A setting is impossible; the message names the key and what is allowed."""
