package mysql

import (
	"context"
	"database/sql"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Status reads every source's state as the relays recorded it in relayDB
// (see source.StatusSQL).
func Status(ctx context.Context, db *sql.DB, relayDB string) ([]source.Recorded, error) {
	rows, err := db.QueryContext(ctx, source.StatusSQL(QuoteIdent(relayDB), "UTC_TIMESTAMP(6)", "COALESCE(s.sink_states, '{}')"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	return source.ScanStatus(rows)
}

// Replicas lists the live replicas registered in relayDB (see
// source.ReplicasSQL).
func Replicas(ctx context.Context, db *sql.DB, relayDB string) ([]source.Replica, error) {
	rows, err := db.QueryContext(ctx, source.ReplicasSQL(QuoteIdent(relayDB), "UTC_TIMESTAMP(6)"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	return source.ScanReplicas(rows)
}

// samples are relayDB's sample statements.
func samples(relayDB string) source.SampleStatements {
	return source.NewSampleStatements(QuoteIdent(relayDB), "UTC_TIMESTAMP(6)", func(int) string { return "?" })
}

// RecordSamples writes samples and prunes those past source.SampleSpan.
func RecordSamples(ctx context.Context, db *sql.DB, relayDB string, xs []source.Sample) error {
	st := samples(relayDB)
	if len(xs) > 0 {
		if _, err := db.ExecContext(ctx, st.Insert(len(xs)), source.InsertArgs(xs)...); err != nil {
			return err
		}
	}
	_, err := db.ExecContext(ctx, st.Prune())
	return err
}

// Samples reads the samples of the last source.SampleSpan.
func Samples(ctx context.Context, db *sql.DB, relayDB string) ([]source.Sample, error) {
	rows, err := db.QueryContext(ctx, samples(relayDB).Read())
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	return source.ScanSamples(rows)
}
