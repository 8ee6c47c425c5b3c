package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// errHeld answers a message that was not sent because an earlier message
// with the same key failed. It is retryable.
var errHeld = errors.New("not sent: an earlier message with the same key failed")

type state uint8

const (
	stateSending state = iota // handed to the client, no answer yet
	stateOK
	stateFailed // err is the client's error, not classified yet
	stateFinal  // err is the answer
)

// outcome is what became of one message of a Publish call.
type outcome struct {
	topic string
	// key identifies the message's order within the call: destination
	// and partition key (else key). "" when the message has neither.
	key   string
	part  int32 // partition, -1 until known
	state state
	err   error
}

// call is one Publish call.
type call struct {
	p    *Publisher
	msgs []*sink.Message
	out  []outcome
	wg   sync.WaitGroup

	mu        sync.Mutex
	failed    map[string]bool // keys with a failure seen while sending
	abandoned bool            // ctx ended: answers arriving now are ignored
}

// Publish produces msgs in order and waits for each to be acknowledged or to
// fail; see the package documentation for the ordering guarantees and the
// classification of errors. If ctx ends first, the messages still waiting
// are answered with ctx's error; the client may yet deliver them.
func (p *Publisher) Publish(ctx context.Context, msgs []*sink.Message) []error {
	c := &call{p: p, msgs: msgs, out: make([]outcome, len(msgs)), failed: make(map[string]bool)}
	c.send(ctx)
	c.wait(ctx)
	order(c.out)
	if ctx.Err() == nil {
		c.isolate(ctx)
	}
	errs := make([]error, len(c.out))
	for i, o := range c.out {
		switch o.state {
		case stateOK:
		case stateFailed:
			errs[i] = result(o.topic, o.err)
		default:
			errs[i] = o.err
		}
	}
	return errs
}

func (c *call) send(ctx context.Context) {
	for i, m := range c.msgs {
		o := &c.out[i]
		o.part = -1
		if err := c.p.check(m); err != nil {
			o.state, o.err = stateFinal, err
			continue
		}
		o.topic, o.key = m.Destination, routingKey(m)
		c.mu.Lock()
		held := o.key != "" && c.failed[o.key]
		c.mu.Unlock()
		switch {
		case ctx.Err() != nil:
			o.state, o.err = stateFinal, fmt.Errorf("produce to topic %q: %w", o.topic, ctx.Err())
		case held:
			o.state, o.err = stateFinal, fmt.Errorf("produce to topic %q: %w", o.topic, errHeld)
		default:
			c.wg.Add(1)
			c.p.client.Produce(ctx, c.p.record(ctx, m), func(r *kgo.Record, err error) {
				c.answer(i, r, err)
			})
		}
	}
}

// answer runs on franz-go's promise goroutine, one answer at a time.
func (c *call) answer(i int, r *kgo.Record, err error) {
	defer c.wg.Done()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.abandoned {
		return
	}
	o := &c.out[i]
	o.part = r.Partition
	if err == nil {
		o.state = stateOK
		return
	}
	o.state, o.err = stateFailed, err
	// Every message of an unusable topic fails anyway: holding the rest
	// back would only make their terminal answers retryable.
	if o.key != "" && classify(err) != badTopic {
		c.failed[o.key] = true
	}
}

func (c *call) wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.abandoned = true
	for i := range c.out {
		if o := &c.out[i]; o.state == stateSending {
			o.state, o.err = stateFinal, fmt.Errorf("produce to topic %q: %w", o.topic, ctx.Err())
		}
	}
}

func (p *Publisher) check(m *sink.Message) error {
	switch {
	case m == nil:
		return sink.Terminal(errors.New("nil message"))
	case m.Destination == "":
		return sink.Terminal(fmt.Errorf("message %q: no destination topic", m.ID))
	case len(m.Payload) > p.maxBytes:
		return sink.Terminal(fmt.Errorf("produce to topic %q: payload of %d bytes exceeds %d: %w",
			m.Destination, len(m.Payload), p.maxBytes, kerr.MessageTooLarge))
	}
	return nil
}

func routingKey(m *sink.Message) string {
	key := m.PartitionKey
	if key == nil {
		key = m.Key
	}
	if key == nil {
		return ""
	}
	return m.Destination + "\x00" + string(key)
}

func (p *Publisher) record(ctx context.Context, m *sink.Message) *kgo.Record {
	r := &kgo.Record{Topic: m.Destination, Key: m.Key, Value: m.Payload, Partition: -1, Context: ctx}
	if m.PartitionKey != nil {
		r.Context = withPartitionKey(ctx, m.PartitionKey)
	}
	if len(m.Headers) > 0 {
		r.Headers = make([]kgo.RecordHeader, len(m.Headers))
		for i, h := range m.Headers {
			r.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	return r
}

// produceOne produces m on its own and waits for its answer or for ctx.
func (p *Publisher) produceOne(ctx context.Context, m *sink.Message) error {
	answer := make(chan error, 1)
	p.client.Produce(ctx, p.record(ctx, m), func(_ *kgo.Record, err error) { answer <- err })
	select {
	case err := <-answer:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
