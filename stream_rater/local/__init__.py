"""The embedded local runtime (a Kafka-protocol broker and Redis as child processes) and the
demo built on it. Development and CI only; never needed in production."""
