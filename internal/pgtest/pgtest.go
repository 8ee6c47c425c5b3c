// Package pgtest gives tests a fresh PostgreSQL database of their own on the
// server named by OUTBOX_RELAY_TEST_PG (default: the local server, user
// postgres, trust auth). Each database is dropped when its test ends.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultDSN is used when OUTBOX_RELAY_TEST_PG is not set.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminDSN is the DSN tests connect to for creating databases.
func AdminDSN() string {
	if v := os.Getenv("OUTBOX_RELAY_TEST_PG"); v != "" {
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

// NewDB creates an empty database and returns its DSN and a pool on it.
func NewDB(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	dsn, drop, err := TempDatabase("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", dsn, err)
	}
	t.Cleanup(pool.Close)
	return dsn, pool
}

// TempDatabase creates a database, runs ddl in it (when not empty), and
// returns its DSN and a function that drops it, for tests and runnable
// examples.
func TempDatabase(ddl string) (dsn string, drop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminDSN())
	if err != nil {
		return "", nil, fmt.Errorf("connect to PostgreSQL at %s (start it with scripts/services.sh postgres): %w", AdminDSN(), err)
	}
	defer admin.Close(ctx)
	name := "outbox_test_" + Suffix()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, AdminDSN())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	u, err := url.Parse(AdminDSN())
	if err != nil {
		drop()
		return "", nil, fmt.Errorf("parse %s: %w", AdminDSN(), err)
	}
	u.Path = "/" + name
	dsn = u.String()
	if ddl != "" {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			drop()
			return "", nil, err
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, ddl); err != nil {
			drop()
			return "", nil, fmt.Errorf("exec ddl: %w", err)
		}
	}
	return dsn, drop, nil
}

// Exec runs SQL statements or fails the test.
func Exec(t testing.TB, pool *pgxpool.Pool, sql ...string) {
	t.Helper()
	for _, s := range sql {
		if _, err := pool.Exec(context.Background(), s); err != nil {
			t.Fatalf("exec %q: %v", s, err)
		}
	}
}

// WithUser returns dsn with the user (and no password) replaced.
func WithUser(t testing.TB, dsn, user string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	u.User = url.User(user)
	return u.String()
}

// Pool opens a pool on dsn whose sessions carry applicationName, closed when
// the test ends.
func Pool(t testing.TB, dsn, applicationName string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = applicationName
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// OwnPool opens a pool of at most four connections on dsn whose sessions
// carry an application_name of their own, and returns it with the Killer
// that cuts them all at once through admin. When the test ends its
// connections are cut and it is closed in the background: a claim a
// failed test left open would keep Close waiting.
func OwnPool(t testing.TB, dsn string, admin *pgxpool.Pool) (*pgxpool.Pool, Killer) {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	k := Killer{admin: admin, app: "sourcetest_" + Suffix()}
	pc.ConnConfig.RuntimeParams["application_name"] = k.app
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k.kill(context.Background())
		go pool.Close()
	})
	return pool, k
}

// Killer cuts every session of one pool at once, as a crash or a network
// failure would, without telling the pool.
type Killer struct {
	admin *pgxpool.Pool
	app   string
}

func (k Killer) kill(ctx context.Context) error {
	_, err := k.admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", k.app)
	return err
}

// Kill cuts the sessions, failing the test if it cannot.
func (k Killer) Kill(t *testing.T) {
	t.Helper()
	if err := k.kill(context.Background()); err != nil {
		t.Fatalf("kill connections: %v", err)
	}
}
