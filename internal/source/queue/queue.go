// Package queue is the queue layout's store on PostgreSQL (seed 003's
// payment dispatch): a hot table of pending dispatches claimed by deleting
// them, an append-only archive of attempts, and a sequence per participant
// that dispatch follows strictly.
//
// A claim deletes due rows from payment_outbox_pending and appends a
// DISPATCHING attempt for each, in one short transaction committed before
// the dispatch. It takes a participant's row only when it is the next of
// the participant's sequence (one more than the last DISPATCHED or FAILED)
// and no attempt of the participant is in flight: one dispatch per
// participant at a time, in sequence order, and a retry, a zombie or a gap
// holds that participant only. Outcomes are appended: DISPATCHED;
// RETRYABLE with the row put back (same outbox_id and sequence_id,
// attempt_count + 1, next_attempt_at from the backoff); FAILED, the dead
// letter.
package queue

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
	"github.com/outbox-relay/outbox-relay/migrations/queue"
)

// Migrate creates (and upgrades) the queue's tables, functions and trigger
// in schema of the database at dsn. Its version table sits beside them
// (payment_outbox_goose_version).
func Migrate(ctx context.Context, dsn, schema string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("queue migrate: %w", err)
	}
	cfg.RuntimeParams["search_path"] = postgres.QuoteIdent(schema)
	db := stdlib.OpenDB(*cfg)
	defer func() { _ = db.Close() }()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+postgres.QuoteIdent(schema)); err != nil {
		return fmt.Errorf("queue migrate: %w", err)
	}
	fsys, err := fs.Sub(queue.Postgres, "postgres")
	if err != nil {
		return err
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(0x6f75746271756575)) // "outbqueu"
	if err != nil {
		return err
	}
	prov, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName(schema+".payment_outbox_goose_version"),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("queue migrate: %w", err)
	}
	if _, err := prov.Up(ctx); err != nil {
		return fmt.Errorf("queue migrate: %w", err)
	}
	return nil
}

// Dispatch is one claimed row: what to send, and the attempt recording it.
type Dispatch struct {
	AttemptID, OutboxID                          string
	InstructionID, ParticipantID, IdempotencyKey string
	RailType                                     string
	SequenceID                                   int64
	AttemptNo                                    int
	Payload                                      []byte
	ClaimedAt                                    time.Time
}

// Store claims and records dispatches in one schema.
type Store struct {
	pool   *pgxpool.Pool
	schema string
}

// New returns the store of the queue in schema.
func New(pool *pgxpool.Pool, schema string) *Store { return &Store{pool: pool, schema: schema} }

func (s *Store) t(name string) string { return postgres.QuoteIdent(s.schema) + "." + name }

// Claim takes up to limit due dispatches, at most one per participant and
// only the next of its sequence, and records a DISPATCHING attempt for each
// in the same transaction.
func (s *Store) Claim(ctx context.Context, limit int) ([]Dispatch, error) {
	pending, attempts := s.t("payment_outbox_pending"), s.t("payment_outbox_attempts")
	rows, err := s.pool.Query(ctx, `WITH cand AS (
  SELECT p.outbox_id FROM `+pending+` p
  WHERE p.next_attempt_at <= now()
    -- the participant's earliest row waiting
    AND NOT EXISTS (SELECT 1 FROM `+pending+` q WHERE q.participant_id = p.participant_id AND q.sequence_id < p.sequence_id)
    -- the next of its sequence: no gap
    AND p.sequence_id = 1 + COALESCE((SELECT max(a.sequence_id) FROM `+attempts+` a
      WHERE a.participant_id = p.participant_id AND a.state IN ('DISPATCHED', 'FAILED')), 0)
    -- nothing of the participant in flight
    AND NOT EXISTS (SELECT 1 FROM `+attempts+` a WHERE a.participant_id = p.participant_id AND a.state = 'DISPATCHING'
      AND NOT EXISTS (SELECT 1 FROM `+attempts+` o WHERE o.outbox_id = a.outbox_id AND o.attempt_no = a.attempt_no
        AND o.state <> 'DISPATCHING'))
  ORDER BY p.next_attempt_at, p.created_at
  LIMIT $1
  FOR UPDATE OF p SKIP LOCKED
), d AS (
  DELETE FROM `+pending+` p USING cand WHERE p.outbox_id = cand.outbox_id RETURNING p.*
)
INSERT INTO `+attempts+` (outbox_id, instruction_id, participant_id, sequence_id, idempotency_key, rail_type, payload,
  attempt_no, state)
SELECT outbox_id, instruction_id, participant_id, sequence_id, idempotency_key, rail_type, payload, attempt_count + 1,
  'DISPATCHING' FROM d
RETURNING attempt_id::text, outbox_id::text, instruction_id, participant_id, idempotency_key, rail_type, sequence_id,
  attempt_no, payload::text, claimed_at`, limit)
	if err != nil {
		return nil, fmt.Errorf("claim dispatches: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Dispatch, error) {
		var d Dispatch
		var payload string
		err := r.Scan(&d.AttemptID, &d.OutboxID, &d.InstructionID, &d.ParticipantID, &d.IdempotencyKey, &d.RailType,
			&d.SequenceID, &d.AttemptNo, &payload, &d.ClaimedAt)
		d.Payload = []byte(payload)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim dispatches: %w", err)
	}
	return out, nil
}

// Outcome is what became of one dispatch.
type Outcome struct {
	RailReference, RailCode, ErrorCode, ErrorMessage string
	Latency                                          time.Duration
}

// ErrSettled is returned when an attempt already has its outcome.
var ErrSettled = errors.New("the attempt already has an outcome")

// Dispatched records the dispatch's success.
func (s *Store) Dispatched(ctx context.Context, d Dispatch, o Outcome) error {
	return s.outcome(ctx, s.pool, d, "DISPATCHED", o)
}

// Failed records the dispatch's terminal failure: the dead letter.
func (s *Store) Failed(ctx context.Context, d Dispatch, o Outcome) error {
	return s.outcome(ctx, s.pool, d, "FAILED", o)
}

// Retry records a retryable failure and puts the row back, with the same
// outbox_id and sequence_id, one more attempt counted, due at at; both in
// one transaction, and idempotently (a second call changes nothing).
func (s *Store) Retry(ctx context.Context, d Dispatch, o Outcome, at time.Time) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.outcome(ctx, tx, d, "RETRYABLE", o); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+s.t("payment_outbox_pending")+` (outbox_id, instruction_id, participant_id,
  sequence_id, idempotency_key, rail_type, payload, attempt_count, next_attempt_at)
VALUES ($1::uuid, $2, $3, $4, $5, $6, $7::jsonb, $8, $9)
ON CONFLICT (outbox_id) DO NOTHING`, d.OutboxID, d.InstructionID, d.ParticipantID, d.SequenceID, d.IdempotencyKey, d.RailType,
			string(d.Payload), d.AttemptNo, at)
		if err != nil {
			return fmt.Errorf("requeue %s: %w", d.OutboxID, err)
		}
		return nil
	})
}

// querier is a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// outcome appends the attempt's outcome row: one per attempt (a unique
// index), so that a repeated call is ErrSettled, not a second outcome.
func (s *Store) outcome(ctx context.Context, q querier, d Dispatch, state string, o Outcome) error {
	var latency *int32
	if o.Latency > 0 {
		ms := int32(o.Latency.Milliseconds())
		latency = &ms
	}
	tag, err := q.Exec(ctx, `INSERT INTO `+s.t("payment_outbox_attempts")+` (outbox_id, instruction_id, participant_id,
  sequence_id, idempotency_key, rail_type, payload, attempt_no, state, claimed_at, completed_at, rail_reference, rail_code,
  error_code, error_message, latency_ms)
VALUES ($1::uuid, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10, now(), NULLIF($11, ''), NULLIF($12, ''), NULLIF($13, ''),
  NULLIF($14, ''), $15)
ON CONFLICT (outbox_id, attempt_no) WHERE state IN ('DISPATCHED', 'RETRYABLE', 'FAILED', 'ZOMBIE_REQUEUE') DO NOTHING`,
		d.OutboxID, d.InstructionID, d.ParticipantID, d.SequenceID, d.IdempotencyKey, d.RailType, string(d.Payload), d.AttemptNo,
		state, d.ClaimedAt, o.RailReference, o.RailCode, o.ErrorCode, o.ErrorMessage, latency)
	if err != nil {
		return fmt.Errorf("record %s of %s: %w", state, d.OutboxID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("record %s of %s (attempt %d): %w", state, d.OutboxID, d.AttemptNo, ErrSettled)
	}
	return nil
}

// Reap puts back the rows whose attempt has been DISPATCHING for longer
// than timeout with no outcome (the dispatcher died), same outbox_id and
// sequence_id, due now, and records a ZOMBIE_REQUEUE outcome for each. It
// is safe to run concurrently and again: an attempt gets one outcome, and a
// row is put back only by the reaper that recorded it. It returns how many
// rows it put back.
func (s *Store) Reap(ctx context.Context, timeout time.Duration) (int, error) {
	pending, attempts := s.t("payment_outbox_pending"), s.t("payment_outbox_attempts")
	tag, err := s.pool.Exec(ctx, `WITH z AS (
  SELECT a.* FROM `+attempts+` a
  WHERE a.state = 'DISPATCHING' AND a.claimed_at < now() - make_interval(secs => $1)
    AND NOT EXISTS (SELECT 1 FROM `+attempts+` o WHERE o.outbox_id = a.outbox_id AND o.attempt_no = a.attempt_no
      AND o.state <> 'DISPATCHING')
), rec AS (
  INSERT INTO `+attempts+` (outbox_id, instruction_id, participant_id, sequence_id, idempotency_key, rail_type, payload,
    attempt_no, state, claimed_at, completed_at, error_code, error_message)
  SELECT outbox_id, instruction_id, participant_id, sequence_id, idempotency_key, rail_type, payload, attempt_no,
    'ZOMBIE_REQUEUE', claimed_at, now(), 'ZOMBIE_REQUEUE', 'no outcome within the zombie timeout' FROM z
  ON CONFLICT (outbox_id, attempt_no) WHERE state IN ('DISPATCHED', 'RETRYABLE', 'FAILED', 'ZOMBIE_REQUEUE') DO NOTHING
  RETURNING outbox_id, instruction_id, participant_id, sequence_id, idempotency_key, rail_type, payload, attempt_no
)
INSERT INTO `+pending+` (outbox_id, instruction_id, participant_id, sequence_id, idempotency_key, rail_type, payload,
  attempt_count, next_attempt_at)
SELECT outbox_id, instruction_id, participant_id, sequence_id, idempotency_key, rail_type, payload, attempt_no, now() FROM rec
ON CONFLICT (outbox_id) DO NOTHING`, timeout.Seconds())
	if err != nil {
		return 0, fmt.Errorf("reap zombie dispatches: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Gauges describe the queue now, for seed 003's metrics: its pending depth
// and the age of its oldest due row, the dead letters (FAILED outcomes),
// and the dispatches left DISPATCHING with no outcome for longer than
// stuckAfter.
type Gauges struct {
	Pending, DeadLetters, StuckDispatching int64
	OldestPendingAge                       time.Duration
}

// Gauges reads the queue's gauges in one statement.
func (s *Store) Gauges(ctx context.Context, stuckAfter time.Duration) (Gauges, error) {
	pending, attempts := s.t("payment_outbox_pending"), s.t("payment_outbox_attempts")
	var g Gauges
	var oldest float64
	err := s.pool.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM `+pending+`),
  COALESCE((SELECT EXTRACT(EPOCH FROM now() - min(created_at)) FROM `+pending+` WHERE next_attempt_at <= now()), 0),
  (SELECT count(*) FROM `+attempts+` WHERE state = 'FAILED'),
  (SELECT count(*) FROM `+attempts+` a WHERE a.state = 'DISPATCHING' AND a.claimed_at < now() - make_interval(secs => $1)
    AND NOT EXISTS (SELECT 1 FROM `+attempts+` o WHERE o.outbox_id = a.outbox_id AND o.attempt_no = a.attempt_no
      AND o.state <> 'DISPATCHING'))`, stuckAfter.Seconds()).Scan(&g.Pending, &oldest, &g.DeadLetters, &g.StuckDispatching)
	if err != nil {
		return g, fmt.Errorf("queue gauges: %w", err)
	}
	g.OldestPendingAge = time.Duration(oldest * float64(time.Second))
	return g, nil
}
