"""The streaming service: the faust app and its agent (`app`), the batch pipeline that
validates, applies, produces and acknowledges (`pipeline`), the one module that touches
faust's and aiokafka's private parts (`faust_transport`), plain Kafka clients (`kafka_io`),
the web server (`web`) and metrics (`metrics`)."""
