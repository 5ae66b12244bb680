"""Tools around the core that run without the stream: replay, verify, evaluate, tune, and the
input adapters they read files with."""
