package main

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produceFranz sends records with franz-go's defaults (sticky key partitioner, murmur2 for
// keyed records as Java's; acks=all, idempotent).
func produceFranz(brokers []string, topic string, records []record) error {
	client, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, r := range records {
		if err := client.ProduceSync(ctx, &kgo.Record{Key: r.key, Value: r.value}).FirstErr(); err != nil {
			return err
		}
	}
	return nil
}

// consumeFranz reads the first `count` records of every partition of `topic` (read committed).
func consumeFranz(brokers []string, topic string, count int) ([][]byte, error) {
	client, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var values [][]byte
	for len(values) < count {
		fetches := client.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return values, err
		}
		fetches.EachError(func(_ string, _ int32, e error) { err = e })
		if err != nil {
			return values, err
		}
		fetches.EachRecord(func(r *kgo.Record) { values = append(values, r.Value) })
	}
	return values, nil
}
