package webhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// maxReadBody bounds how much of a response body is read to find an error
// code.
const maxReadBody = 64 << 10

// errNotSent is the cause given to messages not sent because an earlier
// message of their key failed in the same call.
var errNotSent = errors.New("not sent: an earlier message of its key failed")

// Publish sends msgs and returns one result per message. Messages of one
// key (sink.OrderKey) are sent one after another in the order given; once
// one fails, the rest of that key fail unsent (retryable). Keys go
// concurrently, at most Config.Concurrency requests at a time across all
// calls.
func (p *Publisher) Publish(ctx context.Context, msgs []*sink.Message) []error {
	errs := make([]error, len(msgs))
	groups := groupByKey(msgs)
	// At most Concurrency workers take keys in turn; each request also
	// takes a slot shared by every call.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(groups), p.cfg.Concurrency) {
		wg.Go(func() {
			for {
				g := int(next.Add(1)) - 1
				if g >= len(groups) {
					return
				}
				p.sendInOrder(ctx, msgs, groups[g], errs)
			}
		})
	}
	wg.Wait()
	return errs
}

// groupByKey returns the indexes of msgs grouped by order key, in the order
// given. Messages without a key form groups of one.
func groupByKey(msgs []*sink.Message) [][]int {
	groups := make([][]int, 0, len(msgs))
	byKey := make(map[string]int, len(msgs))
	for i, m := range msgs {
		k := sink.OrderKey(m)
		if k == "" && m.Key == nil && m.PartitionKey == nil {
			groups = append(groups, []int{i})
			continue
		}
		if g, ok := byKey[k]; ok {
			groups[g] = append(groups[g], i)
			continue
		}
		byKey[k] = len(groups)
		groups = append(groups, []int{i})
	}
	return groups
}

// sendInOrder sends the messages at idx one by one and stops at the first
// failure.
func (p *Publisher) sendInOrder(ctx context.Context, msgs []*sink.Message, idx []int, errs []error) {
	for j, i := range idx {
		err := p.send(ctx, msgs[i])
		errs[i] = err
		if err == nil {
			continue
		}
		for _, k := range idx[j+1:] {
			errs[k] = fmt.Errorf("message %s: %w (%v)", msgs[k].ID, errNotSent, err)
		}
		return
	}
}

// send sends one message and classifies the outcome.
func (p *Publisher) send(ctx context.Context, m *sink.Message) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("message %s not sent: %w", m.ID, err)
	}
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("message %s not sent: %w", m.ID, ctx.Err())
	}
	defer func() { <-p.sem }()

	rctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := p.newRequest(rctx, m)
	if err != nil {
		return fmt.Errorf("message %s: %w", m.ID, err)
	}
	start := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		// Network failure, timeout or cancellation: the server may or may
		// not have the message; a retry is safe (Idempotency-Key).
		if m.Receipt != nil {
			m.Receipt.Latency = time.Since(start)
			if errors.Is(err, context.DeadlineExceeded) {
				m.Receipt.Code = "TIMEOUT"
			}
		}
		err = fmt.Errorf("message %s: %w", m.ID, err)
		if sink.IsConnectError(err) && ctx.Err() == nil {
			// Nothing was sent: the receiver is not there.
			err = sink.Down(err)
		}
		return err
	}
	defer drain(resp.Body)
	ok := resp.StatusCode >= 200 && resp.StatusCode <= 299
	if ok && m.Receipt == nil {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReadBody))
	if m.Receipt != nil {
		m.Receipt.Latency = time.Since(start)
		m.Receipt.Code = cmp.Or(codeAt(body, p.cfg.ErrorCodes.Path), strconv.Itoa(resp.StatusCode))
		m.Receipt.Reference = codeAt(body, p.cfg.ReferencePath)
	}
	if ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("message %s: HTTP %d, reading the body: %w", m.ID, resp.StatusCode, err)
	}
	err = p.classify(req, resp, body)
	p.logger.DebugContext(ctx, "webhook refused a message",
		slog.String("message_id", m.ID), slog.Int("status", resp.StatusCode),
		slog.Bool("terminal", sink.IsTerminal(err)), slog.String("error", err.Error()))
	return fmt.Errorf("message %s: %w", m.ID, err)
}
