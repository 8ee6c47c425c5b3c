package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/paho"
	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/sink/mqtt"
	"github.com/outbox-relay/outbox-relay/internal/sink/nats"
	"github.com/outbox-relay/outbox-relay/internal/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/internal/sink/redis"
	"github.com/outbox-relay/outbox-relay/internal/sink/webhook"
)

// SinkCeiling is what a sink's server takes from its own client in the same
// run: the drain's messages (same count, payloads and keys) published as
// fast as that client goes with the settings a careful user would pick
// (Method), into a stream, queue or receiver of their own.
type SinkCeiling struct {
	Method       string  `json:"method"`
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// ClientCPUPerEvent is this process's CPU per event (µs): the client's,
	// and the webhook receiver's, which runs here too.
	ClientCPUPerEvent float64 `json:"client_cpu_us_per_event"`
	// ServerCPUPerEvent is the server's CPU per event (µs), where its
	// process is local and apart from this one; the whole server's, its
	// other clients included.
	ServerCPUPerEvent *float64 `json:"server_cpu_us_per_event,omitempty"`
	// Stored is how many events the server held afterwards, where it can
	// tell.
	Stored   *int `json:"stored,omitempty"`
	CutShort bool `json:"cut_short,omitempty"`
}

// ceilingMsg is message i of the drain: the event the relay would publish
// for the backlog's row i.
type ceilingMsg struct {
	id, key string
	payload []byte
}

// ceilingMsgs makes the drain's n messages: keys and payloads as the
// prefill's (rowGen).
func ceilingMsgs(o Options, topic string) []ceilingMsg {
	g := newRowGen(o.Rows, o.Keys, o.PayloadBytes, topic)
	out := make([]ceilingMsg, o.Rows)
	for i := range out {
		k := g.key(i)
		out[i] = ceilingMsg{id: strconv.Itoa(i + 1), key: k, payload: []byte(g.payload(i, k))}
	}
	return out
}

// sinkPublisher publishes msgs to a target with its server's own client
// and returns how many the server acknowledged, stopping at ctx's end.
type sinkPublisher struct {
	method  string
	publish func(ctx context.Context, msgs []ceilingMsg) (int, error)
	close   func()
}

// measureSinkCeiling publishes the drain's messages to a fresh target of
// o.Sink with the server's own client, within o's time limit.
func measureSinkCeiling(ctx context.Context, o Options, k kafkaEnv) (*SinkCeiling, error) {
	tg, err := newTarget(ctx, o, k)
	if err != nil {
		return nil, err
	}
	defer tg.close()
	sp, err := newSinkPublisher(ctx, o, tg)
	if err != nil {
		return nil, err
	}
	defer sp.close()
	msgs := ceilingMsgs(o, tg.topic)
	progress(o, "sink ceiling: %d events to %s with its own client (%s)", len(msgs), tg.kind, sp.method)
	serverCPU := func() time.Duration {
		if tg.cpu == nil {
			return 0
		}
		return tg.cpu()
	}
	cctx, cancel := context.WithTimeout(ctx, o.maxTime())
	defer cancel()
	cpu0, srv0, start := selfCPU(), serverCPU(), time.Now()
	n, err := sp.publish(cctx, msgs)
	elapsed := time.Since(start)
	cpu, srv := selfCPU()-cpu0, serverCPU()-srv0
	cut := cctx.Err() != nil && ctx.Err() == nil
	if err != nil && !cut {
		return nil, fmt.Errorf("sink ceiling on %s: %w", tg.kind, err)
	}
	ev := float64(max(n, 1))
	sc := &SinkCeiling{
		Method: sp.method, Events: n, Seconds: elapsed.Seconds(), EventsPerSec: float64(n) / elapsed.Seconds(), CutShort: cut,
		ClientCPUPerEvent: float64(cpu.Microseconds()) / ev,
	}
	if tg.cpu != nil {
		v := float64(srv.Microseconds()) / ev
		sc.ServerCPUPerEvent = &v
	}
	if tg.stored != nil {
		s, err := tg.stored(ctx)
		if err != nil {
			return nil, fmt.Errorf("count what the %s server holds after the sink ceiling: %w", tg.kind, err)
		}
		sc.Stored = &s
	}
	return sc, nil
}

// newSinkPublisher connects the server's own client for tg.
func newSinkPublisher(ctx context.Context, o Options, tg *target) (*sinkPublisher, error) {
	url := o.SinkURL
	if url == "" {
		url = defaultSinkURLs[tg.kind]
	}
	switch tg.kind {
	case "nats":
		return natsPublisher(url, tg.topic)
	case "rabbitmq":
		return rabbitPublisher(url, tg.made, tg.topic)
	case "redis":
		return redisPublisher(url, tg.topic, o.BatchSize, o.Pipeline)
	case "mqtt":
		return mqttPublisher(ctx, url, tg.topic)
	case "webhook":
		cfg, ok := tg.sink.Blocks["webhook"].(*webhook.Config)
		if !ok {
			return nil, errors.New("webhook target without its configuration")
		}
		return webhookPublisher(strings.ReplaceAll(cfg.URL, "{destination}", tg.topic))
	}
	return nil, fmt.Errorf("no sink ceiling for sink %s", tg.kind)
}

// natsPublisher publishes with JetStream's PublishAsync, at most the
// NATS sink's default pending window (nats.DefaultMaxPending) awaiting
// their PubAcks, each with its Nats-Msg-Id and key header as the sink sends.
func natsPublisher(url, subject string) (*sinkPublisher, error) {
	nc, err := natsclient.Connect(url)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redact(url), err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(nats.DefaultMaxPending))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return &sinkPublisher{
		method: fmt.Sprintf("JetStream PublishAsync, at most %d pending", nats.DefaultMaxPending),
		close:  nc.Close,
		publish: func(ctx context.Context, msgs []ceilingMsg) (int, error) {
			futures := make([]jetstream.PubAckFuture, 0, len(msgs))
			var err error
			for _, m := range msgs {
				if ctx.Err() != nil {
					break
				}
				var f jetstream.PubAckFuture
				// Blocks while the pending window is full.
				f, err = js.PublishMsgAsync(&natsclient.Msg{Subject: subject, Data: m.payload,
					Header: natsclient.Header{nats.HeaderMsgID: {m.id}, nats.HeaderKey: {m.key}}})
				if err != nil {
					err = fmt.Errorf("publish %s: %w", m.id, err)
					break
				}
				futures = append(futures, f)
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
			}
			n := 0
			for _, f := range futures {
				select {
				case <-f.Ok():
					n++
				case e := <-f.Err():
					err = cmpErr(err, fmt.Errorf("message %s: %w", f.Msg().Header.Get(nats.HeaderMsgID), e))
				default: // still pending at the time limit
				}
			}
			return n, err
		},
	}, nil
}

// rabbitPublisher publishes persistent messages on a channel in confirm
// mode, pipelined: up to the RabbitMQ sink's default window
// (rabbitmq.DefaultMaxInFlight) of confirms outstanding.
func rabbitPublisher(url, exchange, key string) (*sinkPublisher, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ at %s: %w", redact(url), err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("rabbitmq channel in confirm mode: %w", err)
	}
	window := rabbitmq.DefaultMaxInFlight
	return &sinkPublisher{
		method: fmt.Sprintf("publisher confirms, up to %d outstanding", window),
		close:  func() { _ = conn.Close() },
		publish: func(ctx context.Context, msgs []ceilingMsg) (int, error) {
			var pending []*amqp.DeferredConfirmation
			n := 0
			// wait takes the oldest outstanding confirm.
			wait := func() error {
				dc := pending[0]
				pending = pending[1:]
				ok, err := dc.WaitContext(ctx)
				if err != nil {
					return fmt.Errorf("confirm of delivery tag %d: %w", dc.DeliveryTag, err)
				}
				if !ok {
					return fmt.Errorf("delivery tag %d: nacked", dc.DeliveryTag)
				}
				n++
				return nil
			}
			now := time.Now()
			for _, m := range msgs {
				if len(pending) == window {
					if err := wait(); err != nil {
						return n, err
					}
				}
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, amqp.Publishing{
					Headers: amqp.Table{rabbitmq.HeaderKey: m.key}, DeliveryMode: amqp.Persistent, MessageId: m.id,
					Timestamp: now, ContentType: "application/json", AppId: "outbox-relay", Body: m.payload,
				})
				if err != nil {
					return n, fmt.Errorf("publish %s: %w", m.id, err)
				}
				pending = append(pending, dc)
			}
			for len(pending) > 0 {
				if err := wait(); err != nil {
					return n, err
				}
			}
			return n, nil
		},
	}, nil
}

// redisPublisher adds the messages to the stream with XADD, batch
// commands a pipeline, pipelines pipelines at once (the relay's batch
// size and batches in flight), the fields the Redis sink writes.
func redisPublisher(url, stream string, batch, pipelines int) (*sinkPublisher, error) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	c := goredis.NewClient(opts)
	batch, pipelines = max(batch, 1), max(pipelines, 1)
	return &sinkPublisher{
		method: fmt.Sprintf("XADD pipelined, %d a pipeline, %d pipelines at once", batch, pipelines),
		close:  func() { _ = c.Close() },
		publish: func(ctx context.Context, msgs []ceilingMsg) (int, error) {
			return inParallel(ctx, len(msgs), batch, pipelines, func(ctx context.Context, from, to int) (int, error) {
				cmds, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
					for _, m := range msgs[from:to] {
						p.XAdd(ctx, &goredis.XAddArgs{Stream: stream, ID: "*",
							Values: []any{redis.FieldID, m.id, redis.FieldKey, m.key, redis.FieldPayload, m.payload}})
					}
					return nil
				})
				n := 0
				for _, cmd := range cmds {
					if cmd.Err() == nil {
						n++
					}
				}
				if err != nil {
					return n, fmt.Errorf("xadd to %s: %w", stream, err)
				}
				return n, nil
			})
		},
	}, nil
}

// mqttPublisher publishes with QoS 1 from the MQTT sink's default number
// of in-flight messages (mqtt.DefaultMaxInFlight) at once, each waiting for
// its PUBACK, on one connection; the server's receive maximum bounds them
// as it does the sink's.
func mqttPublisher(ctx context.Context, url, topic string) (*sinkPublisher, error) {
	u, err := neturl.Parse(url)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("mqtt url %q: not a URL with a host", redact(url))
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "1883")
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial MQTT at %s: %w", addr, err)
	}
	id := "outbox-bench-" + newSchema()[len("outbox_bench_"):]
	cli := paho.NewClient(paho.ClientConfig{ClientID: id, Conn: conn, PacketTimeout: mqtt.DefaultPublishTimeout})
	cp := &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true}
	if u.User != nil {
		cp.Username, cp.UsernameFlag = u.User.Username(), true
		if pw, ok := u.User.Password(); ok {
			cp.Password, cp.PasswordFlag = []byte(pw), true
		}
	}
	if _, err := cli.Connect(ctx, cp); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("mqtt connect to %s: %w", addr, err)
	}
	inFlight := mqtt.DefaultMaxInFlight
	utf8Payload := byte(1)
	return &sinkPublisher{
		method: fmt.Sprintf("QoS 1, %d publishers in flight on one connection", inFlight),
		close:  func() { _ = cli.Disconnect(&paho.Disconnect{}) },
		publish: func(ctx context.Context, msgs []ceilingMsg) (int, error) {
			return inParallel(ctx, len(msgs), 1, inFlight, func(ctx context.Context, i, _ int) (int, error) {
				m := msgs[i]
				_, err := cli.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: m.payload, Properties: &paho.PublishProperties{
					ContentType: "application/json", PayloadFormat: &utf8Payload,
					User: paho.UserProperties{{Key: mqtt.PropertyEventID, Value: m.id}, {Key: mqtt.PropertyKey, Value: m.key}},
				}})
				if err != nil {
					return 0, fmt.Errorf("publish %s: %w", m.id, err)
				}
				return 1, nil
			})
		},
	}, nil
}

// webhookPublisher POSTs each message to url from the webhook sink's
// default concurrency (webhook.DefaultConcurrency) of requests at once,
// over kept-alive connections.
func webhookPublisher(url string) (*sinkPublisher, error) {
	conc := webhook.DefaultConcurrency
	tr := &http.Transport{MaxIdleConns: conc, MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc, IdleConnTimeout: time.Minute}
	c := &http.Client{Transport: tr, Timeout: webhook.DefaultTimeout}
	return &sinkPublisher{
		method: fmt.Sprintf("HTTP/1.1 keep-alive, %d requests at once", conc),
		close:  tr.CloseIdleConnections,
		publish: func(ctx context.Context, msgs []ceilingMsg) (int, error) {
			return inParallel(ctx, len(msgs), 1, conc, func(ctx context.Context, i, _ int) (int, error) {
				m := msgs[i]
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(m.payload))
				if err != nil {
					return 0, fmt.Errorf("request %s: %w", m.id, err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(webhook.KeyHeader, m.key)
				req.Header.Set("Idempotency-Key", m.id)
				resp, err := c.Do(req)
				if err != nil {
					return 0, fmt.Errorf("post %s: %w", m.id, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					return 0, fmt.Errorf("post %s: %s", m.id, resp.Status)
				}
				return 1, nil
			})
		},
	}, nil
}

// inParallel splits n items into chunks of size and runs do on them from
// workers goroutines, each taking the next chunk; it returns the sum of
// their counts and the first error, after which no chunk starts.
func inParallel(ctx context.Context, n, size, workers int, do func(ctx context.Context, from, to int) (int, error)) (int, error) {
	var next, done atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				from := int(next.Add(int64(size))) - size
				if from >= n {
					return
				}
				k, err := do(ctx, from, min(from+size, n))
				done.Add(int64(k))
				if err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	return int(done.Load()), first
}

// cmpErr is the first of a and b that is not nil.
func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
