package relay

import (
	"context"
	"slices"
	"sync"

	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Route sends the rows it matches to another sink than the source's own.
// Every condition set must hold; a list holds when the row's value is in it.
type Route struct {
	Name           string
	Sink           sink.Publisher
	EventTypes     []string // empty: any
	AggregateTypes []string // empty: any
	// Column is the index in source.Row.Extra of the value compared with
	// Values, or -1 for no column condition. A NULL value matches nothing.
	Column int
	Values []string
	// Topic is the index in source.Row.Extra of the route's own topic, or -1
	// to keep the row's topic; TopicTemplate is its template.
	Topic         int
	TopicTemplate string
	// SinkName is the configured name of Sink.
	SinkName string
	// Schema, when set, checks the payloads the route sends.
	Schema Validator
}

func (r *Route) match(row *source.Row) bool {
	if len(r.EventTypes) > 0 && !slices.Contains(r.EventTypes, row.EventType) {
		return false
	}
	if len(r.AggregateTypes) > 0 && !slices.Contains(r.AggregateTypes, row.AggregateType) {
		return false
	}
	if r.Column >= 0 {
		if r.Column >= len(row.Extra) || row.Extra[r.Column] == nil || !slices.Contains(r.Values, *row.Extra[r.Column]) {
			return false
		}
	}
	return true
}

// target is where a row goes: the source's sink (index 0) or a route's.
type target struct {
	name     string
	sink     sink.Publisher
	route    *Route // nil for the source's own sink
	maxBytes int
	topic    string // the topic template of its rows
	sinkName string
	schema   Validator // nil: payloads are not checked
}

func newTargets(o Options) []target {
	ts := []target{{name: "default", sink: o.Sink, maxBytes: o.Sink.MaxMessageBytes(), topic: o.Topic, sinkName: o.SinkName,
		schema: o.Schema}}
	for i := range o.Routes {
		r := &o.Routes[i]
		topic := o.Topic
		if r.Topic >= 0 {
			topic = r.TopicTemplate
		}
		ts = append(ts, target{name: r.Name, sink: r.Sink, route: r, maxBytes: r.Sink.MaxMessageBytes(), topic: topic,
			sinkName: r.SinkName, schema: r.Schema})
	}
	return ts
}

// routeRow picks the row's target: the first route it matches, else the
// source's sink. A route with its own topic renders it into the row, so that
// a dead letter records where the row was bound.
func (w *Worker) routeRow(row *source.Row) int {
	for i := 1; i < len(w.targets); i++ {
		r := w.targets[i].route
		if !r.match(row) {
			continue
		}
		if r.Topic >= 0 {
			row.Topic, row.TopicOK = "", false
			if r.Topic < len(row.Extra) && row.Extra[r.Topic] != nil && *row.Extra[r.Topic] != "" {
				row.Topic, row.TopicOK = *row.Extra[r.Topic], true
			}
		}
		return i
	}
	return 0
}

// publishTo publishes msgs, each to the sink of its target, and returns one
// result per message. Sinks are called concurrently; each keeps the order of
// the messages it is given.
func (w *Worker) publishTo(ctx context.Context, msgs []*sink.Message, tgt []int) []error {
	first := tgt[0]
	same := true
	for _, t := range tgt {
		if t != first {
			same = false
			break
		}
	}
	if same {
		return w.targets[first].sink.Publish(ctx, msgs)
	}
	groups := map[int][]int{}
	for j, t := range tgt {
		groups[t] = append(groups[t], j)
	}
	out := make([]error, len(msgs))
	var wg sync.WaitGroup
	for t, js := range groups {
		wg.Go(func() {
			part := make([]*sink.Message, len(js))
			for k, j := range js {
				part[k] = msgs[j]
			}
			res := w.targets[t].sink.Publish(ctx, part)
			for k, j := range js {
				out[j] = res[k]
			}
		})
	}
	wg.Wait()
	return out
}
