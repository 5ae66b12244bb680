package main

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// produceSarama sends records with sarama's defaults but `partitioner` (its default is the hash
// partitioner: FNV-1a of the key), acks=all as the README asks.
func produceSarama(brokers []string, topic string, records []record, partitioner sarama.PartitionerConstructor) error {
	config := sarama.NewConfig()
	config.Producer.Partitioner = partitioner
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	producer, err := sarama.NewSyncProducer(brokers, config)
	if err != nil {
		return err
	}
	defer producer.Close()
	for _, r := range records {
		message := &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(r.key), Value: sarama.ByteEncoder(r.value)}
		if _, _, err := producer.SendMessage(message); err != nil {
			return err
		}
	}
	return nil
}

// consumeSarama reads every partition of `topic` from its oldest record until `count` records
// came (read committed).
func consumeSarama(brokers []string, topic string, count int) ([][]byte, error) {
	config := sarama.NewConfig()
	config.Consumer.IsolationLevel = sarama.ReadCommitted
	consumer, err := sarama.NewConsumer(brokers, config)
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	partitions, err := consumer.Partitions(topic)
	if err != nil {
		return nil, err
	}
	received := make(chan []byte, count)
	for _, p := range partitions {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		defer pc.Close()
		go func() {
			for m := range pc.Messages() {
				received <- m.Value
			}
		}()
	}
	var values [][]byte
	deadline := time.After(60 * time.Second)
	for len(values) < count {
		select {
		case v := <-received:
			values = append(values, v)
		case <-deadline:
			return values, fmt.Errorf("%d of %d records in 60 s", len(values), count)
		}
	}
	return values, nil
}
