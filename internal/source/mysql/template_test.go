package mysql_test

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// TestTemplateEmptyPartAndFallback: an empty or NULL column makes its
// template missing, and "{a|b}" falls back to b.
func TestTemplateEmptyPartAndFallback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE billing_events (id BIGINT AUTO_INCREMENT PRIMARY KEY, entity VARCHAR(20), aggregate_id VARCHAR(20) NOT NULL, partition_key VARCHAR(20), payload JSON NOT NULL)",
		`INSERT INTO billing_events (entity, aggregate_id, partition_key, payload) VALUES
  ('invoice', 'a1', 'p1', '{}'), ('invoice', 'a2', NULL, '{}'), ('invoice', 'a3', '', '{}'), ('', 'a4', 'p4', '{}'), (NULL, 'a5', 'p5', '{}')`)
	st, _ := e.store(t, e.db, "billing", "billing_events", "", layout.Spec{
		ID: "id", Payload: "payload", Topic: "billing.{entity}", Key: "{partition_key|aggregate_id}", State: layout.State{Mode: "delete"},
	}, true)
	b, err := st.Claim(ctx, 10)
	if err != nil || b == nil || len(b.Rows()) != 5 {
		t.Fatalf("claim: %v %v", b, err)
	}
	defer func() { _ = b.Release(ctx) }()
	want := []struct {
		topic   string
		topicOK bool
		key     string
	}{{"billing.invoice", true, "p1"}, {"billing.invoice", true, "a2"}, {"billing.invoice", true, "a3"}, {"", false, "p4"}, {"", false, "p5"}}
	for i, r := range b.Rows() {
		if r.TopicOK != want[i].topicOK || (r.TopicOK && r.Topic != want[i].topic) || string(r.Key) != want[i].key {
			t.Errorf("row %d: topic %q (%v), key %q; want %q (%v), key %q", i, r.Topic, r.TopicOK, r.Key, want[i].topic, want[i].topicOK, want[i].key)
		}
	}
}
