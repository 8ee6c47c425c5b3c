package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// RateResult is one steady or sparse run at a fixed rate.
type RateResult struct {
	Workload    string  `json:"workload"`
	Layout      string  `json:"layout"`
	Rate        int     `json:"rate"`
	RowsPerTx   int     `json:"rows_per_tx"`
	Achieved    float64 `json:"achieved_events_per_sec"`
	Committed   int     `json:"committed"`
	Received    int     `json:"received"`
	Duplicates  int     `json:"duplicates"`
	Latency     Latency `json:"commit_to_publish"`
	Sustainable bool    `json:"sustainable"`
	// IdleQueriesPerSec is the database's transactions per second while
	// the relay had nothing to do (sparse only).
	IdleQueriesPerSec float64 `json:"idle_queries_per_sec,omitempty"`
	// Relay is what the relay's own histograms recorded meanwhile.
	Relay RelayView `json:"relay"`
}

// atRate commits events at rate (rowsPerTx per transaction) for dur while the
// relay runs, then waits for them to arrive and reports the commit-to-publish
// latency. Sustainable means the producers kept the rate and every event
// arrived within two seconds of the last commit: the backlog did not grow.
func atRate(ctx context.Context, pool *pgxpool.Pool, brokers []string, t table, rate, rowsPerTx int, dur time.Duration, o Options) (RateResult, error) {
	res := RateResult{Layout: t.layout, Rate: rate, RowsPerTx: rowsPerTx}
	tr := newTracker()
	stop, err := consume(ctx, brokers, tr)
	if err != nil {
		return res, err
	}
	defer stop()
	producers := min(32, max(1, rate/(150*rowsPerTx)))
	interval := time.Duration(float64(time.Second) * float64(producers*rowsPerTx) / float64(rate))
	pad := strings.Repeat("x", max(o.PayloadBytes-40, 0))
	q := "INSERT INTO " + t.name() + " (aggregate_id, event_type, payload) SELECT unnest($1::text[]), 'bench.event', unnest($2::jsonb[]) RETURNING id"
	var committed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			keys, payloads := make([]string, rowsPerTx), make([]string, rowsPerTx)
			for k := 0; ; k++ {
				at := start.Add(time.Duration(k)*interval + time.Duration(p)*interval/time.Duration(producers))
				if at.After(deadline) || ctx.Err() != nil {
					return
				}
				if d := time.Until(at); d > 0 {
					time.Sleep(d)
				}
				for i := range keys {
					n := (k*producers+p)*rowsPerTx + i
					keys[i] = fmt.Sprintf("key-%d", n%o.Keys)
					payloads[i] = fmt.Sprintf(`{"seq":%d,"key":%q,"pad":%q}`, n, keys[i], pad)
				}
				rows, err := pool.Query(ctx, q, keys, payloads)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				ids := make([]int64, 0, rowsPerTx)
				for rows.Next() {
					var id int64
					_ = rows.Scan(&id)
					ids = append(ids, id)
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				tr.committed(ids, time.Now())
				committed.Add(int64(len(ids)))
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return res, fmt.Errorf("producer: %w", firstErr)
	}
	elapsed := time.Since(start)
	res.Committed = int(committed.Load())
	res.Achieved = float64(res.Committed) / elapsed.Seconds()
	end := time.Now()
	for tr.count() < res.Committed && time.Since(end) < 10*time.Second && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	res.Received = tr.count()
	res.Duplicates = tr.dups
	res.Latency = tr.latency()
	res.Sustainable = res.Received >= res.Committed && time.Since(end) < 2*time.Second && res.Achieved >= 0.95*float64(rate)
	return res, nil
}

// steady runs the relay and, for each rate and transaction size, atRate.
func steady(ctx context.Context, db pgDB, k kafkaEnv, o Options, layout, workload string) ([]RateResult, error) {
	pool := db.pool
	sp, ok := layoutSpecs[layout]
	if !ok {
		return nil, fmt.Errorf("unknown layout %q (have: delete, mark)", layout)
	}
	t := newTable(layout, sp.pg, db.dsn)
	if err := t.create(ctx, pool); err != nil {
		return nil, err
	}
	defer t.drop(context.WithoutCancel(ctx), pool)
	a, _, cleanup, err := openRelay(ctx, pgDBs{db}, kafkaTarget(k), o, t, true)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rctx, stopRelay := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	defer func() { stopRelay(); <-done }()
	time.Sleep(500 * time.Millisecond) // the relay's first claim, trigger and LISTEN

	var out []RateResult
	rates, txs := o.Rates, o.RowsPerTx
	if workload == "sparse" {
		rates, txs = []int{10}, []int{1}
	}
	for _, tx := range txs {
		for _, rate := range rates {
			progress(o, "%s %s: %d events/s, %d per transaction, for %s", workload, layout, rate, tx, o.Duration)
			before := relayHistos(a.Registry())
			r, err := atRate(ctx, pool, k.brokers, t, rate, tx, o.Duration, o)
			if err != nil {
				return out, err
			}
			r.Relay = relayView(before, relayHistos(a.Registry()))
			r.Workload = workload
			progress(o, "  p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms, sustainable %v", r.Latency.P50, r.Latency.P99, r.Latency.P999, r.Sustainable)
			progress(o, "  relay: commit to completion %.1f ms on average, %.1f%% within 5 ms; a batch: claim %.2f ms, publish %.2f ms, claim to completion %.2f ms (%d batches)",
				r.Relay.CommitToAck, 100*r.Relay.Within5ms, r.Relay.Claim, r.Relay.Publish, r.Relay.Batch, r.Relay.Batches)
			if workload == "sparse" {
				progress(o, "  measuring the idle relay's queries for 30 s")
				r.IdleQueriesPerSec, err = idleQueries(ctx, pool, 30*time.Second)
				if err != nil {
					return out, err
				}
			}
			out = append(out, r)
			if !r.Sustainable && workload == "steady" {
				break // higher rates will not be either
			}
		}
	}
	return out, nil
}

// idleQueries counts the database's transactions per second over d while
// nothing is written: what an idle relay costs. It first waits out
// PostgreSQL's statistics flush (backends report their counters up to 10 s
// late once idle), so the writes before do not count.
func idleQueries(ctx context.Context, pool *pgxpool.Pool, d time.Duration) (float64, error) {
	time.Sleep(12 * time.Second)
	before, err := readCounters(ctx, pool)
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	after, err := readCounters(ctx, pool)
	if err != nil {
		return 0, err
	}
	// Two of the transactions are our own readings.
	return float64(after.xacts-before.xacts-2) / d.Seconds(), nil
}
