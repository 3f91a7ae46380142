class ConfigError(ValueError):
    """Invalid user input: names the key, what is wrong and the fix."""
