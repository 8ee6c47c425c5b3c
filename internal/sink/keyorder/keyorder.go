// Package keyorder sends the messages of one Publish call with per-key
// order, for sinks whose broker confirms each message on its own (an AMQP
// publisher confirm, an MQTT PUBACK).
//
// Such a broker may refuse one message and accept the next one sent right
// behind it: a RabbitMQ queue at its length limit nacks a message, then
// accepts the next once a consumer made room; an MQTT server answers each
// PUBLISH with its own reason code. If a key's messages were pipelined, a
// later message could be delivered after an earlier one of its key failed,
// which the sink contract forbids. So Run keeps at most one message of a key
// unconfirmed: it sends the next one only once the previous one was
// confirmed. Different keys, and messages without a key, go concurrently, so
// a batch of many keys is still pipelined on the connection.
//
// Run sends from a goroutine a key, for clients whose send blocks until the
// broker's answer (MQTT); Pipeline sends from one goroutine, for clients
// that send at once and tell the answer later (a RabbitMQ confirm, a
// JetStream PubAck future).
//
// A retryable failure stops its key: the later messages of that key are not
// sent and fail with an error wrapping [ErrHeldBack] (retryable). A terminal
// failure does not stop the key: the failed message will never be published
// (it goes to the dead-letter table), so its successors may go on.
package keyorder

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// ErrHeldBack is wrapped by the error of a message that was not sent
// because an earlier message of its key failed retryably in the same call.
var ErrHeldBack = errors.New("not sent: an earlier message of its key failed")

// Send publishes msgs[i] and returns its result once the broker confirmed
// or refused it. It is called concurrently for messages of different keys.
type Send func(ctx context.Context, i int) error

// Run calls send for every message of msgs and returns one result per
// message: the messages of one sink.OrderKey one after another in the order
// given, at most limit sends at once overall (limit < 1 means one). A nil
// message is not passed to send; it fails terminally.
func Run(ctx context.Context, msgs []*sink.Message, limit int, send Send) []error {
	errs := make([]error, len(msgs))
	groups := group(msgs, errs)
	if len(groups) == 0 {
		return errs
	}
	limit = max(limit, 1)
	if len(groups) == 1 || limit == 1 {
		for _, g := range groups {
			runGroup(ctx, g, errs, send, nil)
		}
		return errs
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Go(func() { runGroup(ctx, g, errs, send, sem) })
	}
	wg.Wait()
	return errs
}

// group returns the indexes of msgs by order key, keys in order of first
// appearance; every message without a key is a group of its own.
func group(msgs []*sink.Message, errs []error) [][]int {
	var groups [][]int
	byKey := map[string]int{}
	for i, m := range msgs {
		if m == nil {
			errs[i] = sink.Terminal(errors.New("nil message"))
			continue
		}
		if m.Key == nil && m.PartitionKey == nil {
			groups = append(groups, []int{i})
			continue
		}
		k := sink.OrderKey(m)
		if g, ok := byKey[k]; ok {
			groups[g] = append(groups[g], i)
			continue
		}
		byKey[k] = len(groups)
		groups = append(groups, []int{i})
	}
	return groups
}

// runGroup sends one key's messages in order. sem, when not nil, bounds the
// sends in flight across groups.
func runGroup(ctx context.Context, idx []int, errs []error, send Send, sem chan struct{}) {
	for n, i := range idx {
		if err := ctx.Err(); err != nil {
			fail(idx[n:], errs, fmt.Errorf("not sent: %w", err))
			return
		}
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				fail(idx[n:], errs, fmt.Errorf("not sent: %w", ctx.Err()))
				return
			}
		}
		err := send(ctx, i)
		if sem != nil {
			<-sem
		}
		errs[i] = err
		if err != nil && !sink.IsTerminal(err) {
			fail(idx[n+1:], errs, fmt.Errorf("%w: %w", ErrHeldBack, err))
			return
		}
	}
}

func fail(idx []int, errs []error, err error) {
	for _, i := range idx {
		errs[i] = err
	}
}
