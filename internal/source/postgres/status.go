package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Status reads every source's state as the relays recorded it in
// relaySchema (see source.StatusSQL).
func Status(ctx context.Context, pool *pgxpool.Pool, relaySchema string) ([]source.Recorded, error) {
	rows, err := pool.Query(ctx, source.StatusSQL(QuoteIdent(relaySchema), "now()", "s.sink_states::text"))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return source.ScanStatus(rows)
}

// Replicas lists the live replicas registered in relaySchema (see
// source.ReplicasSQL).
func Replicas(ctx context.Context, pool *pgxpool.Pool, relaySchema string) ([]source.Replica, error) {
	rows, err := pool.Query(ctx, source.ReplicasSQL(QuoteIdent(relaySchema), "now()"))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return source.ScanReplicas(rows)
}

// samples are relaySchema's sample statements.
func samples(relaySchema string) source.SampleStatements {
	return source.NewSampleStatements(QuoteIdent(relaySchema), "now()", func(i int) string { return fmt.Sprintf("$%d", i) })
}

// RecordSamples writes samples and prunes those past source.SampleSpan,
// in one round trip.
func RecordSamples(ctx context.Context, pool *pgxpool.Pool, relaySchema string, xs []source.Sample) error {
	st := samples(relaySchema)
	b := &pgx.Batch{}
	if len(xs) > 0 {
		b.Queue(st.Insert(len(xs)), source.InsertArgs(xs)...)
	}
	b.Queue(st.Prune())
	return pool.SendBatch(ctx, b).Close()
}

// Samples reads the samples of the last source.SampleSpan.
func Samples(ctx context.Context, pool *pgxpool.Pool, relaySchema string) ([]source.Sample, error) {
	rows, err := pool.Query(ctx, samples(relaySchema).Read())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return source.ScanSamples(rows)
}
