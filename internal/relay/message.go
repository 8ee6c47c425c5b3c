package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Header names the relay sets on every message. Consumers deduplicate on
// HeaderEventID (with HeaderSource when ids are only unique per table).
const (
	HeaderEventID       = "event_id"
	HeaderEventType     = "event_type"
	HeaderAggregateType = "aggregate_type"
	HeaderAggregateID   = "aggregate_id"
	HeaderSource        = "outbox_source"
)

var (
	errNoTopic     = errors.New("missing topic")
	errInvalidJSON = errors.New("invalid payload: not valid JSON")
)

// missingTopic says which columns a topic template needed.
func missingTopic(template string) error {
	t, err := layout.ParseTemplate(template)
	if err != nil || len(t.Columns()) == 0 {
		return fmt.Errorf("%w: the template %q rendered nothing", errNoTopic, template)
	}
	return fmt.Errorf("%w: the template %q needs a value in %s, which is NULL or empty", errNoTopic, template,
		strings.Join(t.Columns(), ", "))
}

// Validator checks a payload before it is sent (a JSON Schema); its error
// says why the payload is refused.
type Validator interface {
	Validate(payload []byte) error
}

// buildMessage turns a claimed row bound for tg into a message, or returns
// a terminal error saying why the row can never be published.
func buildMessage(r *source.Row, src string, validateJSON bool, tg *target, extra []HeaderExtra) (*sink.Message, error) {
	if !r.TopicOK {
		return nil, sink.Terminal(missingTopic(tg.topic))
	}
	if validateJSON && !(utf8.Valid(r.Payload) && json.Valid(r.Payload)) {
		return nil, sink.Terminal(errInvalidJSON)
	}
	if tg.schema != nil {
		if err := tg.schema.Validate(r.Payload); err != nil {
			return nil, sink.Terminal(err)
		}
	}
	maxBytes := tg.maxBytes
	m := &sink.Message{
		ID:           r.ID,
		Destination:  r.Topic,
		Key:          r.Key,
		PartitionKey: r.PartitionKey,
		Payload:      r.Payload,
	}
	m.Headers = make([]sink.Header, 0, 5)
	if len(r.Headers) > 0 {
		hs, err := parseHeaders(r.Headers)
		if err != nil {
			return nil, sink.Terminal(err)
		}
		m.Headers = append(hs, m.Headers...)
	}
	for _, h := range extra {
		if h.Extra < len(r.Extra) && r.Extra[h.Extra] != nil && *r.Extra[h.Extra] != "" {
			m.Headers = append(m.Headers, sink.Header{Key: h.Name, Value: []byte(*r.Extra[h.Extra])})
		}
	}
	m.Headers = append(m.Headers, sink.Header{Key: HeaderEventID, Value: []byte(r.ID)})
	add := func(k, v string) {
		if v != "" {
			m.Headers = append(m.Headers, sink.Header{Key: k, Value: []byte(v)})
		}
	}
	add(HeaderEventType, r.EventType)
	add(HeaderAggregateType, r.AggregateType)
	add(HeaderAggregateID, r.AggregateID)
	add(HeaderSource, src)
	if maxBytes > 0 {
		if n := messageSize(m); n > maxBytes {
			return nil, sink.Terminal(fmt.Errorf("message too large: %d bytes, the sink accepts at most %d", n, maxBytes))
		}
	}
	return m, nil
}

// HeaderExtra is a header the configuration adds to every message: Name,
// valued by the row's Extra[Extra] (none when NULL or empty).
type HeaderExtra struct {
	Name  string
	Extra int
}

// IsReserved reports whether name is a header the relay sets itself.
func IsReserved(name string) bool { return reserved[name] }

// reserved are header names the relay sets itself; the row's own headers of
// the same name are dropped so that consumers see one value.
var reserved = map[string]bool{
	HeaderEventID: true, HeaderEventType: true, HeaderAggregateType: true,
	HeaderAggregateID: true, HeaderSource: true,
}

// parseHeaders reads a JSON object, keeping its order. String values are
// used as they are; any other value is kept as its JSON text. null is
// skipped.
func parseHeaders(raw []byte) ([]sink.Header, error) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, errors.New("invalid headers: not a JSON object")
	}
	var out []sink.Header
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("invalid headers: %w", err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("invalid headers: %w", err)
		}
		k, ok := kt.(string)
		if !ok {
			return nil, errors.New("invalid headers: not a JSON object")
		}
		if reserved[k] {
			continue
		}
		switch {
		case bytes.Equal(v, []byte("null")):
			continue
		case len(v) > 0 && v[0] == '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, fmt.Errorf("invalid headers: %w", err)
			}
			out = append(out, sink.Header{Key: k, Value: []byte(s)})
		default:
			out = append(out, sink.Header{Key: k, Value: append([]byte(nil), v...)})
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errors.New("invalid headers: unterminated JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("invalid headers: data after the JSON object")
	}
	return out, nil
}

// messageSize approximates the bytes a message takes on the wire.
func messageSize(m *sink.Message) int {
	n := len(m.Payload) + len(m.Key)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// isJSON says whether a payload can be stored as JSON (jsonb) in the
// dead-letter table. jsonb refuses some JSON that Go accepts: the escape
// \u0000 and unpaired UTF-16 surrogates; such payloads are kept raw.
func isJSON(p []byte) bool {
	return utf8.Valid(p) && json.Valid(p) && jsonbSafe(p)
}

// jsonbSafe scans the escapes of a valid JSON text for \u0000 and unpaired
// surrogates.
func jsonbSafe(p []byte) bool {
	inString := false
	pendingHigh := false // a high surrogate waits for its low half
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			if pendingHigh {
				return false
			}
			inString = false
		case '\\':
			i++
			if p[i] != 'u' {
				if pendingHigh {
					return false
				}
				continue
			}
			v, err := strconv.ParseUint(string(p[i+1:i+5]), 16, 32)
			if err != nil {
				return false
			}
			i += 4
			switch {
			case v == 0:
				return false
			case v >= 0xD800 && v <= 0xDBFF:
				if pendingHigh {
					return false
				}
				pendingHigh = true
			case v >= 0xDC00 && v <= 0xDFFF:
				if !pendingHigh {
					return false
				}
				pendingHigh = false
			default:
				if pendingHigh {
					return false
				}
			}
		default:
			if pendingHigh {
				return false
			}
		}
	}
	return true
}
