package inbox

import "github.com/twmb/franz-go/pkg/kgo"

// EventIDHeader is the header the relay gives every Kafka record: the
// event's stable id.
const EventIDHeader = "event_id"

// EventID is a record's event id (its event_id header), or "".
func EventID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == EventIDHeader {
			return string(h.Value)
		}
	}
	return ""
}
