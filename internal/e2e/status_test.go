package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestStatus: `outbox-relay status` shows, from the relay's own tables,
// who relays each source, its backlog, rate, retries, dead letters and
// sinks, and exits non-zero once a source is stuck (here: no relay holds
// it while rows wait).
func TestStatus(t *testing.T) {
	t.Parallel()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed001)
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	brokers := c.ListenAddrs()
	insert := func(n int) {
		pgtest.Exec(t, pool, fmt.Sprintf(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload)
SELECT 'Order', gen_random_uuid(), 'order.placed', 'orders', '{}' FROM generate_series(1, %d)`, n))
	}
	insert(50)
	cfg := baseConfig(dsn, brokers, config.Source{Name: "shop", Table: "public.outbox", Preset: "status"})
	yaml := writeYAML(t, fmt.Sprintf(`databases:
  main: {dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
  - {name: shop, table: public.outbox, preset: status}
  - {name: never-run, table: public.outbox, preset: status}
`, dsn, brokers[0]))
	_, stop := runApp(t, cfg, app.WithStatsInterval(100*time.Millisecond))
	var st []app.SourceStatus
	waitFor(t, 20*time.Second, "status to show the source relayed", func() (bool, string) {
		out, _ := runCLI(t, "--config", yaml, "status", "--json")
		st = nil
		if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 2 {
			return false, out
		}
		s := st[0]
		return s.Source == "shop" && s.Held && s.Owner != "" && s.Term >= 1 && s.Pending == 0 && s.EventsPerSecond > 0 &&
			s.LastClaim != nil && s.Sinks["kafka"] == "ok" && s.Stuck == "", out
	})
	if st[1].Source != "never-run" || st[1].Stuck != "no relay has recorded it yet" {
		t.Errorf("a source no relay ran: %+v", st[1])
	}
	out, err := runCLI(t, "--config", yaml, "status")
	if err == nil || !strings.Contains(err.Error(), "1 source(s) stuck") {
		t.Errorf("status with a source never run: %v", err)
	}
	for _, want := range []string{"SOURCE", "LAST CLAIM", "kafka=ok", "STUCK: no relay has recorded it yet"} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}

	// The relay stops; rows keep coming: nobody holds the source.
	stop()
	insert(5)
	ok := writeYAML(t, fmt.Sprintf(`databases:
  main: {dsn: %q}
sinks:
  kafka: {type: kafka, brokers: [%q]}
sources:
  - {name: shop, table: public.outbox, preset: status}
`, dsn, brokers[0]))
	out, err = runCLI(t, "--config", ok, "status")
	if err == nil || !strings.Contains(out, "STUCK: no relay holds it") {
		t.Errorf("status once no relay holds the source: %v\n%s", err, out)
	}
}

// TestStatusOnMariaDB: the same status from a MariaDB source.
func TestStatusOnMariaDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name, dsn := mytest.NewDatabase(t, "e2e_status")
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	cfg := mysqlConfig(t, dsn, c.ListenAddrs(), config.Source{Name: "kafka-outbox", Table: name + ".kafka_outbox", Preset: "kafka-outbox"})
	runApp(t, cfg, app.WithStatsInterval(100*time.Millisecond))
	db := openMySQL(t, dsn)
	waitFor(t, 20*time.Second, "the relay's table", func() (bool, string) {
		_, err := db.ExecContext(ctx, "INSERT INTO kafka_outbox (topic, payload_json) VALUES ('orders', '{}')")
		return err == nil, fmt.Sprint(err)
	})
	reader, err := app.Open(ctx, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	waitFor(t, 20*time.Second, "status to show the source relayed", func() (bool, string) {
		st, err := reader.Status(ctx)
		if err != nil || len(st) != 1 {
			return false, fmt.Sprint(st, err)
		}
		s := st[0]
		return s.Held && s.Owner != "" && s.Term >= 1 && s.EventsPerSecond > 0 && s.LastClaim != nil &&
			time.Since(*s.LastClaim) < time.Minute && s.Sinks["kafka"] == "ok" && s.Stuck == "", fmt.Sprintf("%+v", s)
	})
}
