"""The study's error for an impossible setting (torch-free, imported by specs and schema alike)."""


class ConfigError(ValueError):
    """A setting is impossible; the message names the key and what is allowed."""


def require(cond: bool, key: str, msg: str) -> None:
    """Refuse an impossible setting: ``key``'s ConfigError with ``msg`` unless ``cond``."""
    if not cond:
        raise ConfigError(f"{key}: {msg}")
