// Package kafka publishes relay messages to Apache Kafka with franz-go.
//
// A Publisher produces each message as one record through the idempotent
// producer, partitioned like the Java client (murmur2 of the partition key,
// else of the record key; records without either are spread by the sticky
// partitioner), and reports one classified result per message.
//
// # Ordering
//
// franz-go keeps the records of one partition in one buffer and, when a
// batch fails (retries or delivery timeout exhausted, a non-retriable broker
// error, a cancelled context), it fails every record buffered for that
// partition, not just the batch. With idempotence the broker also refuses a
// later batch whose predecessor was not written. So a failure is never
// followed by a later success among the records that were buffered when it
// happened.
//
// That does not cover a record handed to the client after the failure: it
// starts a fresh buffer and may succeed. Publish narrows this window by not
// sending the rest of a key once one of its messages failed (those come back
// as retryable, unsent), and closes it after the fact: a failed message that
// a later message of the same key overtook is reported terminal, since
// retrying it would deliver it after its successor.
//
// # Classification
//
// Retryable: delivery timeout, retries exhausted, retriable broker errors,
// cancellation, a closed client, and broker errors that say nothing about the
// message itself (authorization, producer state, unsupported versions,
// UNKNOWN_SERVER_ERROR). These hit every message of the topic or client
// alike, so later messages of a failed one fail too, and a retry is safe.
//
// Terminal: an empty destination and a payload above MaxMessageBytes (both
// without calling Kafka), MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
// INVALID_RECORD, CORRUPT_MESSAGE, INVALID_TOPIC_EXCEPTION,
// UNKNOWN_TOPIC_OR_PARTITION when topics are not auto-created, and any other
// non-retriable broker error. These fail on the first answer, well before our
// submission loop is done, so a later message of the same key may already be
// on its way; retrying the failed one later would put it behind its
// successor. Terminal messages go to the dead-letter table instead.
//
// Because franz-go fails a whole partition buffer with the error of one bad
// batch, messages that only shared a buffer with a rejected record receive
// its terminal error too. Publish therefore sends each message that failed
// with a record-level terminal error once more on its own, one at a time per
// partition, and only the ones rejected alone stay terminal.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// Publisher publishes messages to Kafka. It is safe for concurrent use.
type Publisher struct {
	client   *kgo.Client
	maxBytes int

	closeOnce sync.Once
	closeErr  error
}

var _ sink.Publisher = (*Publisher)(nil)

// Option customises New.
type Option func(*options)

type options struct {
	transactional bool
	logger        *slog.Logger
	reg           prometheus.Registerer
	kgoOpts       []kgo.Opt
}

// WithLogger routes the client's logs to l.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithRegisterer registers the client's metrics (outbox_relay_kafka_*) with
// reg. Registering two clients with one registerer panics on the duplicate
// metrics: wrap reg with prometheus.WrapRegistererWith and a sink label when
// several Kafka sinks share it.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.reg = reg }
}

// transactional makes the client a transactional producer's.
func transactional(id string, timeout time.Duration) Option {
	return func(o *options) {
		o.transactional = true
		o.kgoOpts = append(o.kgoOpts, kgo.TransactionalID(id), kgo.TransactionTimeout(timeout))
	}
}

// WithKgoOpts appends raw client options, applied last.
func WithKgoOpts(opts ...kgo.Opt) Option {
	return func(o *options) { o.kgoOpts = append(o.kgoOpts, opts...) }
}

// New creates a Publisher for cfg. It does not connect: use Ping to check
// that a broker answers.
func New(cfg config.Sink, opts ...Option) (*Publisher, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	s, err := settingsFor(cfg)
	if err != nil {
		return nil, err
	}
	kopts := s.kgoOpts
	if !o.transactional {
		kopts = append(kopts, s.cancel)
	}
	if o.logger != nil {
		kopts = append(kopts, kgo.WithLogger(slogLogger{o.logger}))
	}
	if o.reg != nil {
		m := kprom.NewMetrics("outbox_relay", kprom.Subsystem("kafka"), kprom.Registerer(o.reg))
		kopts = append(kopts, kgo.WithHooks(m))
	}
	kopts = append(kopts, o.kgoOpts...)
	client, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, err
	}
	return &Publisher{client: client, maxBytes: s.maxBytes}, nil
}

// MaxMessageBytes is the largest payload Publish accepts.
func (p *Publisher) MaxMessageBytes() int { return p.maxBytes }

// Ping reports whether a broker answers a metadata request.
func (p *Publisher) Ping(ctx context.Context) error { return p.client.Ping(ctx) }

// MissingTopics returns those of topics the cluster does not have. The
// lookup never asks for auto-creation, whatever auto_create_topics says: a
// broker that creates topics on request would create them by the look
// alone (the client's own metadata requests ask when auto_create_topics).
func (p *Publisher) MissingTopics(ctx context.Context, topics []string) ([]string, error) {
	if len(topics) == 0 {
		return nil, nil
	}
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, p.client)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	errs := map[string]error{}
	for _, t := range resp.Topics {
		if t.Topic != nil {
			errs[*t.Topic] = kerr.ErrorForCode(t.ErrorCode)
		}
	}
	var missing []string
	for _, t := range topics {
		err, ok := errs[t]
		switch {
		case !ok, errors.Is(err, kerr.UnknownTopicOrPartition):
			missing = append(missing, t)
		case err != nil:
			return nil, fmt.Errorf("topic %s: %w", t, err)
		}
	}
	return missing, nil
}

// Close flushes buffered records until ctx is done, then closes the client;
// records still buffered then fail with kgo.ErrClientClosed.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.closeErr = p.client.Flush(ctx)
		p.client.Close()
	})
	return p.closeErr
}
