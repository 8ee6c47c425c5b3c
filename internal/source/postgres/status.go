package postgres

import (
	"context"

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
