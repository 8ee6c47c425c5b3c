package app

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/sink"
	// Registers every sink type's block, so that configurations may name them.
	_ "github.com/outbox-relay/outbox-relay/internal/sink/all"
	"github.com/outbox-relay/outbox-relay/internal/sink/kafka"
	"github.com/outbox-relay/outbox-relay/internal/sink/mqtt"
	"github.com/outbox-relay/outbox-relay/internal/sink/nats"
	"github.com/outbox-relay/outbox-relay/internal/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/internal/sink/redis"
	"github.com/outbox-relay/outbox-relay/internal/sink/webhook"
)

// newSink connects the sink of one configuration entry.
func (a *App) newSink(name string, sc config.Sink) (sink.Publisher, error) {
	log := a.log.With("sink", name)
	switch sc.Type {
	case "kafka":
		return kafka.New(sc, kafka.WithLogger(log),
			kafka.WithRegisterer(prometheus.WrapRegistererWith(prometheus.Labels{"sink": name}, a.reg)),
			kafka.WithKgoOpts(a.kgoOpts...))
	case "rabbitmq":
		return rabbitmq.New(*sc.Block().(*rabbitmq.Config), rabbitmq.WithLogger(log))
	case "mqtt":
		return mqtt.New(*sc.Block().(*mqtt.Config), mqtt.WithLogger(log))
	case "nats":
		return nats.New(*sc.Block().(*nats.Config), nats.WithLogger(log))
	case "redis":
		return redis.New(*sc.Block().(*redis.Config), redis.WithLogger(log))
	case "webhook":
		return webhook.New(*sc.Block().(*webhook.Config), webhook.WithLogger(log))
	}
	return nil, fmt.Errorf("type %q is not supported", sc.Type)
}
