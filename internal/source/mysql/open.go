package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// DefaultClaimTimeout is how long a claim may stay open without a word
// from its relay before the server drops the connection and rolls the claim
// back.
const DefaultClaimTimeout = 10 * time.Minute

// ConnOptions tune the connections Open makes.
type ConnOptions struct {
	// ClaimTimeout is every connection's wait_timeout: a connection (and so
	// a claim's transaction) left silent that long is closed by the server,
	// which rolls the claim back. Zero takes the DSN's wait_timeout
	// parameter (seconds) when it has one, else DefaultClaimTimeout.
	ClaimTimeout time.Duration
	// Owner, when set, marks every connection as this relay process's (a
	// named lock per connection), so that a replica taking over a source
	// can wait for this process's open claims (Leases.WaitForOwner).
	Owner string
}

// Open opens a connection pool on dsn (go-sql-driver's format,
// user:pass@tcp(host:3306)/db?params) set up as the relay needs it: times
// parsed in UTC (parseTime, loc=UTC, session time_zone '+00:00'), parameters
// interpolated client-side (one round trip a statement), READ COMMITTED
// transactions (claims take no gap locks, so applications keep inserting
// while a batch is held) and wait_timeout set to the claim timeout.
func Open(dsn string) (*sql.DB, error) { return OpenWith(dsn, ConnOptions{}) }

// OpenWith is Open with options.
func OpenWith(dsn string, o ConnOptions) (*sql.DB, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse mysql dsn: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	timeout := o.ClaimTimeout
	if v, ok := cfg.Params["wait_timeout"]; ok {
		if timeout == 0 {
			secs, err := strconv.Atoi(v)
			if err != nil || secs <= 0 {
				return nil, fmt.Errorf("parse mysql dsn: wait_timeout %q is not a positive number of seconds", v)
			}
			timeout = time.Duration(secs) * time.Second
		}
		delete(cfg.Params, "wait_timeout")
	}
	delete(cfg.Params, "time_zone") // always UTC
	if timeout <= 0 {
		timeout = DefaultClaimTimeout
	}
	inner, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql connector: %w", err)
	}
	c := &connector{inner: inner, waitTimeout: waitSeconds(timeout)}
	if o.Owner != "" {
		c.ownerPrefix = ownerConnPrefix(o.Owner)
	}
	db := sql.OpenDB(c)
	// An idle connection is retired before the server would close it.
	db.SetConnMaxIdleTime(min(timeout/2, 5*time.Minute))
	return db, nil
}

// waitSeconds rounds a timeout up to whole seconds, at least one.
func waitSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// ownerConnPrefix names the locks that mark an owner's connections; the
// connection id follows it. Lock names are limited to 64 characters, hence
// the digest.
func ownerConnPrefix(owner string) string {
	h := sha256.Sum256([]byte(owner))
	return "outbox-relay " + hex.EncodeToString(h[:10]) + " conn "
}

// ownerLiveLock is the lock a Leases holds while its process lives.
//
// LeaseStore.Census computes the same name in SQL: keep them together.
func ownerLiveLock(owner string) string {
	h := sha256.Sum256([]byte(owner))
	return "outbox-relay " + hex.EncodeToString(h[:10]) + " live"
}

// ownerRingLock is the lock the replicas ringing owner's bell take turns
// with (see LeaseStore.Ring).
func ownerRingLock(owner string) string {
	h := sha256.Sum256([]byte(owner))
	return "outbox-relay " + hex.EncodeToString(h[:10]) + " ring"
}

// connector sets up each new connection before database/sql uses it.
type connector struct {
	inner       driver.Connector
	waitTimeout int
	ownerPrefix string
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		_ = conn.Close()
		return nil, errors.New("mysql driver connection cannot execute statements")
	}
	stmts := []string{
		"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
		"SET time_zone = '+00:00', wait_timeout = " + strconv.Itoa(c.waitTimeout),
	}
	if c.ownerPrefix != "" {
		stmts = append(stmts, "DO GET_LOCK(CONCAT("+quoteLiteral(c.ownerPrefix)+", CONNECTION_ID()), 0)")
	}
	for _, s := range stmts {
		if _, err := ex.ExecContext(ctx, s, nil); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("set up mysql connection (%s): %w", s, err)
		}
	}
	return conn, nil
}

func (c *connector) Driver() driver.Driver { return relayDriver{c.inner.Driver(), c.waitTimeout} }

// relayDriver marks a pool made by Open: its connections are already set
// up, so claims need no statements of their own for it.
type relayDriver struct {
	driver.Driver
	waitTimeout int // every connection's wait_timeout, in seconds
}

// poolWaitTimeout returns the wait_timeout Open gave db's connections, and
// whether db was made by Open at all.
func poolWaitTimeout(db *sql.DB) (int, bool) {
	d, ok := db.Driver().(relayDriver)
	return d.waitTimeout, ok
}
