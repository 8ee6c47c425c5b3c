package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	eventledger "github.com/outbox-relay/outbox-relay/internal/ledger"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/internal/sink/webhook"
)

// TestStalledSinkHoldsOnlyItsRows guards the sink breaker: a webhook that
// accepts requests and never answers must not hold the rows of the
// source's Kafka sink. The stalled call passes its deadline, the circuit
// opens, and the webhook's rows stay pending with their keys held, charged
// no attempt and never dead-lettered, until the webhook answers again; then
// they arrive in per-key order.
func TestStalledSinkHoldsOnlyItsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, `CREATE TABLE outbox (
  id BIGSERIAL PRIMARY KEY, aggregate_type TEXT NOT NULL, aggregate_id TEXT NOT NULL, event_type TEXT NOT NULL,
  payload JSONB NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  published BOOLEAN NOT NULL DEFAULT false, published_at TIMESTAMPTZ)`)

	// The webhook stalls until stalled is cleared: it reads the request
	// and answers nothing until the request is abandoned.
	var stalled atomic.Bool
	stalled.Store(true)
	var mu sync.Mutex
	var hooked []struct {
		K string
		N int
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if stalled.Load() {
			<-r.Context().Done()
			return
		}
		var p struct {
			K string
			N int
		}
		if err := json.Unmarshal(body, &p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		hooked = append(hooked, p)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)

	const kafkaRows, hookRows = 160, 40
	insert := func(typ, key string, n int) {
		if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
VALUES ('Order', $1, $2, jsonb_build_object('k', $1::text, 'n', $3::int))`, key, typ, n); err != nil {
			t.Fatal(err)
		}
	}
	for i := range kafkaRows + hookRows {
		if i%5 == 4 {
			insert("hook.sent", fmt.Sprintf("h%d", i%4), i)
		} else {
			insert("order.created", fmt.Sprintf("k%d", i%20), i)
		}
	}

	c := kafkaCluster(t, kfake.SeedTopics(1, "order.created"))
	cfg := baseConfig(dsn, c.ListenAddrs(), config.Source{Name: "orders", Table: "public.outbox", Preset: "published-flag",
		BatchSize: 20, Pipeline: 2})
	cfg.Sinks["hook"] = config.Sink{Type: "webhook", Timeout: config.Duration(time.Second),
		Circuit: config.Circuit{Cooldown: config.Duration(200 * time.Millisecond), MaxCooldown: config.Duration(time.Second)},
		Blocks:  config.Blocks{"webhook": &webhook.Config{URL: srv.URL + "/hook", Timeout: time.Minute}}}
	cfg.Sources[0].Routes = []config.Route{{Name: "hook", EventTypes: []string{"hook.sent"}, Sink: "hook", Topic: "hook"}}
	cfg.ApplyDefaults()
	col := collect(t, c.ListenAddrs(), "order.created")
	start := time.Now()
	a, _ := runApp(t, cfg)

	// Every Kafka row arrives while the webhook stalls, each batch
	// waiting at most the stalled sink's batch_wait.
	waitFor(t, 15*time.Second, "the Kafka rows while the webhook stalls", func() (bool, string) {
		n := len(distinct(col.records()))
		return n == kafkaRows, fmt.Sprintf("%d of %d", n, kafkaRows)
	})
	t.Logf("%d Kafka rows in %v with the webhook stalled", kafkaRows, time.Since(start).Round(time.Millisecond))
	// The calls given up on after batch_wait reach their deadline, which
	// opens the circuit.
	waitFor(t, 10*time.Second, "the stalled webhook's circuit open", func() (bool, string) {
		s := circuitState(t, a, "hook")
		return s != 0, fmt.Sprint("state ", s)
	})
	dead, charged := deadAndCharged(t, pool)
	if dead != 0 || charged != 0 {
		t.Errorf("while the webhook stalled: %d dead letters, %d rows charged an attempt; want none: %s", dead, charged, whyCharged(pool))
	}

	// The webhook answers again: its rows arrive, in order per key.
	stalled.Store(false)
	waitFor(t, 30*time.Second, "the webhook's rows once it answers", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(hooked) >= hookRows, fmt.Sprintf("%d of %d", len(hooked), hookRows)
	})
	mu.Lock()
	defer mu.Unlock()
	last := map[string]int{}
	seen := map[int]bool{}
	for _, p := range hooked {
		if seen[p.N] {
			continue // a duplicate of an abandoned call is allowed
		}
		seen[p.N] = true
		if p.N < last[p.K] {
			t.Errorf("key %s: row %d arrived after row %d", p.K, p.N, last[p.K])
		}
		last[p.K] = p.N
	}
	if len(seen) != hookRows {
		t.Errorf("%d distinct webhook rows, want %d", len(seen), hookRows)
	}
	waitFor(t, 10*time.Second, "the circuit closed", func() (bool, string) {
		s := circuitState(t, a, "hook")
		return s == 0, fmt.Sprint("state ", s)
	})
}

// circuitState reads the sink's circuit gauge.
// deadAndCharged counts the dead letters, and the rows charged an attempt
// that are still pending.
func deadAndCharged(t *testing.T, pool *pgxpool.Pool) (dead, charged int) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM outbox_relay.failed_events),
  (SELECT count(*) FROM outbox_relay.retry_state WHERE attempts > 0)`).Scan(&dead, &charged); err != nil {
		t.Fatal(err)
	}
	return dead, charged
}

// whyCharged is, for a failure message, each dead letter's and charged
// row's event id with its reason.
func whyCharged(pool *pgxpool.Pool) string {
	rows, err := pool.Query(context.Background(), `SELECT event_id || ': ' || last_error FROM outbox_relay.retry_state WHERE attempts > 0
UNION ALL SELECT original_event_id || ': ' || failure_reason FROM outbox_relay.failed_events`)
	if err != nil {
		return err.Error()
	}
	why, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	return strings.Join(why, "; ")
}

func circuitState(t *testing.T, a *app.App, sinkName string) float64 {
	t.Helper()
	return gathered(t, a, "outbox_relay_sink_circuit_state", "sink", sinkName)
}

// TestSinkDownChargesNoAttempt guards the classification of a sink that is
// down: a RabbitMQ sink whose every connection is closed at once (the
// server is not there) is tried again and again, its circuit opening and
// probing, and its rows are neither charged an attempt nor dead-lettered,
// even with a budget of two attempts; once the server answers they all
// arrive, in order per key. (Connection failures used to be charged like a
// message's own failure: a long outage dead-lettered the head of every
// key.)
func TestSinkDownChargesNoAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	rabbit := newRabbitQueue(t, "down")
	door := newBlackHole(t, strings.TrimSuffix(strings.TrimPrefix(rabbit.url, "amqp://guest:guest@"), "/"))
	door.slamming.Store(true)
	c := kafkaCluster(t, kfake.SeedTopics(1, "orders"))
	src := chaosSource(20, 2)
	src.MaxAttempts = 2
	src.Backoff = config.Backoff{Initial: config.Duration(20 * time.Millisecond), Max: config.Duration(50 * time.Millisecond)}
	src.Routes = []config.Route{{Name: "rabbit", Column: "topic", Values: []string{"down.events"}, Sink: "rabbit"}}
	cfg := baseConfig(dsn, c.ListenAddrs(), src)
	cfg.Sinks["rabbit"] = config.Sink{Type: "rabbitmq", Timeout: config.Duration(2 * time.Second),
		Circuit: config.Circuit{Failures: 2, Cooldown: config.Duration(20 * time.Millisecond), MaxCooldown: config.Duration(50 * time.Millisecond)},
		Blocks:  config.Blocks{"rabbitmq": &rabbitmq.Config{URL: "amqp://guest:guest@" + door.addr() + "/", Exchange: rabbit.exchange}}}
	cfg.ApplyDefaults()
	l := eventledger.New()
	fillChaos(t, pool, l, "down.events", "r", 40, 4, 0)
	runApp(t, cfg)
	// Enough tries for every row to have spent its budget of two many
	// times over, were the failures charged.
	waitFor(t, 30*time.Second, "the relay trying the down server", func() (bool, string) {
		n := door.slammed.Load()
		return n >= 30, fmt.Sprint(n, " connections")
	})
	dead, charged := deadAndCharged(t, pool)
	if dead != 0 || charged != 0 {
		t.Fatalf("while RabbitMQ was down: %d dead letters, %d rows charged an attempt; want none: %s", dead, charged, whyCharged(pool))
	}
	door.slamming.Store(false)
	waitFor(t, 30*time.Second, "every row delivered once RabbitMQ is there", func() (bool, string) {
		var pending int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE NOT published").Scan(&pending)
		return pending == 0, fmt.Sprint(pending, " pending")
	})
	for _, d := range rabbit.read(t) {
		l.Deliver(d.id)
	}
	if rep := l.Check(nil); !rep.OK() {
		t.Error(rep)
	}
}
