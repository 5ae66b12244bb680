// Command goclients produces and consumes with Go's Kafka clients as a game service would:
// franz-go and sarama, each with its default partitioner, and sarama with its round-robin one
// (which spreads one key over every partition, as kafka-go's default Balancer does).
//
//	goclients produce franz|sarama|sarama-roundrobin BROKERS TOPIC   < lines "key<TAB>value"
//	goclients consume franz|sarama BROKERS TOPIC COUNT  > values, one a line
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
)

func main() {
	if len(os.Args) < 5 {
		fail(fmt.Errorf("usage: goclients produce|consume franz|sarama BROKERS TOPIC [COUNT]"))
	}
	verb, client, brokers, topic := os.Args[1], os.Args[2], strings.Split(os.Args[3], ","), os.Args[4]
	var err error
	switch {
	case verb == "produce" && client == "franz":
		err = produceFranz(brokers, topic, readRecords())
	case verb == "produce" && client == "sarama":
		err = produceSarama(brokers, topic, readRecords(), sarama.NewHashPartitioner)
	case verb == "produce" && client == "sarama-roundrobin":
		err = produceSarama(brokers, topic, readRecords(), sarama.NewRoundRobinPartitioner)
	case verb == "consume" && len(os.Args) == 6:
		count, convErr := strconv.Atoi(os.Args[5])
		if convErr != nil {
			fail(convErr)
		}
		var values [][]byte
		if client == "franz" {
			values, err = consumeFranz(brokers, topic, count)
		} else {
			values, err = consumeSarama(brokers, topic, count)
		}
		for _, v := range values {
			fmt.Println(string(v))
		}
	default:
		err = fmt.Errorf("unknown command %q %q", verb, client)
	}
	if err != nil {
		fail(err)
	}
}

// record is one line of standard input: a key and a value.
type record struct{ key, value []byte }

func readRecords() []record {
	var out []record
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<24)
	for scanner.Scan() {
		key, value, ok := strings.Cut(scanner.Text(), "\t")
		if !ok {
			fail(fmt.Errorf("line %d: no tab", len(out)+1))
		}
		out = append(out, record{[]byte(key), []byte(value)})
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "goclients:", err)
	os.Exit(1)
}
