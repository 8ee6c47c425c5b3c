package kafka

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// Fallbacks for zero values; they match the configuration defaults.
const (
	defaultClientID        = "outbox-relay"
	defaultMaxMessageBytes = 1000000
	defaultDeliveryTimeout = 30 * time.Second
	defaultRecordRetries   = 10
	// unknownTopicRetries is how many metadata answers saying "no such
	// topic" the client takes before failing the topic's records.
	unknownTopicRetries = 2
	// Bounds franz-go puts on a record batch.
	minBatchBytes = 512
	maxBatchBytes = 1 << 30
	// defaultBrokerWriteBytes is franz-go's own cap on a request.
	defaultBrokerWriteBytes = 100 << 20
)

type settings struct {
	maxBytes int
	// cancel lets a record without an answer be cancelled (not with
	// transactions: an aborted transaction does that).
	cancel   kgo.Opt
	kgoOpts  []kgo.Opt // a producer's
	connOpts []kgo.Opt // any client's: brokers, client id, SASL, TLS
}

func settingsFor(cfg config.Sink) (settings, error) {
	if cfg.Type != "" && !strings.EqualFold(cfg.Type, "kafka") {
		return settings{}, fmt.Errorf("sink type %q is not kafka", cfg.Type)
	}
	if len(cfg.Brokers) == 0 {
		return settings{}, errors.New("no brokers")
	}
	clientID := cfg.ClientID
	if clientID == "" {
		clientID = defaultClientID
	}
	maxBytes := cfg.MaxMessageBytes
	if maxBytes <= 0 {
		maxBytes = defaultMaxMessageBytes
	}
	maxBytes = min(max(maxBytes, minBatchBytes), maxBatchBytes)
	timeout := cfg.DeliveryTimeout.D()
	if timeout <= 0 {
		timeout = defaultDeliveryTimeout
	}
	retries := cfg.RecordRetries
	if retries <= 0 {
		retries = defaultRecordRetries
	}
	linger := max(cfg.Linger.D(), 0)
	codec, err := compression(cfg.Compression)
	if err != nil {
		return settings{}, err
	}

	conn := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID(clientID)}
	opts := []kgo.Opt{
		kgo.RecordPartitioner(newPartitioner(cfg.Partitioner == "sarama")),
		kgo.ProducerBatchMaxBytes(int32(maxBytes)),
		// A batch inherits the deadline of its first record, which may
		// have lingered.
		kgo.RecordDeliveryTimeout(timeout + linger),
		kgo.RecordRetries(retries),
		kgo.UnknownTopicRetries(unknownTopicRetries),
		kgo.ProducerLinger(linger),
		kgo.ProducerBatchCompression(codec),
	}
	if maxBytes > defaultBrokerWriteBytes {
		opts = append(opts, kgo.BrokerMaxWriteBytes(maxBatchBytes))
	}
	if cfg.AutoCreateTopics {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	if cfg.SASL != nil {
		mech, err := saslMechanism(cfg.SASL)
		if err != nil {
			return settings{}, err
		}
		conn = append(conn, kgo.SASL(mech))
	}
	if cfg.TLS != nil && cfg.TLS.Enabled {
		// No server name: franz-go checks each broker's certificate
		// against that broker's host.
		tc, err := cfg.TLS.Load("")
		if err != nil {
			return settings{}, err
		}
		conn = append(conn, kgo.DialTLSConfig(tc))
	}
	// Without cancel an idempotent record whose request got no answer can
	// be neither timed out nor cancelled, and Publish could wait for it
	// indefinitely. The cost is a possible duplicate when the relay retries
	// such a record, which consumers dedupe by event id.
	return settings{maxBytes: maxBytes, kgoOpts: append(slices.Clone(conn), opts...), connOpts: conn,
		cancel: kgo.AllowIdempotentProduceCancellation()}, nil
}

func compression(name string) (kgo.CompressionCodec, error) {
	switch strings.ToLower(name) {
	case "", "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("unknown compression %q", name)
}

func saslMechanism(s *config.SASL) (sasl.Mechanism, error) {
	switch strings.ToUpper(s.Mechanism) {
	case "PLAIN":
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("sasl: unknown mechanism %q", s.Mechanism)
}
