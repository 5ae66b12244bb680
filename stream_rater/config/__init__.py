"""Configuration: service settings (environment + flags) and ladders (model and parameters)."""
