// Package outbox is the producer's half: it writes an event into an outbox
// table inside the caller's transaction, so that the event commits (or
// not) with the business data, for outbox-relay to publish.
//
// A Layout names the table's columns, as the relay's configuration does;
// Presets holds the tables of the relay's presets published-flag, status,
// payment-queue, kafka-outbox and delete. Ids are UUIDv7 where the table
// takes a UUID; created_at is the clock's, not the transaction's start, so
// that rows of one transaction keep their order; the W3C traceparent of
// the caller's context goes into the headers column; an idempotency key
// with a unique constraint returns the event already written instead of a
// second one. database/sql (PostgreSQL, MySQL, MariaDB) and pgx.
package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/sqlident"
	"go.opentelemetry.io/otel/trace"
)

// Dialect is the database's SQL flavour.
type Dialect int

const (
	// Postgres is PostgreSQL.
	Postgres Dialect = iota
	// MySQL is MySQL or MariaDB.
	MySQL
)

// Layout maps an event to an outbox table's columns; an empty column is
// not written.
type Layout struct {
	Table string // optionally schema-qualified
	// ID is the id column; GenerateID makes the package fill it with a
	// UUIDv7, else the table's default does.
	ID         string
	GenerateID bool
	Payload    string
	// Headers is a JSON object column: the event's headers, with the
	// caller's traceparent.
	Headers                               string
	Topic, Key, PartitionKey              string
	EventType, AggregateType, AggregateID string
	CreatedAt                             string
	// Idempotency lists the columns of a unique constraint that makes a
	// second write of one event return the first (the payment-queue
	// table's (instruction_id, idempotency_key)); IdempotencyKey is the
	// column the event's IdempotencyKey goes to.
	Idempotency    []string
	IdempotencyKey string
}

// Presets are the layouts of the tables the relay's presets of the same
// names read: published-flag, status, payment-queue, kafka-outbox and
// delete (the relay's prisma preset has no layout here). The table names
// are the seeds'; give the Layout another Table when yours differs.
var Presets = map[string]Layout{
	"published-flag": publishedFlag,
	"status":         status,
	"payment-queue":  paymentQueue,
	"kafka-outbox":   kafkaOutbox,
	"delete":         deleteOnPublish,

	// Deprecated: seed000, seed001, seed003 and seed004 are the former
	// names of published-flag, status, payment-queue and kafka-outbox.
	"seed000": publishedFlag,
	"seed001": status,
	"seed003": paymentQueue,
	"seed004": kafkaOutbox,
}

var (
	// publishedFlag: journey_matcher.outbox and its siblings (a published
	// flag, seed 000); correlation_id goes in Event.Columns.
	publishedFlag = Layout{Table: "outbox", ID: "id", GenerateID: true, Payload: "payload", EventType: "event_type",
		AggregateType: "aggregate_type", AggregateID: "aggregate_id", CreatedAt: "created_at"}
	// status: the status table with topic, partition key and headers (seed
	// 001).
	status = Layout{Table: "outbox", ID: "id", GenerateID: true, Payload: "payload", Headers: "headers", Topic: "topic",
		PartitionKey: "partition_key", EventType: "event_type", AggregateType: "aggregate_type",
		AggregateID: "aggregate_id", CreatedAt: "created_at"}
	// paymentQueue: payment_outbox_pending (seed 003); participant_id,
	// instruction_id and rail_type go in Event.Columns, WriteSequenced adds
	// sequence_id.
	paymentQueue = Layout{Table: "payment_outbox_pending", ID: "outbox_id", GenerateID: true, Payload: "payload",
		CreatedAt: "created_at", Idempotency: []string{"instruction_id", "idempotency_key"}, IdempotencyKey: "idempotency_key"}
	// kafkaOutbox: kafka_outbox, created by the relay (seed 004), payload
	// and headers as JSON text.
	kafkaOutbox = Layout{Table: "kafka_outbox", ID: "id", Payload: "payload_json", Headers: "payload_headers", Topic: "topic",
		Key: "key", PartitionKey: "partition_key", CreatedAt: "created_at"}
	// deleteOnPublish: the relay's delete-on-publish table (id, topic, key,
	// payload).
	deleteOnPublish = Layout{Table: "outbox", ID: "id", Payload: "payload", Topic: "topic", Key: "key"}
)

// Event is one event to write.
type Event struct {
	// ID is the event's id; empty: a UUIDv7 (GenerateID) or the table's.
	ID                               string
	Type, AggregateType, AggregateID string
	Topic, Key, PartitionKey         string
	// Payload is written as is when it is []byte, json.RawMessage or a
	// string, else as its JSON encoding.
	Payload        any
	Headers        map[string]string
	IdempotencyKey string
	// Columns are the table's other columns and their values.
	Columns map[string]any
}

// Writer writes events into one outbox table.
type Writer struct {
	d Dialect
	l Layout
}

// New returns the writer of table layout l.
func New(d Dialect, l Layout) *Writer { return &Writer{d: d, l: l} }

// ErrNoTable says the layout names no table.
var ErrNoTable = errors.New("outbox: the layout names no table")

// statement builds the insert of e and its arguments.
func (w *Writer) statement(ctx context.Context, e Event) (string, []any, string, error) {
	l := w.l
	if l.Table == "" {
		return "", nil, "", ErrNoTable
	}
	var cols, vals []string
	var args []any
	arg := func(col string, v any) {
		if col == "" {
			return
		}
		args = append(args, v)
		cols = append(cols, quote(w.d, col))
		if w.d == MySQL {
			vals = append(vals, "?")
		} else {
			vals = append(vals, fmt.Sprintf("$%d", len(args)))
		}
	}
	id := e.ID
	if id == "" && l.GenerateID {
		u, err := uuid.NewV7()
		if err != nil {
			return "", nil, "", fmt.Errorf("outbox: event id: %w", err)
		}
		id = u.String()
	}
	if id != "" {
		arg(l.ID, id)
	}
	payload, err := payloadBytes(e.Payload)
	if err != nil {
		return "", nil, "", err
	}
	arg(l.Payload, string(payload))
	if l.Headers != "" {
		h, err := headers(ctx, e.Headers)
		if err != nil {
			return "", nil, "", err
		}
		arg(l.Headers, h)
	}
	for _, c := range []struct{ col, v string }{
		{l.Topic, e.Topic}, {l.Key, e.Key}, {l.PartitionKey, e.PartitionKey}, {l.EventType, e.Type},
		{l.AggregateType, e.AggregateType}, {l.AggregateID, e.AggregateID}, {l.IdempotencyKey, e.IdempotencyKey},
	} {
		if c.col != "" && (c.v != "" || c.col == l.Key) {
			arg(c.col, c.v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(e.Columns)) {
		arg(k, e.Columns[k])
	}
	if l.CreatedAt != "" {
		// The clock's time, not the transaction's start: rows of one
		// transaction keep the order they were written in.
		cols = append(cols, quote(w.d, l.CreatedAt))
		if w.d == MySQL {
			vals = append(vals, "SYSDATE(6)")
		} else {
			vals = append(vals, "clock_timestamp()")
		}
	}
	q := "INSERT INTO " + quoteName(w.d, l.Table) + " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ")"
	if w.d == Postgres {
		if len(l.Idempotency) > 0 {
			q += " ON CONFLICT DO NOTHING"
		}
		q += " RETURNING " + quote(w.d, l.ID) + "::text"
	}
	return q, args, id, nil
}

// existing is the query of the id already written under e's idempotency
// columns, and its arguments.
func (w *Writer) existing(e Event) (string, []any, error) {
	var where []string
	var args []any
	for _, c := range w.l.Idempotency {
		var v any
		switch {
		case c == w.l.IdempotencyKey:
			v = e.IdempotencyKey
		default:
			cv, ok := e.Columns[c]
			if !ok {
				return "", nil, fmt.Errorf("outbox: the event has no value for idempotency column %s", c)
			}
			v = cv
		}
		args = append(args, v)
		ph := "?"
		if w.d == Postgres {
			ph = fmt.Sprintf("$%d", len(args))
		}
		where = append(where, quote(w.d, c)+" = "+ph)
	}
	cast := ""
	if w.d == Postgres {
		cast = "::text"
	}
	return "SELECT " + quote(w.d, w.l.ID) + cast + " FROM " + quoteName(w.d, w.l.Table) + " WHERE " + strings.Join(where, " AND "), args, nil
}

// Write inserts e in tx and returns its id: the existing event's when the
// table's idempotency constraint already holds e (nothing is written).
func (w *Writer) Write(ctx context.Context, tx *sql.Tx, e Event) (string, error) {
	q, args, id, err := w.statement(ctx, e)
	if err != nil {
		return "", err
	}
	id, dup, err := w.insert(ctx, tx, q, args, id)
	if dup {
		return w.existingID(sqlScan(ctx, tx), e)
	}
	return id, err
}

// insert runs an event's insert in tx and returns the event's id (on
// MySQL, the table's AUTO_INCREMENT value when the event has none); dup
// says the table's idempotency constraint holds the event already.
func (w *Writer) insert(ctx context.Context, tx *sql.Tx, q string, args []any, id string) (_ string, dup bool, _ error) {
	if w.d == Postgres {
		err := tx.QueryRowContext(ctx, q, args...).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) && len(w.l.Idempotency) > 0 {
			return "", true, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("outbox: write to %s: %w", w.l.Table, err)
		}
		return id, false, nil
	}
	res, err := tx.ExecContext(ctx, q, args...)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 && len(w.l.Idempotency) > 0 {
		return "", true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("outbox: write to %s: %w", w.l.Table, err)
	}
	if id == "" {
		n, err := res.LastInsertId()
		if err != nil {
			return "", false, fmt.Errorf("outbox: write to %s: %w", w.l.Table, err)
		}
		id = fmt.Sprint(n)
	}
	return id, false, nil
}

// WritePgx is Write for a pgx transaction (PostgreSQL).
func (w *Writer) WritePgx(ctx context.Context, tx pgx.Tx, e Event) (string, error) {
	if w.d != Postgres {
		return "", errors.New("outbox: WritePgx needs the Postgres dialect")
	}
	q, args, id, err := w.statement(ctx, e)
	if err != nil {
		return "", err
	}
	err = tx.QueryRow(ctx, q, args...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) && len(w.l.Idempotency) > 0 {
		return w.existingID(pgxScan(ctx, tx), e)
	}
	if err != nil {
		return "", fmt.Errorf("outbox: write to %s: %w", w.l.Table, err)
	}
	return id, nil
}

// Sequence says how a table numbers a participant's events (the
// payment-queue table's sequence_id): Function allocates the
// participant's next number (e.g. "payments.bump_participant_outbox_seq"),
// and the event's Columns carry the participant in Participant and get the
// number in Column.
type Sequence struct {
	Function, Participant, Column string
}

// WriteSequenced writes e with its participant's next sequence number,
// allocated in tx. An event the idempotency constraint already holds is
// returned as it is, and no number is used up: the allocation and the
// insert run under a savepoint that is rolled back for a duplicate (a
// number taken and not written would be a gap the relay waits at).
func (w *Writer) WriteSequenced(ctx context.Context, tx *sql.Tx, e Event, seq Sequence) (string, error) {
	participant, ok := e.Columns[seq.Participant]
	if !ok {
		return "", fmt.Errorf("outbox: the event has no value for %s", seq.Participant)
	}
	if len(w.l.Idempotency) > 0 {
		if id, found, err := w.find(sqlScan(ctx, tx), e); err != nil || found {
			return id, err
		}
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT outbox_sequenced"); err != nil {
		return "", fmt.Errorf("outbox: savepoint: %w", err)
	}
	ph := "$1"
	if w.d == MySQL {
		ph = "?"
	}
	var n int64
	if err := tx.QueryRowContext(ctx, "SELECT "+quoteName(w.d, seq.Function)+"("+ph+")", participant).Scan(&n); err != nil {
		return "", fmt.Errorf("outbox: next sequence of %v: %w", participant, err)
	}
	cols := maps.Clone(e.Columns)
	cols[seq.Column] = n
	e.Columns = cols
	q, args, id, err := w.statement(ctx, e)
	if err != nil {
		return "", err
	}
	id, dup, err := w.insert(ctx, tx, q, args, id)
	if dup {
		// A concurrent writer of the same event committed first.
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT outbox_sequenced"); err != nil {
			return "", fmt.Errorf("outbox: roll back the sequence number: %w", err)
		}
		return w.existingID(sqlScan(ctx, tx), e)
	}
	if err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT outbox_sequenced"); err != nil {
		return "", fmt.Errorf("outbox: release savepoint: %w", err)
	}
	return id, nil
}

// scanFunc runs a query of one row and scans it into dest: a *sql.Tx's
// or a pgx.Tx's.
type scanFunc func(q string, args []any, dest ...any) error

func sqlScan(ctx context.Context, tx *sql.Tx) scanFunc {
	return func(q string, args []any, dest ...any) error {
		return tx.QueryRowContext(ctx, q, args...).Scan(dest...)
	}
}

func pgxScan(ctx context.Context, tx pgx.Tx) scanFunc {
	return func(q string, args []any, dest ...any) error { return tx.QueryRow(ctx, q, args...).Scan(dest...) }
}

// find looks up the event the idempotency constraint holds for e.
func (w *Writer) find(scan scanFunc, e Event) (string, bool, error) {
	return w.lookup(scan, e, false)
}

// lookup is find; latest reads the latest committed row, which a MySQL
// transaction's snapshot (REPEATABLE READ) may predate: a locking read,
// for a row a duplicate key error has just shown is there (a locking read
// of a row that is not there would lock the gap, and two writers of one
// event would deadlock on their inserts).
func (w *Writer) lookup(scan scanFunc, e Event, latest bool) (string, bool, error) {
	q, args, err := w.existing(e)
	if err != nil {
		return "", false, err
	}
	if latest && w.d == MySQL {
		q += " LOCK IN SHARE MODE"
	}
	var id string
	err = scan(q, args, &id)
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("outbox: find the event already written: %w", err)
	}
	return id, true, nil
}

// existingID is the id of the event the idempotency constraint holds for
// e, which a write has just found there.
func (w *Writer) existingID(scan scanFunc, e Event) (string, error) {
	id, found, err := w.lookup(scan, e, true)
	if err == nil && !found {
		err = errors.New("outbox: the event the idempotency constraint refused is not there")
	}
	return id, err
}

// payloadBytes is the payload as written.
func payloadBytes(p any) ([]byte, error) {
	switch v := p.(type) {
	case nil:
		return []byte("{}"), nil
	case []byte:
		return v, nil
	case json.RawMessage:
		return v, nil
	case string:
		return []byte(v), nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("outbox: payload: %w", err)
	}
	return b, nil
}

// headers is the headers column's JSON: h, with the traceparent of ctx's
// span when it has one and h does not.
func headers(ctx context.Context, h map[string]string) (string, error) {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && out["traceparent"] == "" {
		out["traceparent"] = fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("outbox: headers: %w", err)
	}
	return string(b), nil
}

func quote(d Dialect, ident string) string { return sqlident.Quote(d == MySQL, ident) }

func quoteName(d Dialect, name string) string { return sqlident.QuoteName(d == MySQL, name) }
