package app

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/internal/sink"
	"github.com/outbox-relay/outbox-relay/internal/sink/kafka"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// exactlyOnceProducers is how many transactional producers a source uses in
// turn: a batch's transaction runs while the previous one commits.
const exactlyOnceProducers = 2

// exactlyOnce builds the workers of a source with delivery exactly_once:
// each lease term gets a transactional producer of its own, whose id is
// the source's, so that its takeover fences the previous holder's; before
// its first claim, the worker marks in the database what the previous
// holder's committed transactions delivered.
func (a *App) exactlyOnce(s *Source, opts relay.Options) func() *relay.Worker {
	sc := a.cfg.Sinks[s.Config.Sink]
	topic := cmp.Or(sc.ProgressTopic, config.DefaultProgressTopic)
	txnID := kafka.TransactionalID("outbox-relay."+a.cfg.RelaySchema+".", s.Name)
	log := a.log.With("source", s.Name, "sink", s.Config.Sink)
	return func() *relay.Worker {
		o := opts
		// Each producer's progress key is its transactional id: two
		// deployments (relay schemas) with a source of the same name share
		// a progress topic without reading each other's progress.
		sh, err := kafka.NewShard(sc, txnID, topic, exactlyOnceProducers, kafka.WithLogger(log), kafka.WithKgoOpts(a.kgoOpts...))
		if err != nil {
			o.Recover = func(context.Context) error { return fmt.Errorf("exactly-once producer: %w", err) }
			return relay.NewWorker(o)
		}
		// The sink's state, as relay_state records it for `status`, says
		// when the takeover fails, and why.
		pub := &takeoverState{Publisher: sh.Publisher()}
		o.Sink, o.Txn = pub, sh
		o.Routes = append([]relay.Route(nil), opts.Routes...)
		for i := range o.Routes {
			o.Routes[i].Sink = pub
		}
		o.Recover = func(ctx context.Context) error {
			ids, err := sh.Recover(ctx)
			pub.set(err)
			if err != nil {
				return err
			}
			m, ok := s.Store.(driver.Marker)
			if !ok {
				return fmt.Errorf("exactly-once: the store of %s cannot mark events published", s.Name)
			}
			n, err := m.MarkPublished(ctx, ids)
			if err != nil {
				return err
			}
			if n > 0 {
				log.Warn("exactly-once takeover: events the previous holder delivered to Kafka are now marked published", "events", n)
			}
			return nil
		}
		return relay.NewWorker(o)
	}
}

// takeoverFailing begins the state of a sink whose exactly-once takeover
// failed.
const takeoverFailing = "exactly-once takeover failing: "

// takeoverState is an exactly-once source's publisher whose state is that
// of its latest takeover: "ok", or why it failed.
type takeoverState struct {
	sink.Publisher
	failed atomic.Pointer[error]
}

func (t *takeoverState) set(err error) {
	if err == nil {
		t.failed.Store(nil)
		return
	}
	t.failed.Store(&err)
}

// Status is the publisher's state (see breaker.Publisher.Status).
func (t *takeoverState) Status() string {
	if p := t.failed.Load(); p != nil {
		return takeoverFailing + (*p).Error()
	}
	return "ok"
}
