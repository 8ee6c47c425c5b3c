package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// systemSchemas are the server's own databases, never listed.
var systemSchemas = []string{"mysql", "information_schema", "performance_schema", "sys"}

// DatabaseName is the database dsn connects to.
func DatabaseName(dsn string) (string, error) {
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("parse mysql dsn: %w", err)
	}
	if c.DBName == "" {
		return "", errors.New("the connection string names no database")
	}
	return c.DBName, nil
}

// WithDatabase returns dsn connecting to database name instead.
func WithDatabase(dsn, name string) (string, error) {
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("parse mysql dsn: %w", err)
	}
	c.DBName = name
	return c.FormatDSN(), nil
}

const listDatabasesSQL = `SELECT SCHEMA_NAME FROM information_schema.SCHEMATA ORDER BY SCHEMA_NAME`

// ListDatabases lists the databases of the server p.DSN connects to, on a
// connection of its own: those p.Query returns in its first column, or
// every one; never the system schemas nor the relay's own database.
func ListDatabases(ctx context.Context, p driver.ListParams) ([]string, error) {
	c, err := gomysql.ParseDSN(p.DSN)
	if err != nil {
		return nil, fmt.Errorf("parse mysql dsn: %w", err)
	}
	conn, err := gomysql.NewConnector(c)
	if err != nil {
		return nil, fmt.Errorf("mysql connector: %w", err)
	}
	db := sql.OpenDB(conn)
	defer func() { _ = db.Close() }()
	db.SetMaxOpenConns(1)
	q := listDatabasesSQL
	if p.Query != "" {
		q = p.Query
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	defer func() { _ = rows.Close() }()
	cols, err := rows.Columns()
	if err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	relayDB := p.RelaySchema
	if relayDB == "" {
		relayDB = DefaultRelayDatabase
	}
	var names []string
	for rows.Next() {
		var name sql.NullString
		dest := make([]any, len(cols))
		dest[0] = &name
		for i := 1; i < len(dest); i++ {
			dest[i] = new(sql.RawBytes)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("list databases: %w", err)
		}
		if name.Valid && name.String != relayDB && !slices.Contains(systemSchemas, name.String) {
			names = append(names, name.String)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	return names, nil
}
