package relay

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

func benchRow(headers string) source.Row {
	return source.Row{
		ID: "0190b6f4-1a2b-7c3d-8e4f-5a6b7c8d9e0f", Topic: "orders", TopicOK: true,
		Key: []byte("order-4711"), OrderKey: "order-4711",
		Payload:   []byte(`{"seq":1,"key":"order-4711","pad":"` + strings.Repeat("x", 160) + `"}`),
		Headers:   []byte(headers),
		EventType: "order.created", AggregateType: "order", AggregateID: "order-4711",
	}
}

// BenchmarkBuildMessage is the per-row work between the claim and the sink.
func BenchmarkBuildMessage(b *testing.B) {
	for _, c := range []struct {
		name, headers string
		validate      bool
	}{
		{"jsonb", "", false},
		{"text-validated", "", true},
		{"with-headers", `{"traceId":"4bf92f3577b34da6","source":"svc","attempt":2}`, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := benchRow(c.headers)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := buildMessage(&r, "bench", c.validate, &target{topic: "{topic}", maxBytes: 1_000_000}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
