package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/sink/mqtt"
	"github.com/outbox-relay/outbox-relay/internal/sink/nats"
	"github.com/outbox-relay/outbox-relay/internal/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/internal/sink/redis"
	"github.com/outbox-relay/outbox-relay/internal/sink/webhook"
)

// Sinks are the sink types the drain workload can publish to.
var Sinks = []string{"kafka", "nats", "rabbitmq", "redis", "mqtt", "webhook"}

// defaultSinkURLs are the local servers of each type (see SinkURL).
var defaultSinkURLs = map[string]string{
	"nats":     "nats://127.0.0.1:4222",
	"rabbitmq": "amqp://guest:guest@127.0.0.1:5672/",
	"redis":    "redis://127.0.0.1:6379",
	"mqtt":     "mqtt://127.0.0.1:1883",
}

// kafkaEnv is the Kafka cluster of a run: brokers, and the child process
// when the run started one.
type kafkaEnv struct {
	brokers []string
	br      *broker
	note    string
}

// target is where a relay phase publishes: a sink of one type, with what it
// needs on its server made for the run and removed by close.
type target struct {
	kind  string
	sink  config.Sink
	topic string // every event's destination
	made  string // the stream, queue or key made for the run, if any
	note  string // said beside the figures
	// cpu is the server's CPU time so far; nil when not measured.
	cpu func() time.Duration
	// stored counts the events the server holds; nil when it cannot tell.
	stored func(ctx context.Context) (int, error)
	close  func()
}

// kafkaTarget publishes to topic "bench" of the run's cluster.
func kafkaTarget(k kafkaEnv) *target {
	tg := &target{kind: "kafka", sink: config.Sink{Type: "kafka", Brokers: k.brokers}, topic: topic, note: k.note, close: func() {}}
	if k.br != nil {
		tg.cpu = k.br.cpu
	}
	return tg
}

// newTarget prepares the sink o.Sink names for one relay phase.
func newTarget(ctx context.Context, o Options, k kafkaEnv) (*target, error) {
	url := o.SinkURL
	if url == "" {
		url = defaultSinkURLs[o.Sink]
	}
	sfx := newSchema()[len("outbox_bench_"):]
	var tg *target
	var err error
	switch o.Sink {
	case "", "kafka":
		return kafkaTarget(k), nil
	case "nats":
		tg, err = natsTarget(ctx, url, sfx)
	case "rabbitmq":
		tg, err = rabbitTarget(url, sfx)
	case "redis":
		tg, err = redisTarget(ctx, url, sfx)
	case "mqtt":
		tg = &target{kind: "mqtt", sink: config.Sink{Type: "mqtt", Blocks: config.Blocks{"mqtt": &mqtt.Config{URL: url}}},
			topic: "outbox-bench/" + sfx + "/events", cpu: serverCPU("mosquitto"), close: func() {},
			note: "MQTT server at " + redact(url) + ", QoS 1, no subscriber (the server acknowledges and drops)"}
	case "webhook":
		return webhookTarget()
	default:
		return nil, fmt.Errorf("unknown sink %q (have: %s)", o.Sink, strings.Join(Sinks, ", "))
	}
	if err != nil {
		return nil, err
	}
	tg.note += "; broker CPU is the whole server's, its other clients included"
	return tg, nil
}

// natsTarget makes a file-backed JetStream stream capturing the run's
// subject, deleted by close.
func natsTarget(ctx context.Context, url, sfx string) (*target, error) {
	nc, err := natsclient.Connect(url)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	name, subject := "OUTBOX_BENCH_"+sfx, "outbox-bench-"+sfx+".events"
	// The duplicate window covers the relay's retry horizon, as the NATS
	// sink's documentation asks.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject},
		Storage: jetstream.FileStorage, Duplicates: 5 * time.Minute}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("create stream %s: %w", name, err)
	}
	return &target{
		kind: "nats", sink: config.Sink{Type: "nats", Blocks: config.Blocks{"nats": &nats.Config{URL: url}}}, topic: subject, made: name,
		note: "NATS server at " + redact(url) + ", a JetStream stream on file storage made for each run (deleted after)",
		cpu:  serverCPU("nats-server"),
		stored: func(ctx context.Context) (int, error) {
			st, err := js.Stream(ctx, name)
			if err != nil {
				return 0, err
			}
			info, err := st.Info(ctx)
			if err != nil {
				return 0, err
			}
			return int(info.State.Msgs), nil
		},
		close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = js.DeleteStream(ctx, name)
			nc.Close()
		},
	}, nil
}

// rabbitTarget makes a direct exchange and a durable queue bound to the
// run's routing key, both deleted by close.
func rabbitTarget(url, sfx string) (*target, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ at %s: %w", url, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("rabbitmq channel: %w", err)
	}
	name := "outbox-bench-" + sfx
	closeAll := func() {
		_, _ = ch.QueueDelete(name, false, false, false)
		_ = ch.ExchangeDelete(name, false, false)
		_ = conn.Close()
	}
	err = ch.ExchangeDeclare(name, amqp.ExchangeDirect, false, false, false, false, nil)
	if err == nil {
		_, err = ch.QueueDeclare(name, true, false, false, false, nil)
	}
	if err == nil {
		err = ch.QueueBind(name, topic, name, false, nil)
	}
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("declare exchange and queue %s: %w", name, err)
	}
	return &target{
		kind: "rabbitmq", sink: config.Sink{Type: "rabbitmq", Blocks: config.Blocks{"rabbitmq": &rabbitmq.Config{URL: url, Exchange: name}}}, topic: topic, made: name,
		note: "RabbitMQ at " + redact(url) + ", persistent messages through a direct exchange to a durable queue, both made for each run (deleted after)",
		cpu:  serverCPU("beam.smp"),
		stored: func(context.Context) (int, error) {
			q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			return q.Messages, err
		},
		close: closeAll,
	}, nil
}

// redisTarget names a stream key of the run, deleted by close.
func redisTarget(ctx context.Context, url, sfx string) (*target, error) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	c := goredis.NewClient(opts)
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("connect to Redis at %s: %w", url, err)
	}
	key := "outbox-bench:" + sfx
	return &target{
		kind: "redis", sink: config.Sink{Type: "redis", Blocks: config.Blocks{"redis": &redis.Config{URL: url}}}, topic: key, made: key,
		note: "Redis at " + redact(url) + ", a stream made for each run (deleted after)",
		cpu:  serverCPU("redis-server"),
		stored: func(ctx context.Context) (int, error) {
			n, err := c.XLen(ctx, key).Result()
			return int(n), err
		},
		close: func() {
			_ = c.Del(context.Background(), key).Err()
			_ = c.Close()
		},
	}, nil
}

// webhookTarget starts an HTTP server in this process that answers every
// request with 200.
func webhookTarget() (*target, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	var n atomic.Int64
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n.Add(1)
		w.WriteHeader(http.StatusOK)
	})}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "webhook receiver:", err)
		}
	}()
	return &target{
		kind: "webhook", sink: config.Sink{Type: "webhook", Blocks: config.Blocks{"webhook": &webhook.Config{URL: "http://" + ln.Addr().String() + "/{destination}"}}},
		topic: topic,
		note: "the webhook receiver (an HTTP server on 127.0.0.1 that answers 200) runs in the same process as the relay: " +
			"its CPU is counted in the relay's",
		stored: func(context.Context) (int, error) { return int(n.Load()), nil },
		close:  func() { _ = srv.Close() },
	}, nil
}

// serverCPU sums the CPU time of the processes named comm (a local server),
// when /proc shows them. Other clients of a shared server add to it.
func serverCPU(comm string) func() time.Duration {
	return func() time.Duration {
		var total time.Duration
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			c, err := os.ReadFile(d + "/comm")
			if err != nil || strings.TrimSpace(string(c)) != comm {
				continue
			}
			pid, _ := strconv.Atoi(filepath.Base(d))
			total += procCPU(pid)
		}
		return total
	}
}

// redact hides the password of a server URL.
func redact(s string) string {
	u, err := neturl.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
