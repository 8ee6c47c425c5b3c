package nats

import (
	"errors"
	"fmt"
	"strings"

	natsclient "github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// Header names the publisher sets besides the message's own headers.
const (
	// HeaderMsgID carries the event id; JetStream deduplicates on it.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderKey carries the message key.
	HeaderKey = "Outbox-Key"
	// HeaderPartitionKey carries the partition key, when the message has
	// one.
	HeaderPartitionKey = "Outbox-Partition-Key"
)

// errBadHeader marks a header NATS cannot carry as given.
var errBadHeader = errors.New("header not representable in NATS")

// natsMsg builds the NATS message for m, or a terminal error when m cannot
// be sent as it is.
func natsMsg(m *sink.Message) (*natsclient.Msg, error) {
	if m.Destination == "" {
		return nil, sink.Terminal(fmt.Errorf("message %q: no destination subject", m.ID))
	}
	h := make(natsclient.Header, len(m.Headers)+3)
	for _, mh := range m.Headers {
		if err := checkHeader(mh.Key, mh.Value); err != nil {
			return nil, sink.Terminal(fmt.Errorf("publish to subject %q: %w", m.Destination, err))
		}
		h.Add(mh.Key, string(mh.Value))
	}
	if m.ID != "" {
		if err := checkValue(HeaderMsgID, []byte(m.ID)); err != nil {
			return nil, sink.Terminal(fmt.Errorf("publish to subject %q: event id: %w", m.Destination, err))
		}
		h.Set(HeaderMsgID, m.ID)
	}
	for _, kv := range []struct {
		name  string
		value []byte
	}{{HeaderKey, m.Key}, {HeaderPartitionKey, m.PartitionKey}} {
		if kv.value == nil {
			continue
		}
		if err := checkValue(kv.name, kv.value); err != nil {
			return nil, sink.Terminal(fmt.Errorf("publish to subject %q: %w", m.Destination, err))
		}
		h.Set(kv.name, string(kv.value))
	}
	return &natsclient.Msg{Subject: m.Destination, Header: h, Data: m.Payload}, nil
}

// checkHeader refuses what would corrupt the header block or steer the
// server: names with separators or white space, values with line breaks,
// and the names reserved for the server (Nats-*) or set by the publisher.
func checkHeader(name string, value []byte) error {
	if name == "" {
		return fmt.Errorf("empty header name: %w", errBadHeader)
	}
	if strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == ':' || r == 0x7f }) {
		return fmt.Errorf("header name %q has ':', white space or a control character: %w", name, errBadHeader)
	}
	if len(name) >= 5 && strings.EqualFold(name[:5], "Nats-") {
		return fmt.Errorf("header %q: names starting with Nats- are reserved for the server: %w", name, errBadHeader)
	}
	if strings.EqualFold(name, HeaderKey) || strings.EqualFold(name, HeaderPartitionKey) {
		return fmt.Errorf("header %q is set by the relay from the message key: %w", name, errBadHeader)
	}
	return checkValue(name, value)
}

func checkValue(name string, value []byte) error {
	for _, b := range value {
		if b == '\r' || b == '\n' {
			return fmt.Errorf("header %q: value has a line break: %w", name, errBadHeader)
		}
	}
	return nil
}
