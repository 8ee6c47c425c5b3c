package e2e

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// Seed 004: the relay creates kafka_outbox itself, then publishes its rows:
// topic and key columns, partition by partition_key else key, JSON headers
// from payload_headers; bad rows end errored with a readable reason while
// the rest flows; claims the original relay left behind are taken back once
// older than the claim timeout.
func TestSeed004KafkaOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	c := kafkaCluster(t, kfake.SeedTopics(3, "orders", "payments"))
	brokers := c.ListenAddrs()
	const claimTimeout = 3 * time.Second
	src := config.Source{Name: "kafka-outbox", Table: "public.kafka_outbox", Preset: "kafka-outbox",
		ClaimTimeout: config.Duration(claimTimeout)}
	cfg := baseConfig(dsn, brokers, src)
	if m := cfg.Sources[0].ManageTable; m == nil || !*m {
		t.Fatalf("manage_table defaults to %v for preset kafka-outbox, want true", m)
	}
	col := collect(t, brokers, "orders", "payments")
	runRelay(t, cfg) // migrates: the table is the relay's to create

	type row struct {
		topic, key, pkey, payload, headers string
		claimedAgo                         string // an interval: claimed by the original relay that long ago
	}
	insert := func(r row) string {
		t.Helper()
		var id string
		err := pool.QueryRow(ctx, `INSERT INTO kafka_outbox (topic, key, partition_key, payload_json, payload_headers, batch_id, push_started_at)
VALUES ($1, $2, $3, $4, $5, CASE WHEN $6 <> '' THEN 'batch-of-the-original-relay' END, CASE WHEN $6 <> '' THEN now() - $6::interval END)
RETURNING id::text`, r.topic, r.key, r.pkey, r.payload, r.headers, r.claimedAgo).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	good := []row{
		{topic: "orders", key: "customer-1", payload: `{"order": 1}`, headers: `{"trace_id": "t-1", "attempt": 2}`},
		{topic: "orders", key: "customer-2", pkey: "region-eu", payload: `{"order": 2, "name": "Café"}`},
		{topic: "payments", payload: `{"payment": 3}`},
		{topic: "orders", key: "customer-3", payload: `{"order": 4}`, claimedAgo: "1 hour"},
	}
	bad := []struct {
		row
		reason string
	}{
		{row{topic: "orders", key: "customer-9", payload: `{"order": `}, "invalid payload: not valid JSON"},
		{row{topic: "", key: "customer-9", payload: `{"order": 6}`}, "missing topic"},
		{row{topic: "orders", key: "customer-9", payload: `{"order": 7}`, headers: `["not", "an", "object"]`}, "invalid headers: not a JSON object"},
	}
	var goodIDs, badIDs []string
	for _, r := range good[:2] {
		goodIDs = append(goodIDs, insert(r))
	}
	for _, b := range bad {
		badIDs = append(badIDs, insert(b.row))
	}
	for _, r := range good[2:] {
		goodIDs = append(goodIDs, insert(r))
	}
	// Claimed by the original relay just now: taken back after the timeout.
	live := insert(row{topic: "orders", key: "customer-4", payload: `{"order": 8}`, claimedAgo: "0 seconds"})
	// The key of the bad rows flows on after them.
	after := insert(row{topic: "orders", key: "customer-9", payload: `{"order": 9}`})
	goodIDs = append(goodIDs, live, after)

	got := distinct(col.waitDistinct(t, len(goodIDs), 30*time.Second))
	for i, r := range good {
		rec := got[goodIDs[i]]
		if rec == nil {
			t.Fatalf("row %s (%+v) not published", goodIDs[i], r)
		}
		if rec.Topic != r.topic || !jsonEqual(t, rec.Value, []byte(r.payload)) {
			t.Errorf("row %d: topic %q value %s", i, rec.Topic, rec.Value)
		}
		switch {
		case r.key == "" && rec.Key != nil:
			t.Errorf("row %d: empty key published as %q, want no key", i, rec.Key)
		case r.key != "" && string(rec.Key) != r.key:
			t.Errorf("row %d: key %q, want %q", i, rec.Key, r.key)
		}
		if pk := cmp.Or(r.pkey, r.key); pk != "" && rec.Partition != javaPartition([]byte(pk), 3) {
			t.Errorf("row %d: partition %d, want %d (partition key %q)", i, rec.Partition, javaPartition([]byte(pk), 3), pk)
		}
	}
	first := got[goodIDs[0]]
	for k, want := range map[string]string{"trace_id": "t-1", "attempt": "2", "event_id": goodIDs[0], "outbox_source": "kafka-outbox"} {
		if v, _ := header(first, k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	if _, ok := header(got[goodIDs[1]], "trace_id"); ok {
		t.Error("a row with no payload_headers got the headers of another")
	}
	for _, id := range []string{live, after} {
		if got[id] == nil {
			t.Fatalf("row %s not published", id)
		}
	}

	// Delivered rows record the claim as the original relay does.
	waitFor(t, 10*time.Second, "rows marked delivered", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM kafka_outbox WHERE push_completed_at IS NOT NULL AND errored = 0
  AND batch_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' AND push_started_at <= push_completed_at`).Scan(&n)
		return n == len(goodIDs), fmt.Sprintf("%d/%d", n, len(goodIDs))
	})
	// The live claim of the original relay was respected for claim_timeout.
	var waitedMS int64
	if err := pool.QueryRow(ctx, `SELECT (EXTRACT(EPOCH FROM push_started_at - created_at) * 1000)::bigint
FROM kafka_outbox WHERE id = $1::bigint`, live).Scan(&waitedMS); err != nil {
		t.Fatal(err)
	}
	waited := time.Duration(waitedMS) * time.Millisecond
	if waited < claimTimeout-200*time.Millisecond {
		t.Errorf("the original relay's live claim was taken back after %s, before the claim timeout %s", waited, claimTimeout)
	}

	// Bad rows: errored with a readable reason, in the dead-letter table.
	for i, b := range bad {
		var errored, attempts int
		var reason string
		var completed *time.Time
		if err := pool.QueryRow(ctx, `SELECT errored, error_reason, push_attempts, push_completed_at FROM kafka_outbox WHERE id = $1::bigint`,
			badIDs[i]).Scan(&errored, &reason, &attempts, &completed); err != nil {
			t.Fatal(err)
		}
		if errored != 1 || !strings.Contains(reason, b.reason) || completed != nil || attempts != 1 {
			t.Errorf("bad row %d: errored=%d error_reason=%q push_attempts=%d push_completed_at=%v; want errored with %q",
				i, errored, reason, attempts, completed, b.reason)
		}
		var dl string
		if err := pool.QueryRow(ctx, `SELECT failure_reason FROM outbox_relay.failed_events WHERE source = 'kafka-outbox' AND original_event_id = $1`,
			badIDs[i]).Scan(&dl); err != nil || !strings.Contains(dl, b.reason) {
			t.Errorf("bad row %d: dead letter %q, %v", i, dl, err)
		}
		if _, ok := got[badIDs[i]]; ok {
			t.Errorf("bad row %d was published", i)
		}
	}
}
