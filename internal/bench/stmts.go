package bench

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// stmtCounter counts the statements the relay's connections send:
// every query (BEGIN and COMMIT included) and every statement of a batch.
// PostgreSQL has no per-database statement counter without an extension, so
// the benchmark counts on the client side.
type stmtCounter struct{ n atomic.Int64 }

func (c *stmtCounter) load() int64 {
	if c == nil {
		return 0
	}
	return c.n.Load()
}

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *stmtCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *stmtCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *stmtCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
