package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	eventledger "github.com/outbox-relay/outbox-relay/internal/ledger"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/sink/mqtt"
	"github.com/outbox-relay/outbox-relay/internal/sink/nats"
	"github.com/outbox-relay/outbox-relay/internal/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/internal/sink/redis"
	"github.com/outbox-relay/outbox-relay/internal/sink/webhook"
)

// TestChaosSinkBlackHoleHoldsNoBatch guards a batch against being hostage
// to one sink, with default settings (sink timeouts, batch_wait, batch
// size, pipeline, polling): one source routes its rows to five sinks (NATS,
// RabbitMQ, Redis, MQTT, a webhook) while RabbitMQ's connection holds every
// byte (no reset, no answer; new connections held alike) for 3 s (30 s at
// full size). The four others deliver every row inserted meanwhile within a
// second of its insert (p99); RabbitMQ's rows wait, charged no attempt, and
// arrive in key order once the connection passes bytes again; nothing is
// lost. Rows of keys that go first to RabbitMQ, then to Redis, show that a
// key's row on a healthy sink waits for its earlier row on the stalled one.
func TestChaosSinkBlackHoleHoldsNoBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL, NATS, RabbitMQ, Redis and Mosquitto (-short)")
	}
	t.Parallel()
	ctx := context.Background()
	hole := 3 * time.Second
	if chaosFull() {
		hole = 30 * time.Second
	}
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, chaosTable)
	stream := newNATSStream(t)
	rabbit := newRabbitQueue(t, "bh")
	rstream := newRedisStream(t)
	mqttSub := newMQTTSubscriber(t)
	hooks := newWebhookReceiver(t)
	door := newBlackHole(t, strings.TrimSuffix(strings.TrimPrefix(rabbit.url, "amqp://guest:guest@"), "/"))

	// Each sink's rows carry its name as their topic column; a route per
	// sink sends them there. Nothing is tuned: only what names the
	// destinations is set.
	type target struct {
		name, topic string
		read        func(*testing.T) []arrival
	}
	targets := []target{
		{"nats", stream.prefix + ".bh", stream.read},
		{"rabbit", "bh.events", rabbit.read},
		{"redis", rstream.key, rstream.read},
		{"mqtt", mqttSub.prefix + "/bh", mqttSub.read},
		{"hook", "bh", hooks.read},
	}
	kc := kafkaCluster(t, kfake.SeedTopics(1, "unused"))
	src := chaosSource(0, 0)
	src.Sink = "kafka"
	src.Poll = config.Poll{Min: config.Duration(config.DefaultPollMin), Max: config.Duration(config.DefaultPollMax)}
	cfg := baseConfig(dsn, kc.ListenAddrs())
	cfg.Sinks["nats"] = config.Sink{Type: "nats", Blocks: config.Blocks{"nats": &nats.Config{URL: stream.url}}}
	cfg.Sinks["rabbit"] = config.Sink{Type: "rabbitmq", Blocks: config.Blocks{"rabbitmq": &rabbitmq.Config{
		URL: "amqp://guest:guest@" + door.addr() + "/", Exchange: rabbit.exchange}}}
	cfg.Sinks["redis"] = config.Sink{Type: "redis", Blocks: config.Blocks{"redis": &redis.Config{URL: rstream.url}}}
	cfg.Sinks["mqtt"] = config.Sink{Type: "mqtt", Blocks: config.Blocks{"mqtt": &mqtt.Config{URL: mqttSub.url}}}
	cfg.Sinks["hook"] = config.Sink{Type: "webhook", Blocks: config.Blocks{"webhook": &webhook.Config{URL: hooks.srv.URL + "/hooks/{destination}"}}}
	for _, tg := range targets {
		src.Routes = append(src.Routes, config.Route{Name: tg.name, Column: "topic", Values: []string{tg.topic}, Sink: tg.name})
	}
	cfg.Sources = []config.Source{src}
	cfg.ApplyDefaults()
	if s := cfg.Sources[0]; s.BatchSize != config.DefaultBatchSize || s.Pipeline != config.DefaultPipeline {
		t.Fatalf("batch size %d, pipeline %d: the scenario runs with the defaults", s.BatchSize, s.Pipeline)
	}

	l := eventledger.New()
	type row struct {
		id, key, sink string
		at            time.Time
	}
	var rows []row
	insert := func(sink int, key string) row {
		t.Helper()
		r := row{key: key, sink: targets[sink].name}
		if err := pool.QueryRow(ctx, `INSERT INTO outbox (k, topic, payload) VALUES ($1, $2, jsonb_build_object('n', $3::int))
RETURNING id::text, created_at`, key, targets[sink].topic, len(rows)).Scan(&r.id, &r.at); err != nil {
			t.Fatal(err)
		}
		l.Commit(r.id, key)
		rows = append(rows, r)
		return r
	}
	arrived := func(tg target) map[string]arrival {
		out := map[string]arrival{}
		for _, a := range tg.read(t) {
			if _, ok := out[a.id]; !ok {
				out[a.id] = a // the first copy
			}
		}
		return out
	}
	runApp(t, cfg)

	// Every sink works first (each connects), then RabbitMQ's connection
	// holds every byte.
	for i := range targets {
		insert(i, fmt.Sprintf("%s-warm", targets[i].name))
	}
	for _, tg := range targets {
		waitFor(t, 20*time.Second, tg.name+" working before the black hole", func() (bool, string) {
			n := len(arrived(tg))
			return n == 1, fmt.Sprint(n, " arrived")
		})
	}
	warm := len(rows)
	door.swallow()
	start := time.Now()
	// Rows for every sink meanwhile, in turn, at a producer's pace, over
	// four keys per sink; and now and then a key whose first row goes to
	// RabbitMQ and its next to Redis.
	var crossed []row
	tick := time.NewTicker(30 * time.Millisecond)
	for i := 0; time.Since(start) < hole; i++ {
		<-tick.C
		if i%25 == 0 {
			k := fmt.Sprintf("x%d", i/25)
			insert(1, k)
			crossed = append(crossed, insert(2, k))
			continue
		}
		s := i % len(targets)
		insert(s, fmt.Sprintf("%s%d", targets[s].name, (i/len(targets))%4))
	}
	tick.Stop()
	during := rows[warm:]

	// The healthy sinks' rows of their own keys: each arrives within the
	// hole's time, not held for it.
	var lat []time.Duration
	for _, tg := range targets {
		if tg.name == "rabbit" {
			continue
		}
		var want []row
		for _, r := range during {
			if r.sink == tg.name && !strings.HasPrefix(r.key, "x") {
				want = append(want, r)
			}
		}
		var got map[string]arrival
		waitFor(t, 20*time.Second, tg.name+"'s rows while RabbitMQ is black-holed", func() (bool, string) {
			got = arrived(tg)
			n := 0
			for _, r := range want {
				if _, ok := got[r.id]; ok {
					n++
				}
			}
			return n == len(want), fmt.Sprintf("%d of %d", n, len(want))
		})
		for _, r := range want {
			lat = append(lat, got[r.id].at.Sub(r.at))
		}
	}
	slices.Sort(lat)
	p := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	t.Logf("black hole of %v, defaults: %d rows to four healthy sinks, latency p50 %v p99 %v max %v",
		hole, len(lat), p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	if p(0.99) > time.Second {
		t.Errorf("healthy sinks' p99 %v while RabbitMQ is black-holed, want at most 1s", p(0.99))
	}
	// Still in the hole: no row of a key whose earlier row waits on
	// RabbitMQ has gone to Redis, and nothing is charged or dead.
	redisGot := arrived(targets[2])
	for _, r := range crossed {
		if _, ok := redisGot[r.id]; ok {
			t.Errorf("key %s: its Redis row arrived while its earlier RabbitMQ row waited in the black hole", r.key)
		}
	}
	if dead, charged := deadAndCharged(t, pool); dead != 0 || charged != 0 {
		t.Errorf("while RabbitMQ was black-holed: %d dead letters, %d rows charged an attempt; want none: %s", dead, charged, whyCharged(pool))
	}

	door.release()
	waitFor(t, 60*time.Second, "every row delivered once RabbitMQ passes bytes", func() (bool, string) {
		var pending int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE NOT published").Scan(&pending); err != nil {
			return false, err.Error()
		}
		return pending == 0, fmt.Sprint(pending, " pending")
	})
	// Each sink's consumer in the order it read; RabbitMQ's first, so that
	// a crossed key's RabbitMQ row counts before its Redis row.
	var rabbitRows, copies int
	for _, i := range []int{1, 0, 2, 3, 4} {
		tg := targets[i]
		var all []arrival
		waitFor(t, 20*time.Second, tg.name+"'s consumer to see every row", func() (bool, string) {
			all = tg.read(t)
			n := len(arrived(tg))
			want := 0
			for _, r := range rows {
				if r.sink == tg.name {
					want++
				}
			}
			return n >= want, fmt.Sprintf("%d of %d", n, want)
		})
		for _, a := range all {
			l.Deliver(a.id)
		}
		if tg.name == "rabbit" {
			rabbitRows, copies = len(arrived(tg)), len(all)-len(arrived(tg))
		}
	}
	rep := l.Check(nil)
	t.Logf("after the black hole: %d RabbitMQ rows (%d copies), %d rows of crossed keys: %s", rabbitRows, copies, len(crossed), rep)
	if !rep.OK() {
		t.Error(rep)
	}
}
