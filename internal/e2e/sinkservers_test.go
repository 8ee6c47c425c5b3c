package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// arrival is one message as a consumer of a sink sees it, put in common
// terms: the event id and key where the sink carries them, the event's
// headers under their original names, the payload and where it went.
type arrival struct {
	id      string
	key     string
	headers map[string]string
	payload []byte
	dest    string
	// at is when the message arrived: the server's time where it keeps
	// one (NATS, Redis), else when the consumer got it.
	at time.Time
	// problems are departures from the sink's documented message shape.
	problems []string
}

func (a *arrival) problem(format string, args ...any) {
	a.problems = append(a.problems, fmt.Sprintf(format, args...))
}

// serverAddr is a local server's address, overridden by the environment
// variable the sink packages' tests read too.
func serverAddr(env, def string) string {
	if v := os.Getenv(env); v != "" {
		if _, rest, ok := strings.Cut(v, "://"); ok {
			return rest
		}
		return v
	}
	return def
}

func shortCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// natsStream is a JetStream stream of one test, capturing prefix.>.
type natsStream struct {
	url    string
	js     jetstream.JetStream
	name   string
	prefix string
}

func newNATSStream(t *testing.T) *natsStream {
	t.Helper()
	addr := serverAddr("OUTBOX_RELAY_TEST_NATS", "127.0.0.1:4222")
	nc, err := natsclient.Connect("nats://" + addr)
	if err != nil {
		t.Fatalf("connect to NATS at %s (start it with scripts/services.sh nats): %v", addr, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sfx := pgtest.Suffix()
	s := &natsStream{url: "nats://" + addr, js: js, name: "OUTBOX_E2E_" + sfx, prefix: "outbox-e2e-" + sfx}
	ctx, cancel := shortCtx()
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: s.name, Subjects: []string{s.prefix + ".>"}, Storage: jetstream.MemoryStorage,
		Duplicates: 10 * time.Minute, // longer than the relay's retry horizon
	}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := shortCtx()
		defer cancel()
		if err := js.DeleteStream(ctx, s.name); err != nil {
			t.Logf("delete stream %s: %v", s.name, err)
		}
	})
	return s
}

// read returns every message of the stream, in stream order.
func (s *natsStream) read(t *testing.T) []arrival {
	t.Helper()
	ctx, cancel := shortCtx()
	defer cancel()
	st, err := s.js.Stream(ctx, s.name)
	if err != nil {
		t.Fatalf("stream %s: %v", s.name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", s.name, err)
	}
	var out []arrival
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stream %s message %d: %v", s.name, seq, err)
		}
		a := arrival{id: m.Header.Get("Nats-Msg-Id"), key: m.Header.Get("Outbox-Key"),
			headers: map[string]string{}, payload: m.Data, dest: m.Subject, at: m.Time}
		for k, vs := range m.Header {
			if k != "Nats-Msg-Id" && k != "Outbox-Key" && len(vs) > 0 {
				a.headers[k] = vs[0]
			}
		}
		out = append(out, a)
	}
	return out
}

// rabbitQueue is a topic exchange of one test and a queue bound to every
// routing key under prefix.
type rabbitQueue struct {
	url      string
	exchange string
	queue    string
	ch       *amqp.Channel
	mu       sync.Mutex
	got      []arrival
}

func newRabbitQueue(t *testing.T, prefix string) *rabbitQueue {
	t.Helper()
	addr := serverAddr("OUTBOX_RELAY_TEST_RABBITMQ", "127.0.0.1:5672")
	url := "amqp://guest:guest@" + addr + "/"
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s (start it with scripts/services.sh rabbitmq): %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	sfx := pgtest.Suffix()
	q := &rabbitQueue{url: url, exchange: "outbox-e2e-" + sfx, queue: "outbox-e2e-" + sfx, ch: ch}
	if err := ch.ExchangeDeclare(q.exchange, amqp.ExchangeTopic, false, false, false, false, nil); err != nil {
		t.Fatalf("declare exchange: %v", err)
	}
	t.Cleanup(func() {
		if err := ch.ExchangeDelete(q.exchange, false, false); err != nil {
			t.Logf("delete exchange %s: %v", q.exchange, err)
		}
	})
	if _, err := ch.QueueDeclare(q.queue, false, false, false, false, nil); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	t.Cleanup(func() {
		if _, err := ch.QueueDelete(q.queue, false, false, false); err != nil {
			t.Logf("delete queue %s: %v", q.queue, err)
		}
	})
	if err := ch.QueueBind(q.queue, prefix+".#", q.exchange, false, nil); err != nil {
		t.Fatalf("bind queue: %v", err)
	}
	deliveries, err := ch.Consume(q.queue, "", true, true, false, false, nil)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	go func() {
		for d := range deliveries {
			q.mu.Lock()
			q.got = append(q.got, rabbitArrival(d))
			q.mu.Unlock()
		}
	}()
	return q
}

func rabbitArrival(d amqp.Delivery) arrival {
	a := arrival{id: d.MessageId, headers: map[string]string{}, payload: d.Body, dest: d.RoutingKey, at: time.Now()}
	for k, v := range d.Headers {
		s, ok := v.(string)
		if !ok {
			a.problem("header %s is %T, want a string", k, v)
			continue
		}
		if k == "message_key" {
			a.key = s
			continue
		}
		a.headers[k] = s
	}
	if d.Type != a.headers["event_type"] {
		a.problem("type %q, want the event type %q", d.Type, a.headers["event_type"])
	}
	if d.ContentType != "application/json" || d.DeliveryMode != amqp.Persistent || d.AppId != "outbox-relay" {
		a.problem("content type %q, delivery mode %d, app id %q", d.ContentType, d.DeliveryMode, d.AppId)
	}
	return a
}

func (q *rabbitQueue) read(*testing.T) []arrival {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]arrival(nil), q.got...)
}

// redisStream is a stream key of one test.
type redisStream struct {
	url string
	c   *goredis.Client
	key string
}

func newRedisStream(t *testing.T) *redisStream {
	t.Helper()
	addr := serverAddr("OUTBOX_RELAY_TEST_REDIS", "127.0.0.1:6379")
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := shortCtx()
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("connect to Redis at %s (start it with scripts/services.sh redis): %v", addr, err)
	}
	s := &redisStream{url: "redis://" + addr, c: c, key: "outbox-e2e:" + pgtest.Suffix()}
	t.Cleanup(func() {
		ctx, cancel := shortCtx()
		defer cancel()
		if err := c.Del(ctx, s.key).Err(); err != nil {
			t.Logf("delete %s: %v", s.key, err)
		}
	})
	return s
}

// read returns the stream's entries with their fields in stored order
// (XRANGE as sent, since the client's map would lose the order).
func (s *redisStream) read(t *testing.T) []arrival {
	t.Helper()
	ctx, cancel := shortCtx()
	defer cancel()
	res, err := s.c.Do(ctx, "XRANGE", s.key, "-", "+").Slice()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", s.key, err)
	}
	var out []arrival
	for _, e := range res {
		entry, _ := e.([]any)
		if len(entry) != 2 {
			t.Fatalf("XRANGE %s: entry %v", s.key, e)
		}
		fields, _ := entry[1].([]any)
		a := arrival{headers: map[string]string{}, dest: s.key}
		if id, _ := entry[0].(string); id != "" {
			// An entry's id is the server's time of the XADD in
			// milliseconds, then a sequence number.
			ms, _, _ := strings.Cut(id, "-")
			if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
				a.at = time.UnixMilli(n)
			}
		}
		var names []string
		for i := 0; i+1 < len(fields); i += 2 {
			f, _ := fields[i].(string)
			v, _ := fields[i+1].(string)
			names = append(names, f)
			switch {
			case f == "id":
				a.id = v
			case f == "key":
				a.key = v
			case f == "payload":
				a.payload = []byte(v)
			case strings.HasPrefix(f, "h:"):
				a.headers[strings.TrimPrefix(f, "h:")] = v
			default:
				a.problem("unexpected field %q", f)
			}
		}
		if len(names) < 3 || names[0] != "id" || names[1] != "key" || names[len(names)-1] != "payload" {
			a.problem("fields %v: want id, key, the headers, then payload", names)
		}
		out = append(out, a)
	}
	return out
}

// mqttSubscriber is a QoS 1 subscription to prefix/#, made before the relay
// starts (MQTT keeps nothing for later subscribers).
type mqttSubscriber struct {
	url    string
	prefix string
	mu     sync.Mutex
	got    []arrival
}

func newMQTTSubscriber(t *testing.T) *mqttSubscriber {
	t.Helper()
	addr := serverAddr("OUTBOX_RELAY_TEST_MQTT", "127.0.0.1:1883")
	s := &mqttSubscriber{url: "mqtt://" + addr, prefix: "outbox-e2e/" + pgtest.Suffix()}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("connect to Mosquitto at %s (start it with scripts/services.sh mosquitto): %v", addr, err)
	}
	cli := paho.NewClient(paho.ClientConfig{
		ClientID: "outbox-e2e-sub-" + pgtest.Suffix(),
		Conn:     conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(r paho.PublishReceived) (bool, error) {
			a := mqttArrival(r.Packet)
			s.mu.Lock()
			s.got = append(s.got, a)
			s.mu.Unlock()
			return true, nil
		}},
	})
	ctx, cancel := shortCtx()
	defer cancel()
	if _, err := cli.Connect(ctx, &paho.Connect{ClientID: cli.ClientID(), CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatalf("MQTT connect: %v", err)
	}
	t.Cleanup(func() { _ = cli.Disconnect(&paho.Disconnect{}) })
	if _, err := cli.Subscribe(ctx, &paho.Subscribe{
		Subscriptions: []paho.SubscribeOptions{{Topic: s.prefix + "/#", QoS: 1}},
	}); err != nil {
		t.Fatalf("MQTT subscribe: %v", err)
	}
	return s
}

func mqttArrival(p *paho.Publish) arrival {
	a := arrival{headers: map[string]string{}, payload: p.Payload, dest: p.Topic, at: time.Now()}
	if p.QoS != 1 || p.Retain {
		a.problem("QoS %d, retain %v; want QoS 1, not retained", p.QoS, p.Retain)
	}
	if p.Properties == nil {
		a.problem("no properties")
		return a
	}
	if p.Properties.ContentType != "application/json" || p.Properties.PayloadFormat == nil || *p.Properties.PayloadFormat != 1 {
		a.problem("content type %q, payload format %v", p.Properties.ContentType, p.Properties.PayloadFormat)
	}
	for _, u := range p.Properties.User {
		if u.Key == "message_key" {
			a.key = u.Value
			continue
		}
		a.headers[u.Key] = u.Value
	}
	a.id = a.headers["event_id"]
	return a
}

func (s *mqttSubscriber) read(*testing.T) []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrival(nil), s.got...)
}

// webhookReceiver is an HTTP server that records every request it answers
// with 200. A key's next request is sent only after this one's answer, so
// the order requests are recorded in is the order they were sent in.
type webhookReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []arrival
}

func newWebhookReceiver(t *testing.T) *webhookReceiver {
	t.Helper()
	w := &webhookReceiver{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		a := webhookArrival(r, body)
		w.mu.Lock()
		w.got = append(w.got, a)
		w.mu.Unlock()
		rw.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func webhookArrival(r *http.Request, body []byte) arrival {
	a := arrival{id: r.Header.Get("Idempotency-Key"), headers: map[string]string{}, payload: body, dest: r.URL.EscapedPath(), at: time.Now()}
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("User-Agent") != "outbox-relay" {
		a.problem("%s, content type %q, user agent %q", r.Method, r.Header.Get("Content-Type"), r.Header.Get("User-Agent"))
	}
	if k := r.Header.Get("X-Outbox-Key"); k != "" {
		key, err := url.PathUnescape(k)
		if err != nil {
			a.problem("X-Outbox-Key %q: %v", k, err)
		}
		a.key = key
	}
	for name, vs := range r.Header {
		h, ok := strings.CutPrefix(name, "X-Outbox-")
		if !ok || h == "Key" || h == "Signature" {
			continue
		}
		a.headers[strings.ReplaceAll(strings.ToLower(h), "-", "_")] = vs[0]
	}
	return a
}

func (w *webhookReceiver) read(*testing.T) []arrival {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]arrival(nil), w.got...)
}

// kafkaArrivals converts the records of a collector.
func kafkaArrivals(c *collector) []arrival {
	var out []arrival
	for _, r := range c.records() {
		a := arrival{key: string(r.Key), headers: map[string]string{}, payload: r.Value, dest: r.Topic}
		for _, h := range r.Headers {
			a.headers[h.Key] = string(h.Value)
		}
		a.id = a.headers["event_id"]
		out = append(out, a)
	}
	return out
}
