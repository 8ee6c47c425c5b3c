package relay

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

func str(s string) *string { return &s }

func TestRouteMatch(t *testing.T) {
	row := source.Row{EventType: "payment.captured", AggregateType: "Payment", Extra: []*string{str("eu"), nil}}
	cases := []struct {
		name string
		r    Route
		want bool
	}{
		{"event type in list", Route{EventTypes: []string{"a", "payment.captured"}, Column: -1}, true},
		{"event type not in list", Route{EventTypes: []string{"a"}, Column: -1}, false},
		{"aggregate type", Route{AggregateTypes: []string{"Payment"}, Column: -1}, true},
		{"all conditions must hold", Route{EventTypes: []string{"payment.captured"}, AggregateTypes: []string{"Order"}, Column: -1}, false},
		{"column value", Route{Column: 0, Values: []string{"uk", "eu"}}, true},
		{"column other value", Route{Column: 0, Values: []string{"uk"}}, false},
		{"NULL column matches nothing", Route{Column: 1, Values: []string{""}}, false},
		{"column beyond the row", Route{Column: 5, Values: []string{"eu"}}, false},
	}
	for _, c := range cases {
		if got := c.r.match(&row); got != c.want {
			t.Errorf("%s: match = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRouteRowTopic(t *testing.T) {
	w := &Worker{targets: []target{{name: "default"},
		{name: "eu", route: &Route{Column: 0, Values: []string{"eu"}, Topic: 1}},
		{name: "rest", route: &Route{EventTypes: []string{"x"}, Column: -1, Topic: -1}}}}
	row := source.Row{Topic: "orders", TopicOK: true, EventType: "x", Extra: []*string{str("eu"), str("eu.orders")}}
	if got := w.routeRow(&row); got != 1 || row.Topic != "eu.orders" || !row.TopicOK {
		t.Fatalf("routeRow = %d, topic %q %v; want route 1 with its topic", got, row.Topic, row.TopicOK)
	}
	row = source.Row{Topic: "orders", TopicOK: true, EventType: "x", Extra: []*string{str("eu"), nil}}
	if got := w.routeRow(&row); got != 1 || row.TopicOK {
		t.Fatalf("a NULL route topic must leave the row without a topic (dead-lettered), got %d %q %v", got, row.Topic, row.TopicOK)
	}
	row = source.Row{Topic: "orders", TopicOK: true, EventType: "x", Extra: []*string{str("us"), nil}}
	if got := w.routeRow(&row); got != 2 || row.Topic != "orders" {
		t.Fatalf("routeRow = %d topic %q, want route 2 keeping the row's topic", got, row.Topic)
	}
	row = source.Row{Topic: "orders", TopicOK: true, EventType: "y", Extra: []*string{nil, nil}}
	if got := w.routeRow(&row); got != 0 {
		t.Fatalf("routeRow = %d, want the source's sink", got)
	}
}
