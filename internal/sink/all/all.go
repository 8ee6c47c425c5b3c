// Package all registers the settings block of every built-in sink type with
// package sinkblock, so that a configuration may name them; a program that
// loads configurations imports it for that effect. Kafka has no block (its
// settings sit on the sink itself) and so no registration.
package all

import (
	"github.com/outbox-relay/outbox-relay/internal/config/sinkblock"
	"github.com/outbox-relay/outbox-relay/internal/sink/mqtt"
	"github.com/outbox-relay/outbox-relay/internal/sink/nats"
	"github.com/outbox-relay/outbox-relay/internal/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/internal/sink/redis"
	"github.com/outbox-relay/outbox-relay/internal/sink/webhook"
)

// Registered here, in one place, rather than in each package's init: Go
// initialises packages in import-path order, and this is the order in which
// validation messages and the configuration reference list the types.
func init() {
	for _, t := range []sinkblock.Type{nats.Block, rabbitmq.Block, redis.Block, mqtt.Block, webhook.Block} {
		sinkblock.Register(t)
	}
}
