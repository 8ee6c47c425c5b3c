package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// DatabaseName is the database dsn (a URL or keyword/value settings)
// connects to.
func DatabaseName(dsn string) (string, error) {
	c, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", err
	}
	if c.Database == "" {
		return "", errors.New("the connection string names no database")
	}
	return c.Database, nil
}

// WithDatabase returns dsn connecting to database name instead.
func WithDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse dsn: %w", err)
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	// Keyword/value settings: the last dbname given wins.
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(name)
	return strings.TrimSpace(dsn) + " dbname='" + quoted + "'", nil
}

// listDatabasesSQL lists a server's databases but its templates.
const listDatabasesSQL = `SELECT datname FROM pg_catalog.pg_database WHERE NOT datistemplate ORDER BY datname`

// ListDatabases lists the databases of the server p.DSN connects to, on a
// connection of its own: every one but the templates, or those p.Query
// returns in its first column.
func ListDatabases(ctx context.Context, p driver.ListParams) ([]string, error) {
	conn, err := pgx.Connect(ctx, p.DSN)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	q := listDatabasesSQL
	if p.Query != "" {
		q = p.Query
	}
	rows, err := conn.Query(ctx, q, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	var names []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, fmt.Errorf("list databases: %w", err)
		}
		name, ok := vals[0].(string)
		if !ok {
			rows.Close()
			return nil, fmt.Errorf("list databases: the first column must be text, got %T", vals[0])
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	return names, nil
}
