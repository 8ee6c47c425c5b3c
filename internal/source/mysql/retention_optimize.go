package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// TableStats describe a table's size as information_schema.TABLES reports
// it. InnoDB's figures are estimates from its statistics, refreshed by
// ANALYZE TABLE (which OPTIMIZE TABLE includes) and in the background.
type TableStats struct {
	DataBytes  int64 // the clustered index: the rows
	IndexBytes int64 // the secondary indexes
	FreeBytes  int64 // allocated to the table and unused (DATA_FREE)
	Rows       int64 // estimated
}

// Total is the table's size: data and indexes.
func (s TableStats) Total() int64 { return s.DataBytes + s.IndexBytes }

// OptimizeResult is a table's state before and after Optimize.
type OptimizeResult struct {
	Before, After TableStats
	Took          time.Duration
}

// Optimize runs OPTIMIZE TABLE on table t. InnoDB carries it out as a
// rebuild of the table and an analyze: the space held by deleted rows is
// given back (to the operating system with a tablespace per table) and the
// statistics are refreshed. The rebuild is online (ALGORITHM=INPLACE):
// reads and writes go on during it, but it takes an exclusive metadata
// lock at its start and end, which waits for open transactions on the table
// (a claim in flight) and holds new statements back while it waits; run it
// when the table is quiet. The user needs SELECT and INSERT on the table.
func Optimize(ctx context.Context, db *sql.DB, t Table) (OptimizeResult, error) {
	var res OptimizeResult
	if err := t.Validate(); err != nil {
		return res, fmt.Errorf("optimize: %w", err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("optimize %s: connection: %w", t, err)
	}
	defer conn.Close()
	// MySQL 8 caches information_schema's table statistics for a day;
	// MariaDB has no such cache (nor the variable).
	if _, err := conn.ExecContext(ctx, "SET SESSION information_schema_stats_expiry = 0"); err != nil && !isUnknownVariable(err) {
		return res, fmt.Errorf("optimize %s: %w", t, err)
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION information_schema_stats_expiry = DEFAULT")
	}()
	if res.Before, err = tableStats(ctx, conn, t); err != nil {
		return res, err
	}
	start := time.Now()
	if err := optimizeTable(ctx, conn, t); err != nil {
		if isPrivilegeError(err) {
			return res, fmt.Errorf("optimize %s: %w: %w", t, source.ErrNoPrivilege, err)
		}
		return res, fmt.Errorf("optimize %s: %w", t, err)
	}
	res.Took = time.Since(start)
	if res.After, err = tableStats(ctx, conn, t); err != nil {
		return res, err
	}
	return res, nil
}

// optimizeTable runs OPTIMIZE TABLE, which reports its failures as rows of
// its result (Msg_type "error") rather than as an error; InnoDB's note that
// it recreates the table instead is no failure.
func optimizeTable(ctx context.Context, conn *sql.Conn, t Table) error {
	rows, err := conn.QueryContext(ctx, "OPTIMIZE TABLE "+t.String())
	if err != nil {
		return err
	}
	defer rows.Close()
	var msgs []string
	for rows.Next() {
		var table, op, typ, text sql.NullString
		if err := rows.Scan(&table, &op, &typ, &text); err != nil {
			return err
		}
		if strings.EqualFold(typ.String, "error") {
			msgs = append(msgs, text.String)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(msgs) > 0 {
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

// tableStats reads t's sizes.
func tableStats(ctx context.Context, conn *sql.Conn, t Table) (TableStats, error) {
	var s TableStats
	schemaExpr, args := "DATABASE()", []any{t.Name}
	if t.Schema != "" {
		schemaExpr, args = "?", []any{t.Schema, t.Name}
	}
	err := conn.QueryRowContext(ctx, `SELECT COALESCE(DATA_LENGTH, 0), COALESCE(INDEX_LENGTH, 0), COALESCE(DATA_FREE, 0), COALESCE(TABLE_ROWS, 0)
FROM information_schema.TABLES WHERE TABLE_SCHEMA = `+schemaExpr+` AND TABLE_NAME = ?`, args...).
		Scan(&s.DataBytes, &s.IndexBytes, &s.FreeBytes, &s.Rows)
	if errors.Is(err, sql.ErrNoRows) {
		return s, fmt.Errorf("size of %s: table not found", t)
	}
	if err != nil {
		return s, fmt.Errorf("size of %s: %w", t, err)
	}
	return s, nil
}

// isUnknownVariable says whether the server does not know a system
// variable (error 1193).
func isUnknownVariable(err error) bool {
	me, ok := errors.AsType[*gomysql.MySQLError](err)
	return ok && me.Number == 1193
}
