// Package fakekafka starts franz-go's in-process Kafka broker (kfake) as
// the demo, the fake-kafka command and the tests use it: one broker whose
// topic auto-creation follows the sinks' auto_create_topics, as a real
// broker's auto.create.topics.enable would. kfake alone creates no topic a
// client asks for, so a configuration with auto_create_topics on would
// fail against it where it works against Kafka.
package fakekafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Options are the broker options for a sink whose auto_create_topics is
// autoCreate.
func Options(autoCreate bool) []kfake.Opt {
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	if autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	return opts
}

// New starts a broker that creates the topics clients ask for when
// autoCreate (and only then), with opts added.
func New(autoCreate bool, opts ...kfake.Opt) (*kfake.Cluster, error) {
	c, err := kfake.NewCluster(append(Options(autoCreate), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("start in-process Kafka: %w", err)
	}
	return c, nil
}
