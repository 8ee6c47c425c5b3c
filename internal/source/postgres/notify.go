package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// triggerName is the name of the relay's wake-up trigger on outbox tables.
func triggerName(relaySchema string) string { return relaySchema + "_notify" }

// HasTrigger reports whether the wake-up trigger is installed on t.
func HasTrigger(ctx context.Context, pool *pgxpool.Pool, t Table, relaySchema string) (bool, error) {
	var ok bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger g
JOIN pg_class c ON c.oid = g.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND g.tgname = $3)`, t.Schema, t.Name, triggerName(relaySchema)).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up trigger on %s: %w", t, err)
	}
	return ok, nil
}

// InstallTrigger creates the statement-level AFTER INSERT trigger that
// notifies the relay's channel. It needs the table's ownership (or the
// TRIGGER privilege); without it, it returns an error wrapping
// source.ErrNoPrivilege and the relay falls back to polling.
//
// CREATE TRIGGER takes a lock that conflicts with the application's inserts;
// queued behind a long transaction it would hold up every insert after it.
// So it waits one second at most and gives up (the relay polls instead).
func InstallTrigger(ctx context.Context, pool *pgxpool.Pool, t Table, relaySchema string) error {
	if ok, err := HasTrigger(ctx, pool, t, relaySchema); err != nil || ok {
		return err
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '1s'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf("CREATE TRIGGER %s AFTER INSERT ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s.notify_outbox(%s)",
			QuoteIdent(triggerName(relaySchema)), t, QuoteIdent(relaySchema), quoteLiteral(relaySchema)))
		return err
	})
	if err != nil {
		if isPrivilegeError(err) {
			return fmt.Errorf("install notify trigger on %s: %w: %w", t, source.ErrNoPrivilege, err)
		}
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42710" {
			return nil // created concurrently by another replica
		}
		return fmt.Errorf("install notify trigger on %s: %w", t, err)
	}
	return nil
}

func isPrivilegeError(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (pgErr.Code == "42501" || pgErr.Code == "42809")
}

// Listener holds one connection that LISTENs on the relay's channel and
// wakes the sources whose table was written. After a reconnect it wakes all
// of them, since notifications may have been missed.
type Listener struct {
	dsn     string
	channel string
	log     *slog.Logger

	mu    sync.Mutex
	wakes map[string][]chan struct{} // "schema.table" -> wake channels
}

// NewListener listens on a channel of the database at dsn: the relay
// schema's (its trigger names the table in the payload), or a queue's.
func NewListener(dsn, channel string, log *slog.Logger) *Listener {
	return &Listener{dsn: dsn, channel: channel, log: log, wakes: map[string][]chan struct{}{}}
}

// anyPayload subscribes to every notification of the channel.
const anyPayload = "*"

// SubscribeAll returns a channel that receives a signal (coalesced) on
// every notification, whatever its payload (a queue's trigger).
func (l *Listener) SubscribeAll() <-chan struct{} {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	l.wakes[anyPayload] = append(l.wakes[anyPayload], ch)
	l.mu.Unlock()
	return ch
}

// Subscribe returns a channel that receives a signal (coalesced) whenever
// rows are inserted into t.
func (l *Listener) Subscribe(t Table) <-chan struct{} { return l.subscribe(t.Schema + "." + t.Name) }

// subscribe returns a channel that receives a signal (coalesced) on every
// notification whose payload is key.
func (l *Listener) subscribe(key string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	l.wakes[key] = append(l.wakes[key], ch)
	l.mu.Unlock()
	return ch
}

func (l *Listener) wake(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, chans := range l.wakes {
		if key != "" && k != key && k != anyPayload {
			continue
		}
		for _, ch := range chans {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Run listens until ctx is cancelled, reconnecting after errors.
func (l *Listener) Run(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listen(ctx)
		if ctx.Err() != nil {
			break
		}
		l.log.Warn("notification listener disconnected; reconnecting", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
	return nil
}

func (l *Listener) listen(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, l.dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+QuoteIdent(l.channel)); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	l.wake("") // anything inserted while not listening
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.wake(n.Payload)
	}
}
