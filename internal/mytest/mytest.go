// Package mytest gives tests a fresh MySQL/MariaDB database of their own on
// the server named by OUTBOX_RELAY_TEST_MYSQL (default: the local server,
// root with no password). Each database is dropped when its test ends.
package mytest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// DefaultDSN is used when OUTBOX_RELAY_TEST_MYSQL is not set.
const DefaultDSN = "root@tcp(127.0.0.1:3306)/"

// AdminDSN is the DSN tests connect to for creating databases.
func AdminDSN() string {
	if v := os.Getenv("OUTBOX_RELAY_TEST_MYSQL"); v != "" {
		return v
	}
	return DefaultDSN
}

// Suffix returns a short random lower-case suffix for unique names.
func Suffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// WithDB returns dsn naming database name.
func WithDB(t testing.TB, dsn, name string) string {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	cfg.DBName = name
	return cfg.FormatDSN()
}

// WithUser returns dsn with the user and password replaced.
func WithUser(t testing.TB, dsn, user, password string) string {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	cfg.User, cfg.Passwd = user, password
	return cfg.FormatDSN()
}

// Admin opens a plain connection pool on the admin DSN, closed when the
// test ends.
func Admin(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", AdminDSN())
	if err != nil {
		t.Fatalf("open %s: %v", AdminDSN(), err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("connect to MySQL at %s (start it with scripts/services.sh mariadb): %v", AdminDSN(), err)
	}
	return db
}

// NewDatabase creates an empty database with a unique name and returns the
// name and a DSN naming it. The database is dropped when the test ends.
func NewDatabase(t testing.TB, prefix string) (string, string) {
	t.Helper()
	admin := Admin(t)
	name := prefix + "_" + Suffix()
	Exec(t, admin, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4")
	t.Cleanup(func() { Drop(t, name) })
	return name, WithDB(t, AdminDSN(), name)
}

// Exec runs SQL statements or fails the test.
func Exec(t testing.TB, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.ExecContext(context.Background(), s); err != nil {
			t.Fatalf("exec %q: %v", s, err)
		}
	}
}

// Drop drops a database, failing on nothing: a test's leftovers are logged.
// A transaction the test left open cannot hold the drop for more than 20s.
func Drop(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("mysql", AdminDSN())
	if err != nil {
		t.Logf("drop database %s: %v", name, err)
		return
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, "SET SESSION lock_wait_timeout = 20"); err != nil {
		t.Logf("drop database %s: %v", name, err)
	}
	if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
		t.Logf("drop database %s: %v", name, err)
	}
}
