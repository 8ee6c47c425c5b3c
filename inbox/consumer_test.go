package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestConsumerKilledAndRestarted: a topic where every event is written
// twice, read by a consumer group whose consumer is stopped at random
// moments (its offsets not committed, its transaction cut) and restarted:
// each event's side effect happens once.
func TestConsumerKilledAndRestarted(t *testing.T) {
	const events = 300
	ctx := context.Background()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range events {
		for range 2 { // every event twice: a relay's retry
			r := &kgo.Record{Topic: "events", Key: []byte(fmt.Sprint(i % 17)), Value: []byte(fmt.Sprint(i)),
				Headers: []kgo.RecordHeader{{Key: inbox.EventIDHeader, Value: []byte(fmt.Sprintf("event-%d", i))}}}
			if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	dsn, drop, err := pgtest.TempDatabase("CREATE TABLE effects (event_id TEXT NOT NULL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := inbox.Migrate(ctx, db, inbox.Postgres); err != nil {
		t.Fatal(err)
	}
	in := inbox.New(inbox.Postgres, inbox.Own, "ledger", 0)
	var skipped atomic.Int64
	consume := func(ctx context.Context) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("ledger"), kgo.ConsumeTopics("events"),
			kgo.DisableAutoCommit(), kgo.FetchMaxBytes(2048))
		if err != nil {
			return err
		}
		defer cl.Close() // no commit: a crash
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			var done []*kgo.Record
			for _, r := range fs.Records() {
				ran, err := in.Process(ctx, db, inbox.EventID(r), func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, "INSERT INTO effects (event_id) VALUES ($1)", inbox.EventID(r))
					return err
				})
				if ctx.Err() != nil {
					return ctx.Err() // killed mid-transaction: whatever the driver said
				}
				if err != nil {
					return err
				}
				if !ran {
					skipped.Add(1)
				}
				done = append(done, r)
			}
			if err := cl.CommitRecords(ctx, done...); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return err
			}
		}
		return nil
	}
	count := func() (distinct, total int) {
		_ = db.QueryRowContext(ctx, "SELECT count(DISTINCT event_id), count(*) FROM effects").Scan(&distinct, &total)
		return
	}
	for run := 0; ; run++ {
		cctx, cancel := context.WithCancel(ctx)
		if run < 6 {
			time.AfterFunc(time.Duration(20+rand.N(80))*time.Millisecond, cancel) // a kill at a random moment
		}
		errc := make(chan error, 1)
		go func() { errc <- consume(cctx) }()
		if run >= 6 {
			deadline := time.Now().Add(30 * time.Second)
			for d, _ := count(); d < events && time.Now().Before(deadline); d, _ = count() {
				time.Sleep(20 * time.Millisecond) // polling the database for the consumer's progress
			}
			cancel()
		}
		if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		cancel()
		if d, _ := count(); d == events {
			break
		}
	}
	d, total := count()
	t.Logf("%d events processed once each after 6 kills; %d duplicate deliveries skipped", d, skipped.Load())
	if d != events || total != events {
		t.Errorf("%d events processed, %d side effects: want %d each once", d, total, events)
	}
	if skipped.Load() < events {
		t.Errorf("only %d duplicates skipped: the topic holds every event twice", skipped.Load())
	}
}
