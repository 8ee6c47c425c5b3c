package config

import (
	"time"

	"fmt"
	"slices"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// sinkBlock is the block of settings a sink type other than Kafka keeps
// under its own key (sinks.<name>.<type>), defined by its package.
type sinkBlock interface {
	Defaults()
	Problems() []sink.Problem
}

// block returns the settings block of s's type, nil when it is not set (or
// the type is kafka, whose settings sit on Sink itself).
func (s *Sink) block() sinkBlock {
	switch s.Type {
	case "rabbitmq":
		if s.RabbitMQ != nil {
			return s.RabbitMQ
		}
	case "mqtt":
		if s.MQTT != nil {
			return s.MQTT
		}
	case "webhook":
		if s.Webhook != nil {
			return s.Webhook
		}
	case "nats":
		if s.NATS != nil {
			return s.NATS
		}
	case "redis":
		if s.Redis != nil {
			return s.Redis
		}
	}
	return nil
}

// blocks lists the type blocks that are set, by key.
func (s *Sink) blocks() map[string]bool {
	return map[string]bool{"rabbitmq": s.RabbitMQ != nil, "mqtt": s.MQTT != nil, "webhook": s.Webhook != nil,
		"nats": s.NATS != nil, "redis": s.Redis != nil}
}

// kafkaFields lists the Kafka-only fields that are set.
func (s *Sink) kafkaFields() []string {
	var out []string
	add := func(set bool, name string) {
		if set {
			out = append(out, name)
		}
	}
	add(len(s.Brokers) > 0, "brokers")
	add(s.ClientID != "", "client_id")
	add(s.AutoCreateTopics, "auto_create_topics")
	add(s.DeliveryTimeout != 0, "delivery_timeout")
	add(s.RecordRetries != 0, "record_retries")
	add(s.Linger != 0, "linger")
	add(s.Compression != "", "compression")
	add(s.Partitioner != "", "partitioner")
	add(s.SASL != nil, "sasl")
	add(s.TLS != nil, "tls")
	add(s.ProgressTopic != "", "progress_topic")
	add(s.TransactionTimeout != 0, "transaction_timeout")
	add(s.MaxMessageBytes != 0, "max_message_bytes")
	return out
}

// validateSinkBlocks checks that a sink sets its own type's block and no
// other, and the block's settings.
func (c *Config) validateSinkBlocks(ps *problems, p string, s *Sink) {
	for key, set := range s.blocks() {
		if set && key != s.Type {
			ps.add(p+"."+key, "set, but the sink's type is %q", s.Type)
		}
	}
	if s.Type == "kafka" || !slices.Contains(sinkTypes, s.Type) {
		return
	}
	for _, f := range s.kafkaFields() {
		ps.add(p+"."+f, "a Kafka setting; settings of a %s sink go under %s.%s", s.Type, p, s.Type)
	}
	b := s.block()
	if b == nil {
		ps.add(p+"."+s.Type, "required for a sink of type %s", s.Type)
		return
	}
	for _, pr := range b.Problems() {
		ps.add(fmt.Sprintf("%s.%s.%s", p, s.Type, pr.Field), "%s", pr.Msg)
	}
}

// ownTimeout is the sink's own bound on the wait for one message's
// confirmation; zero when it has none.
func (s *Sink) ownTimeout() time.Duration {
	switch {
	case s.Type == "kafka":
		return s.DeliveryTimeout.D()
	case s.Type == "rabbitmq" && s.RabbitMQ != nil:
		return s.RabbitMQ.ConfirmTimeout
	case s.Type == "mqtt" && s.MQTT != nil:
		return s.MQTT.PublishTimeout
	case s.Type == "nats" && s.NATS != nil:
		return time.Duration(s.NATS.AckTimeout)
	case s.Type == "redis" && s.Redis != nil:
		return time.Duration(s.Redis.Timeout)
	case s.Type == "webhook" && s.Webhook != nil:
		return s.Webhook.Timeout
	}
	return 0
}
