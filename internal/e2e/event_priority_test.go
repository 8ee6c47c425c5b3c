package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestEventPriority: seed 002's table, verbatim and never analyzed, with a
// backlog of its three kinds of event mixed (kitchen tasks, event boards,
// scheduling) and a source that puts kitchen tasks first, then events
// (sources[].event_priority). The kitchen tasks drain first, with the
// earlier events of their aggregates (a shift assigned before its task is
// claimed goes with the claim, not after it); then the boards; then
// scheduling. Every aggregate's events arrive in the order they were
// written.
func TestEventPriority(t *testing.T) {
	t.Parallel()
	const aggregates, perAggregate, batch = 150, 10, 100
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed002)
	// Aggregate a is a kitchen task (a % 3 = 0), a board (1) or a schedule
	// (2); one schedule in five turns into a kitchen task at its last
	// event. Events are written round-robin over the aggregates, each
	// with its place n in the backlog and i in its aggregate.
	pgtest.Exec(t, pool, fmt.Sprintf(`INSERT INTO tenant."OutboxEvent" ("id", "tenantId", "eventType", "aggregateType", "aggregateId", "payload", "createdAt")
SELECT 'ev' || lpad(n::text, 6, '0'), 'acme',
  CASE WHEN a %% 3 = 0 OR (a %% 15 = 2 AND i = %[2]d - 1) THEN 'kitchen.task.progress'
       WHEN a %% 3 = 1 THEN 'event.board.card.moved' ELSE 'scheduling.shift.assigned' END,
  'Aggregate', 'agg-' || a, json_build_object('n', n, 'i', i), timestamp '2026-01-30 12:00' + n * interval '1 millisecond'
FROM generate_series(0, %[1]d - 1) a, generate_series(0, %[2]d - 1) i, LATERAL (SELECT i * %[1]d + a AS n) x`, aggregates, perAggregate))

	c := kafkaCluster(t, kfake.SeedTopics(1, "kitchen"))
	col := collect(t, c.ListenAddrs(), "kitchen")
	cfg := baseConfig(dsn, c.ListenAddrs(), config.Source{Name: "kitchen", Table: `tenant."OutboxEvent"`, Preset: "prisma", Topic: "kitchen",
		BatchSize: batch, Pipeline: 2, EventPriority: &config.EventPriority{Classes: []string{"kitchen.task.*", "event.*"}, Lookahead: aggregates * perAggregate}})
	runRelay(t, cfg)
	total := aggregates * perAggregate
	recs := col.waitDistinct(t, total, 60*time.Second)

	// class is the class an event is claimed by: the best of its
	// aggregate's events from it on (0 kitchen, 1 board, 2 scheduling).
	classOf := func(a, i int) int {
		switch {
		case a%3 == 0 || (a%15 == 2): // the schedule that turns into a task does at its last event
			return 0
		case a%3 == 1:
			return 1
		}
		return 2
	}
	count := [3]int{}
	for a := range aggregates {
		for i := range perAggregate {
			count[classOf(a, i)]++
		}
	}
	// The events of each class arrive before those of the next, but for
	// the batches in flight where one class's backlog ends (two batches).
	seen := map[string]bool{}
	last := map[string]int{}
	place := 0
	var late []string
	for _, r := range recs {
		var p struct{ N, I int }
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Fatalf("payload %s: %v", r.Value, err)
		}
		id := string(r.Key) + "/" + fmt.Sprint(p.I)
		if seen[id] {
			continue
		}
		seen[id] = true
		a := p.N % aggregates
		if prev, ok := last[string(r.Key)]; ok && p.I < prev {
			t.Errorf("aggregate %s: event %d arrived after event %d", r.Key, p.I, prev)
		}
		last[string(r.Key)] = p.I
		cls := classOf(a, p.I)
		end := count[0]
		if cls >= 1 {
			end += count[1]
		}
		if cls <= 1 && place >= end+2*batch {
			late = append(late, fmt.Sprintf("%s (class %d) arrived %dth", id, cls, place))
		}
		place++
	}
	if len(late) > 0 {
		t.Errorf("%d events arrived after the events of less urgent classes had begun: %s", len(late), strings.Join(late[:min(len(late), 5)], "; "))
	}
	t.Logf("%d events: %d kitchen tasks (with their aggregates' earlier events), %d boards, %d scheduling", total, count[0], count[1], count[2])
	waitFor(t, 10*time.Second, "every event marked published", func() (bool, string) {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM tenant."OutboxEvent" WHERE "status" <> 'published'`).Scan(&n)
		return err == nil && n == 0, fmt.Sprintf("%d not published (%v)", n, err)
	})
}
