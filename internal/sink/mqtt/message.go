package mqtt

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/eclipse/paho.golang/paho"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// User property names the sink adds.
const (
	PropertyEventID      = "event_id"
	PropertyKey          = "message_key"
	PropertyPartitionKey = "partition_key"
	maxString            = 65535
)

// Errors the results of Publish wrap.
var (
	// ErrInvalidTopic: the destination is not a topic one can publish to.
	ErrInvalidTopic = errors.New("invalid topic")
	// ErrInvalidProperty: a header, key or id cannot be a user property.
	ErrInvalidProperty = errors.New("invalid user property")
	// ErrTooLarge: the payload or packet is above a size limit.
	ErrTooLarge = errors.New("message too large")
	// ErrRefused: the server answered the PUBLISH with a failure reason code.
	ErrRefused = errors.New("refused by the server")
	// ErrClosed: the publisher was closed (retryable).
	ErrClosed = errors.New("publisher closed")
)

// checkTopic validates a topic name for PUBLISH.
func checkTopic(topic string) error {
	switch {
	case topic == "":
		return fmt.Errorf("%w: empty", ErrInvalidTopic)
	case strings.ContainsAny(topic, "+#"):
		return fmt.Errorf("%w %q: wildcards are for subscriptions", ErrInvalidTopic, topic)
	case len(topic) > maxString:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidTopic, len(topic), maxString)
	case !validString(topic):
		return fmt.Errorf("%w %q: not UTF-8 or holds U+0000", ErrInvalidTopic, topic)
	}
	return nil
}

// validString reports whether s may be an MQTT UTF-8 string.
func validString(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0) && len(s) <= maxString
}

// publishPacket builds the QoS 1 PUBLISH for m and its approximate encoded
// size, or a terminal error.
func publishPacket(m *sink.Message) (*paho.Publish, int, error) {
	if err := checkTopic(m.Destination); err != nil {
		return nil, 0, sink.Terminal(err)
	}
	props := &paho.PublishProperties{User: make(paho.UserProperties, 0, len(m.Headers)+3)}
	// Fixed header (5), topic length (2), packet id (2), properties length (4).
	size := 13 + len(m.Destination) + len(m.Payload)
	hasID := false
	add := func(k string, v []byte) error {
		if !validString(k) || !utf8.Valid(v) || len(v) > maxString || strings.ContainsRune(string(v), 0) {
			return sink.Terminal(fmt.Errorf("%w %q: key and value must be UTF-8 without U+0000, at most %d bytes",
				ErrInvalidProperty, k, maxString))
		}
		props.User = append(props.User, paho.UserProperty{Key: k, Value: string(v)})
		size += 5 + len(k) + len(v)
		return nil
	}
	for _, h := range m.Headers {
		if err := add(h.Key, h.Value); err != nil {
			return nil, 0, err
		}
		hasID = hasID || h.Key == PropertyEventID
	}
	if !hasID {
		if err := add(PropertyEventID, []byte(m.ID)); err != nil {
			return nil, 0, err
		}
	}
	if m.Key != nil {
		if err := add(PropertyKey, m.Key); err != nil {
			return nil, 0, err
		}
	}
	if m.PartitionKey != nil {
		if err := add(PropertyPartitionKey, m.PartitionKey); err != nil {
			return nil, 0, err
		}
	}
	if json.Valid(m.Payload) {
		props.ContentType = "application/json"
		size += 3 + len(props.ContentType)
		if utf8.Valid(m.Payload) {
			utf8Payload := byte(1)
			props.PayloadFormat = &utf8Payload
			size += 2
		}
	}
	return &paho.Publish{QoS: 1, Topic: m.Destination, Payload: m.Payload, Properties: props}, size, nil
}

// PUBACK reason codes this package tells apart.
const (
	rcTopicNameInvalid     = 0x90
	rcPacketTooLarge       = 0x95
	rcPayloadFormatInvalid = 0x99
)

// refused turns a PUBACK failure reason code into Publish's result.
func refused(topic string, code byte, reason string) error {
	err := fmt.Errorf("publish to %q: %w: reason code 0x%02x", topic, ErrRefused, code)
	if reason != "" {
		err = fmt.Errorf("%w (%s)", err, reason)
	}
	switch code {
	case rcTopicNameInvalid, rcPacketTooLarge, rcPayloadFormatInvalid:
		return sink.Terminal(err)
	}
	return err
}
