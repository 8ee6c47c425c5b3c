package e2e

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestPayloadColumnTypes: payloads leave as stored, whatever the column
// type: jsonb (as PostgreSQL renders it), json and text byte for byte, bytea
// raw (with payload_format raw, binary is fine).
func TestPayloadColumnTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	binary := []byte{0x00, 0xff, 0x10, 'h', 'i', 0x80}
	cases := []struct {
		typ, format string
		in          any
		want        []byte
	}{
		{"jsonb", "json", `{"b": 2, "a": [1, 2]}`, []byte(`{"a": [1, 2], "b": 2}`)},
		{"json", "json", `{"b":2,  "a":1}`, []byte(`{"b":2,  "a":1}`)},
		{"text", "json", `{"text": "Café Müller"}`, []byte(`{"text": "Café Müller"}`)},
		{"bytea", "raw", binary, binary},
	}
	var sources []config.Source
	var topics []string
	for _, c := range cases {
		pgtest.Exec(t, pool, fmt.Sprintf(`CREATE TABLE p_%[1]s (id BIGSERIAL PRIMARY KEY, payload %[1]s NOT NULL, published_at TIMESTAMPTZ)`, c.typ))
		if _, err := pool.Exec(ctx, fmt.Sprintf("INSERT INTO p_%s (payload) VALUES ($1)", c.typ), c.in); err != nil {
			t.Fatal(err)
		}
		topics = append(topics, "t_"+c.typ)
		sources = append(sources, config.Source{
			Name: c.typ, Table: "public.p_" + c.typ, Topic: "t_" + c.typ,
			Layout: layout.Spec{ID: "id", Payload: "payload", PayloadFormat: c.format,
				State: layout.State{Mode: "timestamp", PublishedAt: []string{"published_at"}}},
		})
	}
	cl := kafkaCluster(t, kfake.SeedTopics(1, topics...))
	col := collect(t, cl.ListenAddrs(), topics...)
	runRelay(t, baseConfig(dsn, cl.ListenAddrs(), sources...))
	var recs []*kgo.Record
	waitFor(t, 30*time.Second, "one record per type", func() (bool, string) {
		recs = col.records()
		return len(recs) >= len(cases), fmt.Sprintf("%d", len(recs))
	})
	for _, c := range cases {
		found := false
		for _, r := range recs {
			if r.Topic == "t_"+c.typ {
				found = true
				if !bytes.Equal(r.Value, c.want) {
					t.Errorf("%s: got %q, want %q", c.typ, r.Value, c.want)
				}
			}
		}
		if !found {
			t.Errorf("%s: nothing arrived", c.typ)
		}
	}
}
