package rabbitmq

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// Header names the sink adds to the AMQP headers table.
const (
	HeaderKey          = "message_key"
	HeaderPartitionKey = "partition_key"
	headerEventType    = "event_type"
	appID              = "outbox-relay"
)

// Errors the results of Publish wrap.
var (
	// ErrUnroutable: the broker returned a mandatory message (terminal).
	ErrUnroutable = errors.New("returned as unroutable")
	// ErrNoExchange: the exchange does not exist (terminal).
	ErrNoExchange = errors.New("no such exchange")
	// ErrTooLarge: the payload is above MaxMessageBytes (terminal).
	ErrTooLarge = errors.New("message too large")
	// ErrNacked: the broker refused the message with a nack (retryable).
	ErrNacked = errors.New("nacked")
	// ErrConfirmTimeout: no confirm within ConfirmTimeout (retryable).
	ErrConfirmTimeout = errors.New("no confirm in time")
	// ErrClosed: the publisher was closed (retryable).
	ErrClosed = errors.New("publisher closed")
)

func unroutable(exchange, key string, r *amqp.Return) error {
	return sink.Terminal(fmt.Errorf("exchange %q routing key %q: %w: %d %s",
		exchange, key, ErrUnroutable, r.ReplyCode, r.ReplyText))
}

// publishing builds the AMQP message for m.
func publishing(m *sink.Message, now time.Time) amqp.Publishing {
	headers := make(amqp.Table, len(m.Headers)+2)
	var eventType string
	for _, h := range m.Headers {
		headers[h.Key] = tableValue(h.Value)
		if h.Key == headerEventType {
			eventType = string(h.Value)
		}
	}
	if m.Key != nil {
		headers[HeaderKey] = tableValue(m.Key)
	}
	if m.PartitionKey != nil {
		headers[HeaderPartitionKey] = tableValue(m.PartitionKey)
	}
	p := amqp.Publishing{
		Headers:      headers,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID,
		Timestamp:    now,
		Type:         eventType,
		AppId:        appID,
		Body:         m.Payload,
	}
	if json.Valid(m.Payload) {
		p.ContentType = "application/json"
	}
	return p
}

// tableValue is a header value as AMQP carries it: a long string when it is
// text, else a byte array.
func tableValue(v []byte) any {
	if utf8.Valid(v) {
		return string(v)
	}
	return v
}
