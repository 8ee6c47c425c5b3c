package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgproto3"
)

// The publication's comment: whether the rows its slot's snapshot found
// pending were all settled (see WALStore).
const (
	walBacklogPending = "outbox-relay: the rows pending when the slot was made are being relayed"
	walBacklogDone    = "outbox-relay: the rows pending when the slot was made are relayed; the slot goes on from its position"
)

// walPage is how many pending rows a read of the slot's snapshot takes.
const walPage = 1000

// walLeaseEvery is how often a stream checks its lease.
const walLeaseEvery = time.Second

// EnsurePublication creates the source's publication when it is missing:
// the source's table alone, inserts alone. Replicas may race to create it:
// the one that loses finds it made.
func (s *WALStore) EnsurePublication(ctx context.Context) error {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, s.name).Scan(&exists); err != nil {
		return fmt.Errorf("publication %s: %w", s.name, err)
	}
	if exists {
		return nil
	}
	_, err := s.pool.Exec(ctx, "CREATE PUBLICATION "+QuoteIdent(s.name)+" FOR TABLE "+s.opts.Table.String()+" WITH (publish = 'insert')")
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && (pgErr.Code == "42710" || pgErr.Code == "23505") {
		return nil // another replica made it
	}
	if err != nil {
		return fmt.Errorf("create publication %s: %w", s.name, err)
	}
	return nil
}

// stream runs the replication connection: the slot made or found, the
// snapshot's rows read, then the stream from the slot's position.
func (r *walRun) stream(ctx context.Context) error {
	s := r.s
	if err := s.EnsurePublication(ctx); err != nil {
		return err
	}
	cfg := s.opts.Conn.Copy()
	cfg.RuntimeParams = maps.Clone(cfg.RuntimeParams)
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	// Values come as the server's text output: these settings make it the
	// one walRowOf reads.
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["DateStyle"] = "ISO"
	cfg.RuntimeParams["TimeZone"] = "UTC"
	cfg.RuntimeParams["bytea_output"] = "hex"
	delete(cfg.RuntimeParams, "plan_cache_mode")
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("replication connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	retry, err := r.loadRetries(ctx)
	if err != nil {
		return err
	}
	start, err := r.prepare(ctx, conn)
	if err != nil {
		return err
	}
	// A holder deposed since its claims began streams nothing: the slot
	// is the new holder's.
	if err := s.fenced(ctx, r.lease, func(*pgx.Batch) {}); err != nil {
		return fmt.Errorf("check the lease: %w", err)
	}
	opts := pglogrepl.StartReplicationOptions{PluginArgs: []string{"proto_version '1'", "publication_names '" + s.name + "'"}}
	err = pglogrepl.StartReplication(ctx, conn, s.slot, start, opts)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "55006" {
		// A deposed holder still streams the slot: this holder ends it.
		if err = r.endOtherStream(ctx); err == nil {
			err = pglogrepl.StartReplication(ctx, conn, s.slot, start, opts)
		}
	}
	if err != nil {
		return fmt.Errorf("start replication on slot %s: %w", s.slot, err)
	}
	r.mu.Lock()
	r.confirmed = max(r.confirmed, start)
	r.mu.Unlock()
	return r.receive(ctx, conn, retry)
}

// walRetry is a row's retry state, read when the stream starts.
type walRetry struct {
	attempts int
	due      time.Time
}

// loadRetries reads the source's retry state: rows the stream brings again
// keep their attempts and wait until due.
func (r *walRun) loadRetries(ctx context.Context) (map[string]walRetry, error) {
	rows, err := r.s.pool.Query(ctx, `SELECT event_id, attempts, next_attempt_at FROM `+QuoteIdent(r.s.opts.RelaySchema)+`.retry_state WHERE source = $1`, r.s.opts.Source)
	if err != nil {
		return nil, fmt.Errorf("read retry state: %w", err)
	}
	out := map[string]walRetry{}
	var (
		id string
		rt walRetry
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &rt.attempts, &rt.due}, func() error {
		out[id] = rt
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read retry state: %w", err)
	}
	return out, nil
}

// prepare finds the slot, or makes it and reads the rows its snapshot
// finds pending; it returns where the stream starts.
func (r *walRun) prepare(ctx context.Context, conn *pgconn.PgConn) (pglogrepl.LSN, error) {
	s := r.s
	var (
		confirmed *string
		comment   *string
	)
	var database string
	err := s.pool.QueryRow(ctx, `SELECT s.confirmed_flush_lsn::text, s.database,
  (SELECT obj_description(p.oid, 'pg_publication') FROM pg_publication p WHERE p.pubname = $2)
FROM pg_replication_slots s WHERE s.slot_name = $1`, s.slot, s.name).Scan(&confirmed, &database, &comment)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("slot %s: %w", s.slot, err)
	}
	if found && database != s.opts.Conn.Database {
		return 0, fmt.Errorf("slot %s: it belongs to database %s, not %s", s.slot, database, s.opts.Conn.Database)
	}
	if found && confirmed != nil && comment != nil && *comment == walBacklogDone {
		// Transactions the slot brings again may have rows a previous
		// holder settled (the slot waits for the oldest row not settled):
		// up to where the WAL is now, only the rows still pending go on.
		var now string
		if err := s.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&now); err != nil {
			return 0, fmt.Errorf("slot %s: %w", s.slot, err)
		}
		if r.replayUntil, err = pglogrepl.ParseLSN(now); err != nil {
			return 0, err
		}
		return pglogrepl.ParseLSN(*confirmed)
	}
	// The comment says the slot's rows are not yet relayed; a slot found
	// without the comment that they are is made again, and the rows
	// pending now read in its snapshot. Under the lease's check: a
	// deposed holder drops nothing.
	err = s.fenced(ctx, r.lease, func(q *pgx.Batch) {
		if found {
			q.Queue(walEndStreamSQL, s.slot)
			q.Queue(`SELECT pg_drop_replication_slot($1)`, s.slot)
		}
		q.Queue("COMMENT ON PUBLICATION " + QuoteIdent(s.name) + " IS " + quoteLiteral(walBacklogPending))
	})
	if err != nil {
		return 0, fmt.Errorf("slot %s: make it anew: %w", s.slot, err)
	}
	if found {
		s.opts.Logger.Warn("replication slot made again: the rows pending when it was made were not all relayed",
			"source", s.opts.Source, "slot", s.slot)
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, s.slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return 0, fmt.Errorf("create slot %s: %w", s.slot, err)
	}
	cp, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, fmt.Errorf("create slot %s: %w", s.slot, err)
	}
	s.opts.Logger.Info("replication slot created", "source", s.opts.Source, "slot", s.slot, "consistent_point", cp.String())
	if err := r.readBacklog(ctx, res.SnapshotName, cp); err != nil {
		return 0, err
	}
	return cp, nil
}

// walEndStreamSQL ends the session that streams slot $1, if any, and waits
// until it has.
const walEndStreamSQL = `SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots
WHERE slot_name = $1 AND active_pid IS NOT NULL`

// endOtherStream ends the session that streams the slot, a deposed
// holder's, under the lease's check.
func (r *walRun) endOtherStream(ctx context.Context) error {
	err := r.s.fenced(ctx, r.lease, func(q *pgx.Batch) { q.Queue(walEndStreamSQL, r.s.slot) })
	if err != nil {
		return fmt.Errorf("end the stream of slot %s: %w", r.s.slot, err)
	}
	return nil
}

// comment sets the publication's comment, under the lease's check.
func (r *walRun) comment(ctx context.Context, text string) error {
	err := r.s.fenced(ctx, r.lease, func(q *pgx.Batch) {
		q.Queue("COMMENT ON PUBLICATION " + QuoteIdent(r.s.name) + " IS " + quoteLiteral(text))
	})
	if err != nil {
		return fmt.Errorf("comment on publication %s: %w", r.s.name, err)
	}
	return nil
}

// readBacklog reads the rows pending in the slot's snapshot, in a claim's
// order, into the book ahead of the stream: one transaction whose end is the slot's
// consistent point.
func (r *walRun) readBacklog(ctx context.Context, snapshot string, cp pglogrepl.LSN) error {
	s := r.s
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("read the slot's snapshot: %w", err)
	}
	tx := claimTx{conn}
	defer tx.end(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"); err != nil {
		return fmt.Errorf("read the slot's snapshot: %w", err)
	}
	if _, err := conn.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshot)); err != nil {
		return fmt.Errorf("read the slot's snapshot: %w", err)
	}
	wt := &walTx{end: cp, left: 1, mark: true}
	r.mu.Lock()
	r.book.open(wt)
	r.mu.Unlock()
	if _, err := conn.Exec(ctx, "DECLARE outbox_relay_backlog NO SCROLL CURSOR FOR "+s.backlog, s.opts.Source); err != nil {
		return fmt.Errorf("read the slot's snapshot: %w", err)
	}
	extras := len(s.opts.Layout.Extra)
	fetch := fmt.Sprintf("FETCH %d FROM outbox_relay_backlog", walPage)
	for {
		if err := r.waitRoom(ctx); err != nil {
			return err
		}
		rows, err := conn.Query(ctx, fetch)
		if err != nil {
			return fmt.Errorf("read the slot's snapshot: %w", err)
		}
		var page []*walRow
		for rows.Next() {
			vals, fds := rows.RawValues(), rows.FieldDescriptions()
			w := &walRow{}
			err := DecodeRow(vals, fds, &w.row, extras)
			if err == nil {
				w.tie, err = decodeInt8(vals[colTie], fds[colTie].Format)
			}
			if err == nil {
				w.retrying, err = decodeBool(vals[colRetrying], fds[colRetrying].Format)
			}
			if err == nil && w.retrying {
				var us int64
				us, err = decodeInt8(vals[numClaimCols+extras], fds[numClaimCols+extras].Format)
				w.state, w.due = rowRetry, time.UnixMicro(us)
			}
			if err != nil {
				rows.Close()
				return fmt.Errorf("read the slot's snapshot: decode: %w", err)
			}
			page = append(page, w)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read the slot's snapshot: %w", err)
		}
		r.mu.Lock()
		wt.left += len(page)
		r.book.add(wt, page)
		r.mu.Unlock()
		signal(s.wake)
		if len(page) < walPage {
			break
		}
	}
	r.mu.Lock()
	wt.left--
	r.advance()
	r.mu.Unlock()
	return nil
}

// waitRoom waits until the book holds fewer rows than its bound.
func (r *walRun) waitRoom(ctx context.Context) error {
	for {
		r.mu.Lock()
		full := r.book.held() >= r.s.opts.MaxRows
		r.mu.Unlock()
		if !full {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.room:
		case <-time.After(time.Second):
		}
	}
}

// receive reads the stream: each transaction's inserts into the table are
// released at its Commit. The slot's position is sent every StatusEvery,
// when it moves and when the server asks.
func (r *walRun) receive(ctx context.Context, conn *pgconn.PgConn, retry map[string]walRetry) error {
	s := r.s
	cols := map[uint32]map[string]int{} // the table's relations: column index by name
	rels := map[uint32]*pglogrepl.RelationMessage{}
	var (
		building []*walRow
		inTx     bool
		sent     pglogrepl.LSN
		reply    bool
		next     time.Time
		checked  = time.Now()
	)
	for {
		if err := r.leased(); err != nil {
			return err
		}
		if r.lease != nil && time.Since(checked) >= walLeaseEvery {
			// A deposed holder stops handing rows out within a second,
			// before its renewals tell it.
			if err := s.fenced(ctx, r.lease, func(*pgx.Batch) {}); err != nil {
				return fmt.Errorf("check the lease: %w", err)
			}
			checked = time.Now()
		}
		r.mu.Lock()
		confirmed, full := r.confirmed, r.book.held() >= s.opts.MaxRows
		r.mu.Unlock()
		if now := time.Now(); confirmed != sent || reply || !now.Before(next) {
			err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: confirmed, WALFlushPosition: confirmed, WALApplyPosition: confirmed})
			if err != nil {
				return fmt.Errorf("send the slot's position: %w", err)
			}
			sent, reply, next = confirmed, false, now.Add(s.opts.StatusEvery)
		}
		if full {
			// The claims are behind: the server waits (its keepalives too).
			select {
			case <-ctx.Done():
				return nil
			case <-r.room:
			case <-r.moved:
			case <-time.After(time.Until(next)):
			}
			continue
		}
		rctx, cancel := context.WithDeadline(ctx, next)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("receive: %w", err)
		}
		var data []byte
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyData:
			data = m.Data
		default:
			continue
		}
		if len(data) == 0 {
			continue
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return fmt.Errorf("keepalive: %w", err)
			}
			reply = reply || k.ReplyRequested
			if !inTx {
				// Nothing held: the slot may confirm what was sent.
				r.mu.Lock()
				if r.book.idle() && k.ServerWALEnd > r.confirmed {
					r.confirmed = k.ServerWALEnd
				}
				r.mu.Unlock()
			}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return fmt.Errorf("xlog data: %w", err)
			}
			lm, err := pglogrepl.Parse(x.WALData)
			if err != nil {
				return fmt.Errorf("decode: %w", err)
			}
			switch m := lm.(type) {
			case *pglogrepl.RelationMessage:
				rels[m.RelationID] = m
				delete(cols, m.RelationID)
				if m.Namespace == s.opts.Table.Schema && m.RelationName == s.opts.Table.Name {
					byName := make(map[string]int, len(m.Columns))
					for i, c := range m.Columns {
						byName[c.Name] = i
					}
					cols[m.RelationID] = byName
				}
			case *pglogrepl.BeginMessage:
				inTx, building = true, nil
			case *pglogrepl.InsertMessage:
				byName, ok := cols[m.RelationID]
				if !ok {
					continue
				}
				t, err := newWALTuple(rels[m.RelationID], byName, m.Tuple)
				if err != nil {
					return err
				}
				row, err := walRowOf(s.opts.Layout, t)
				if err != nil {
					return fmt.Errorf("insert into %s: %w", s.opts.Table, err)
				}
				w := &walRow{row: row, tie: int64(len(building))}
				if rt, ok := retry[row.ID]; ok {
					w.row.Attempts, w.state, w.due, w.retrying = rt.attempts, rowRetry, rt.due, true
				}
				building = append(building, w)
			case *pglogrepl.CommitMessage:
				if len(building) > 0 && m.TransactionEndLSN <= r.replayUntil {
					if building, err = r.stillPending(ctx, building); err != nil {
						return err
					}
				}
				tx := &walTx{end: m.TransactionEndLSN, left: len(building)}
				r.mu.Lock()
				r.book.open(tx)
				r.book.add(tx, building)
				r.advance()
				r.mu.Unlock()
				if len(building) > 0 {
					signal(s.wake)
				}
				inTx, building = false, nil
			}
		}
	}
}

// stillPending keeps the rows of a transaction the slot brought again that
// are still pending in the table: a previous holder may have settled the
// others (written them published, dead-lettered them, deleted them).
func (r *walRun) stillPending(ctx context.Context, rows []*walRow) ([]*walRow, error) {
	ids := make([]string, len(rows))
	for i, w := range rows {
		ids[i] = w.row.ID
	}
	res, err := r.s.pool.Query(ctx, r.s.pending, ids)
	if err != nil {
		return nil, fmt.Errorf("rows brought again: %w", err)
	}
	pending, err := pgx.CollectRows(res, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("rows brought again: %w", err)
	}
	keep := make(map[string]bool, len(pending))
	for _, id := range pending {
		keep[id] = true
	}
	out := rows[:0]
	for _, w := range rows {
		if keep[w.row.ID] {
			out = append(out, w)
		}
	}
	return out, nil
}
