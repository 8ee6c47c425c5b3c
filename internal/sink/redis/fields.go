package redis

import (
	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// Stream entry field names.
const (
	// FieldID holds the event id.
	FieldID = "id"
	// FieldKey holds the message key, when it has one.
	FieldKey = "key"
	// FieldPartitionKey holds the partition key, when it has one.
	FieldPartitionKey = "partition_key"
	// FieldPayload holds the payload, unchanged.
	FieldPayload = "payload"
	// HeaderPrefix starts the field name of each header: the header
	// event_type becomes the field h:event_type. Fields without it are
	// the relay's own, so a header never collides with them.
	HeaderPrefix = "h:"
)

// fields lays m out as the field-value pairs of its stream entry, in the
// order id, key, partition_key, headers (in their order), payload.
func fields(m *sink.Message) []any {
	vs := make([]any, 0, 2*(4+len(m.Headers)))
	vs = append(vs, FieldID, m.ID)
	if m.Key != nil {
		vs = append(vs, FieldKey, m.Key)
	}
	if m.PartitionKey != nil {
		vs = append(vs, FieldPartitionKey, m.PartitionKey)
	}
	for _, h := range m.Headers {
		vs = append(vs, HeaderPrefix+h.Key, h.Value)
	}
	return append(vs, FieldPayload, m.Payload)
}
