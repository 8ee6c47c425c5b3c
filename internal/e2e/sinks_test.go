package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// sentEvent is one outbox row as written.
type sentEvent struct {
	id      string
	key     string // aggregate_id, the message key
	typ     string
	seq     int
	trace   string
	payload []byte
}

// sinkUnderTest is one sink of TestEverySink: the event type routed to it,
// how its consumer reads it back, and where each event should land.
type sinkUnderTest struct {
	name    string
	typ     string
	read    func(*testing.T) []arrival
	dest    func(sentEvent) string
	sent    []sentEvent
	arrived []arrival
}

// TestEverySink relays one PostgreSQL outbox (seed 000's published-flag
// table, with a headers column added) through the real relay to one sink of
// each type, routed by event type: NATS JetStream, RabbitMQ, Redis Streams,
// MQTT, a webhook, and Kafka for the events no route takes. The config is
// YAML text loaded by config.Parse, in the shapes the docs show. For every
// sink it checks that each event arrived, with its key's events in order,
// the event id where the sink carries it, the headers, the payload and the
// destination; and that every row ends published.
func TestEverySink(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL, NATS, RabbitMQ, Redis and Mosquitto (-short)")
	}
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	pgtest.Exec(t, pool, fixtures.Seed000, `ALTER TABLE journey_matcher.outbox ADD COLUMN headers JSONB`)

	kc := kafkaCluster(t, kfake.SeedTopics(3, "journey.kafka"))
	kafkaCol := collect(t, kc.ListenAddrs(), "journey.kafka")
	stream := newNATSStream(t)
	rabbit := newRabbitQueue(t, "journeys")
	rstream := newRedisStream(t)
	mqttSub := newMQTTSubscriber(t)
	hooks := newWebhookReceiver(t)

	sinks := []*sinkUnderTest{
		{name: "kafka", typ: "journey.kafka", read: func(*testing.T) []arrival { return kafkaArrivals(kafkaCol) },
			dest: func(sentEvent) string { return "journey.kafka" }},
		{name: "nats", typ: "journey.nats", read: stream.read,
			dest: func(e sentEvent) string { return stream.prefix + ".journeys." + e.key }},
		{name: "rabbitmq", typ: "journey.rabbitmq", read: rabbit.read,
			dest: func(e sentEvent) string { return "journeys." + e.key }},
		{name: "redis", typ: "journey.redis", read: rstream.read,
			dest: func(sentEvent) string { return rstream.key }},
		{name: "mqtt", typ: "journey.mqtt", read: mqttSub.read,
			dest: func(e sentEvent) string { return mqttSub.prefix + "/journeys/" + e.key }},
		{name: "webhook", typ: "journey.webhook", read: hooks.read,
			dest: func(e sentEvent) string { return "/hooks/" + e.key }},
	}

	yamlText := fmt.Sprintf(`
admin: {listen: "off"}
shutdown: {timeout: 5s}
databases:
  main:
    dsn: %q
sinks:
  kafka:
    type: kafka
    brokers: [%q]
  bus:
    type: nats
    nats:
      url: %q
      ack_timeout: 5s
  rabbit:
    type: rabbitmq
    rabbitmq:
      url: %q
      exchange: %q
  streams:
    type: redis
    redis:
      url: %q
  devices:
    type: mqtt
    mqtt:
      url: %q
  hooks:
    type: webhook
    webhook:
      url: %q
sources:
  - name: journeys
    table: journey_matcher.outbox
    preset: published-flag
    sink: kafka
    layout:
      headers: headers
    poll: {min: 10ms, max: 100ms}
    batch_size: 7      # a key's events span batches, several in flight
    pipeline: 3
    routes:
      - name: to-nats
        event_types: [journey.nats]
        sink: bus
        topic: "%s.journeys.{aggregate_id}"
      - name: to-rabbitmq
        event_types: [journey.rabbitmq]
        sink: rabbit
        topic: "journeys.{aggregate_id}"
      - name: to-redis
        event_types: [journey.redis]
        sink: streams
        topic: %q
      - name: to-mqtt
        event_types: [journey.mqtt]
        sink: devices
        topic: "%s/journeys/{aggregate_id}"
      - name: to-webhook
        event_types: [journey.webhook]
        sink: hooks
        topic: "{aggregate_id}"
`, dsn, kc.ListenAddrs()[0], stream.url, rabbit.url, rabbit.exchange, rstream.url, mqttSub.url,
		hooks.srv.URL+"/hooks/{destination}", stream.prefix, rstream.key, mqttSub.prefix)
	cfg, err := config.Parse([]byte(yamlText), nil)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yamlText)
	}

	// Five events per key and sink, four keys, interleaved across sinks and
	// keys, each later than the one before.
	keys := make([]string, 4)
	for i := range keys {
		if err := pool.QueryRow(ctx, `SELECT gen_random_uuid()::text`).Scan(&keys[i]); err != nil {
			t.Fatal(err)
		}
	}
	const perKey = 5
	base := time.Now().Add(-time.Hour)
	total := len(sinks) * len(keys) * perKey
	for i := range total {
		s := sinks[i%len(sinks)]
		e := sentEvent{key: keys[(i/len(sinks))%len(keys)], typ: s.typ, seq: i, trace: fmt.Sprintf("trace-%d", i)}
		e.payload = fmt.Appendf(nil, `{"seq": %d, "key": %q, "sink": %q}`, i, e.key, s.name)
		hdrs, _ := json.Marshal(map[string]string{"trace_id": e.trace})
		if err := pool.QueryRow(ctx, `INSERT INTO journey_matcher.outbox
  (aggregate_id, aggregate_type, event_type, payload, correlation_id, created_at, headers)
VALUES ($1, 'Journey', $2, $3, gen_random_uuid(), $4, $5) RETURNING id::text`,
			e.key, e.typ, e.payload, base.Add(time.Duration(i)*time.Millisecond), hdrs).Scan(&e.id); err != nil {
			t.Fatal(err)
		}
		s.sent = append(s.sent, e)
	}

	runRelay(t, cfg)

	waitFor(t, 60*time.Second, "every row published", func() (bool, string) {
		var done int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM journey_matcher.outbox WHERE published AND published_at IS NOT NULL`).Scan(&done)
		return err == nil && done == total, fmt.Sprintf("%d/%d rows published (%v)", done, total, err)
	})
	for _, s := range sinks {
		waitFor(t, 20*time.Second, s.name+" consumer to see every event", func() (bool, string) {
			s.arrived = s.read(t)
			ids := map[string]bool{}
			for _, a := range s.arrived {
				ids[a.id] = true
			}
			return len(ids) >= len(s.sent), fmt.Sprintf("%d distinct of %d", len(ids), len(s.sent))
		})
	}
	for _, s := range sinks {
		t.Run(s.name, func(t *testing.T) { checkArrivals(t, s) })
	}
	var failed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_relay.failed_events`).Scan(&failed); err != nil || failed != 0 {
		t.Errorf("dead letters: %d (%v), want none", failed, err)
	}
}

// checkArrivals compares what a sink's consumer read with what was sent.
func checkArrivals(t *testing.T, s *sinkUnderTest) {
	byID := map[string]sentEvent{}
	for _, e := range s.sent {
		byID[e.id] = e
	}
	seen := map[string]bool{}
	lastSeq := map[string]int{}
	for _, a := range s.arrived {
		e, ok := byID[a.id]
		if !ok {
			t.Errorf("a message with event id %q that was not sent to %s (headers %v)", a.id, s.name, a.headers)
			continue
		}
		if seen[a.id] {
			continue // at least once: a copy is allowed, and the first one counts for order
		}
		seen[a.id] = true
		for _, p := range a.problems {
			t.Errorf("event %d: %s", e.seq, p)
		}
		if prev, ok := lastSeq[e.key]; ok && prev > e.seq {
			t.Errorf("key %s: event %d arrived after event %d", e.key, e.seq, prev)
		}
		lastSeq[e.key] = e.seq
		if a.key != e.key {
			t.Errorf("event %d: key %q, want %q", e.seq, a.key, e.key)
		}
		if want := s.dest(e); a.dest != want {
			t.Errorf("event %d: destination %q, want %q", e.seq, a.dest, want)
		}
		want := map[string]string{"event_id": e.id, "event_type": e.typ, "aggregate_type": "Journey",
			"aggregate_id": e.key, "outbox_source": "journeys", "trace_id": e.trace}
		for k, v := range want {
			if a.headers[k] != v {
				t.Errorf("event %d: header %s = %q, want %q (all: %v)", e.seq, k, a.headers[k], v, a.headers)
			}
		}
		if !jsonEqual(t, a.payload, e.payload) {
			t.Errorf("event %d: payload %s, want %s", e.seq, a.payload, e.payload)
		}
	}
	if len(seen) != len(s.sent) {
		t.Errorf("%d of %d events arrived", len(seen), len(s.sent))
	}
}
