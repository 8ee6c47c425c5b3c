package queue

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// names are a queue's tables and columns, quoted for SQL.
type names struct {
	hot, archive                      string
	id, idType                        string // the row id column (both tables) and its type
	participant, sequence, due, retry string // hot table columns
	created                           string // hot table's creation time, or ""
	// The archive's own columns; optional ones are "".
	attemptNo, status, claimedAt, completedAt, railRef, railCode, errCode, errMsg, latency string
	// copied are the columns of the hot table the archive keeps a copy of
	// (same name in both), the id, participant and sequence among them.
	copied []string
	// States, as SQL literals.
	dispatching, dispatched, retryable, failed, zombie string
}

func q(s string) string { return postgres.QuoteIdent(s) }

func lit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func optQ(s string) string {
	if s == "" {
		return ""
	}
	return q(s)
}

// newNames checks the archive's columns and picks those the archive copies.
func newNames(hot, archive postgres.Table, l *layout.Layout, hotCols, archCols []layout.Column) (*names, error) {
	a := l.Queue.Archive
	inArch := map[string]bool{}
	for _, c := range archCols {
		inArch[c.Name] = true
	}
	need := func(field, col string) error {
		if col != "" && !inArch[col] {
			return fmt.Errorf("state.queue.%s: column %q not found in %s", field, col, archive)
		}
		return nil
	}
	for _, f := range [][2]string{
		{"attempt_no", a.AttemptNo}, {"status", a.Status}, {"claimed_at", a.ClaimedAt}, {"completed_at", a.CompletedAt},
		{"rail_reference", a.RailReference}, {"rail_code", a.RailCode}, {"error_code", a.ErrorCode},
		{"error_message", a.ErrorMessage}, {"latency_ms", a.LatencyMS},
	} {
		if err := need(f[0], f[1]); err != nil {
			return nil, err
		}
	}
	for _, c := range []string{l.ID.Name, l.Queue.Participant.Name, l.Queue.Sequence.Name} {
		if !inArch[c] {
			return nil, fmt.Errorf("state.queue.attempts: %s has no column %q: the archive keeps the row's id, participant and sequence", archive, c)
		}
	}
	own := []string{a.AttemptNo, a.Status, a.ClaimedAt, a.CompletedAt, a.RailReference, a.RailCode, a.ErrorCode, a.ErrorMessage, a.LatencyMS,
		l.RetryCount, l.Queue.Due.Name, l.CreatedAt}
	n := &names{
		hot: hot.String(), archive: archive.String(),
		id: q(l.ID.Name), idType: l.ID.Type,
		participant: q(l.Queue.Participant.Name), sequence: q(l.Queue.Sequence.Name), due: q(l.Queue.Due.Name),
		retry: q(l.RetryCount), created: optQ(l.CreatedAt),
		attemptNo: q(a.AttemptNo), status: q(a.Status), claimedAt: q(a.ClaimedAt), completedAt: optQ(a.CompletedAt),
		railRef: optQ(a.RailReference), railCode: optQ(a.RailCode), errCode: optQ(a.ErrorCode), errMsg: optQ(a.ErrorMessage),
		latency:     optQ(a.LatencyMS),
		dispatching: lit(a.States.Dispatching), dispatched: lit(a.States.Dispatched), retryable: lit(a.States.Retryable),
		failed: lit(a.States.Failed), zombie: lit(a.States.Zombie),
	}
	for _, c := range hotCols {
		if inArch[c.Name] && !slices.Contains(own, c.Name) {
			n.copied = append(n.copied, q(c.Name))
		}
	}
	return n, nil
}

// cols prefixes each column with alias.
func cols(alias string, cs []string) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = alias + "." + c
	}
	return strings.Join(out, ", ")
}

// outcomes are the states of an attempt's outcome (the states of the
// archive's unique index of outcomes).
func (n *names) outcomes() string {
	return n.dispatched + ", " + n.retryable + ", " + n.failed + ", " + n.zombie
}

// settled are the states that end a sequence number's dispatch.
func (n *names) settled() string { return n.dispatched + ", " + n.failed }

// openAttempt is true for a row of archive alias a that is a DISPATCHING
// attempt without an outcome.
func (n *names) openAttempt(a string) string {
	return fmt.Sprintf(`%s.%s = %s AND NOT EXISTS (SELECT 1 FROM %s o WHERE o.%s = %s.%s AND o.%s = %s.%s AND o.%s IN (%s))`,
		a, n.status, n.dispatching, n.archive, n.id, a, n.id, n.attemptNo, a, n.attemptNo, n.status, n.outcomes())
}

// statements are a queue's SQL.
type statements struct {
	claim, claimFenced string // $1 limit [, $2 shard, $3 owner, $4 term]
	outcome            string // see Complete
	replay             string // $1 id
	reap               string // $1 timeout seconds
	gauges             string // $1 stuck after seconds
	gaps               string
	stats              string
}

func buildStatements(n *names, l *layout.Layout, relaySchema string) statements {
	rs := q(relaySchema)
	var s statements
	order := "p." + n.due
	if n.created != "" {
		order += ", p." + n.created
	}
	order += ", p." + n.sequence
	where := []string{
		"h." + n.due + " <= now()",
		// no gap: at most one past the last settled (none settled yet: any)
		fmt.Sprintf("COALESCE(h.%s <= (SELECT max(s.%s) FROM %s s WHERE s.%s = h.%s AND s.%s IN (%s)) + 1, true)",
			n.sequence, n.sequence, n.archive, n.participant, n.participant, n.status, n.settled()),
		// nothing of the participant in flight: one dispatch at a time, so
		// only its latest DISPATCHING attempt can lack an outcome
		fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM (SELECT a.%s, a.%s, a.%s FROM %s a WHERE a.%s = h.%s AND a.%s = %s
      ORDER BY a.%s DESC LIMIT 1) a WHERE %s)`, n.id, n.attemptNo, n.status, n.archive, n.participant, n.participant,
			n.status, n.dispatching, n.claimedAt, n.openAttempt("a")),
	}
	headCols := []string{n.id, n.participant, n.sequence, n.due}
	if n.created != "" {
		headCols = append(headCols, n.created)
	}
	claim := func(where []string) string {
		sel := postgres.RowSelect(l, "d", "d."+n.retry+"::int")
		// heads: each participant's earliest waiting row, the only one of
		// its rows that may go.
		return fmt.Sprintf(`WITH heads AS (
  SELECT DISTINCT ON (%[15]s) %[16]s FROM %[2]s ORDER BY %[15]s, %[17]s
), cand AS (
  SELECT p.%[1]s FROM heads h JOIN %[2]s p ON p.%[1]s = h.%[1]s
  WHERE %[3]s
  ORDER BY %[4]s
  LIMIT $1
  FOR UPDATE OF p SKIP LOCKED
), d AS (
  DELETE FROM %[2]s p USING cand WHERE p.%[1]s = cand.%[1]s RETURNING p.*
), ins AS (
  INSERT INTO %[5]s (%[6]s, %[7]s, %[8]s, %[9]s)
  SELECT %[10]s, d.%[11]s + 1, %[12]s, now() FROM d
  RETURNING %[1]s, %[7]s, %[9]s
)
SELECT %[13]s, ins.%[7]s::text
FROM d JOIN ins ON ins.%[1]s = d.%[1]s
ORDER BY %[14]s`, n.id, n.hot, strings.Join(where, "\n    AND "), strings.ReplaceAll(order, "p.", "h."),
			n.archive, strings.Join(n.copied, ", "), n.attemptNo, n.status, n.claimedAt,
			cols("d", n.copied), n.retry, n.dispatching,
			strings.Join(sel, ",\n  "), strings.ReplaceAll(order, "p.", "d."),
			n.participant, strings.Join(headCols, ", "), n.sequence)
	}
	s.claim = claim(where)
	s.claimFenced = claim(append(slices.Clone(where),
		"EXISTS (SELECT 1 FROM "+rs+".leases l WHERE l.shard = $2 AND l.owner = $3 AND l.term = $4)"))

	// The outcome of each attempt, one row per attempt of u; ON CONFLICT
	// (the archive's unique index of outcomes) makes a second outcome of
	// an attempt a no-op. A retryable attempt's row goes back to the hot
	// table, a failed one to the dead letters, each only when its outcome
	// was recorded here.
	outCols := []string{n.attemptNo, n.status, n.claimedAt}
	outVals := []string{"a." + n.attemptNo, "u.state", "a." + n.claimedAt}
	add := func(c, v string) {
		if c != "" {
			outCols, outVals = append(outCols, c), append(outVals, v)
		}
	}
	add(n.completedAt, "now()")
	add(n.railRef, "NULLIF(u.ref, '')")
	add(n.railCode, "NULLIF(u.code, '')")
	add(n.errCode, "NULLIF(u.ecode, '')")
	add(n.errMsg, "NULLIF(u.emsg, '')")
	add(n.latency, "u.latency")
	backCols, backVals := []string{n.retry, n.due}, []string{"rec." + n.attemptNo, "u.due"}
	if n.created != "" {
		backCols, backVals = append(backCols, n.created), append(backVals, "COALESCE(u.created, now())")
	}
	s.outcome = fmt.Sprintf(`WITH u AS (
  SELECT * FROM unnest($4::text[], $5::int[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::int[],
    $12::timestamptz[], $13::timestamptz[], $14::text[], $15::text[], $16::text[], $17::bytea[], $18::bool[])
    AS u(id, n, state, ref, code, ecode, emsg, latency, due, created, event_type, topic, key, payload, is_json)
), rec AS (
  INSERT INTO %[1]s (%[2]s, %[3]s)
  SELECT %[4]s, %[5]s
  FROM u JOIN %[1]s a ON a.%[6]s = u.id::%[7]s AND a.%[8]s = u.n AND a.%[9]s = %[10]s
  ON CONFLICT DO NOTHING
  RETURNING *
), back AS (
  INSERT INTO %[11]s (%[2]s, %[12]s)
  SELECT %[13]s, %[14]s FROM rec JOIN u ON rec.%[6]s = u.id::%[7]s AND rec.%[8]s = u.n
  WHERE rec.%[9]s = %[15]s
  ON CONFLICT DO NOTHING
), dead AS (
  INSERT INTO %[16]s.failed_events (original_event_id, source, source_schema, source_table, event_type, topic, event_key,
    payload, payload_raw, row_data, failure_reason, failure_count)
  SELECT u.id, $1, $2, $3, COALESCE(u.event_type, ''), u.topic, u.key,
    CASE WHEN u.is_json THEN convert_from(u.payload, 'UTF8')::jsonb END, CASE WHEN NOT u.is_json THEN u.payload END,
    to_jsonb(rec), COALESCE(u.emsg, ''), rec.%[8]s
  FROM rec JOIN u ON rec.%[6]s = u.id::%[7]s AND rec.%[8]s = u.n
  WHERE rec.%[9]s = %[17]s
)
SELECT rec.%[6]s::text, rec.%[9]s::text FROM rec`,
		n.archive, strings.Join(n.copied, ", "), strings.Join(outCols, ", "), cols("a", n.copied), strings.Join(outVals, ", "),
		n.id, n.idType, n.attemptNo, n.status, n.dispatching,
		n.hot, strings.Join(backCols, ", "), cols("rec", n.copied), strings.Join(backVals, ", "), n.retryable,
		rs, n.failed)

	// A replay puts the dead letter's row back from its latest FAILED
	// attempt: same id and sequence, due now.
	replayCols, replayVals := []string{n.retry, n.due}, []string{"a." + n.attemptNo, "now()"}
	s.replay = fmt.Sprintf(`INSERT INTO %s (%s, %s)
SELECT %s, %s FROM %s a WHERE a.%s = $1::text::%s AND a.%s = %s
ORDER BY a.%s DESC LIMIT 1
ON CONFLICT DO NOTHING`, n.hot, strings.Join(n.copied, ", "), strings.Join(replayCols, ", "),
		cols("a", n.copied), strings.Join(replayVals, ", "), n.archive, n.id, n.idType, n.status, n.failed, n.attemptNo)

	// The reaper records a zombie outcome for each attempt left without one
	// for longer than the timeout, and puts its row back: only the reaper
	// whose outcome was recorded puts it back.
	zCols := []string{n.attemptNo, n.status, n.claimedAt}
	zVals := []string{"z." + n.attemptNo, n.zombie, "z." + n.claimedAt}
	addZ := func(c, v string) {
		if c != "" {
			zCols, zVals = append(zCols, c), append(zVals, v)
		}
	}
	addZ(n.completedAt, "now()")
	addZ(n.errCode, lit("ZOMBIE_REQUEUE"))
	addZ(n.errMsg, lit("no outcome within the zombie timeout: the dispatcher stopped"))
	zBackCols, zBackVals := []string{n.retry, n.due}, []string{"rec." + n.attemptNo, "now()"}
	if n.created != "" {
		zBackCols, zBackVals = append(zBackCols, n.created), append(zBackVals,
			fmt.Sprintf("(SELECT min(f.%s) FROM %s f WHERE f.%s = rec.%s)", n.claimedAt, n.archive, n.id, n.id))
	}
	s.reap = fmt.Sprintf(`WITH z AS (
  SELECT a.* FROM %[1]s a
  WHERE %[2]s AND a.%[3]s < now() - make_interval(secs => $1)
), rec AS (
  INSERT INTO %[1]s (%[4]s, %[5]s)
  SELECT %[6]s, %[7]s FROM z
  ON CONFLICT DO NOTHING
  RETURNING *
)
INSERT INTO %[8]s (%[4]s, %[9]s)
SELECT %[10]s, %[11]s FROM rec
ON CONFLICT DO NOTHING
RETURNING %[12]s::text, %[13]s::text, %[14]s`,
		n.archive, n.openAttempt("a"), n.claimedAt, strings.Join(n.copied, ", "), strings.Join(zCols, ", "),
		cols("z", n.copied), strings.Join(zVals, ", "), n.hot, strings.Join(zBackCols, ", "), cols("rec", n.copied),
		strings.Join(zBackVals, ", "), n.id, n.participant, n.sequence)

	oldest := "0"
	if n.created != "" {
		oldest = fmt.Sprintf("COALESCE((SELECT EXTRACT(EPOCH FROM now() - min(%s)) FROM %s WHERE %s <= now()), 0)", n.created, n.hot, n.due)
	}
	s.gauges = fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s), %[2]s,
  (SELECT count(*) FROM %[3]s a WHERE %[4]s AND a.%[5]s < now() - make_interval(secs => $1))`,
		n.hot, oldest, n.archive, n.openAttempt("a"), n.claimedAt)

	// A participant held by a gap: its earliest waiting row is more than
	// one past its last settled sequence number.
	s.gaps = fmt.Sprintf(`SELECT p.%[1]s::text, p.%[2]s, m.last FROM (
  SELECT DISTINCT ON (%[1]s) %[1]s, %[2]s FROM %[3]s ORDER BY %[1]s, %[2]s) p
CROSS JOIN LATERAL (SELECT max(s.%[2]s) AS last FROM %[4]s s WHERE s.%[1]s = p.%[1]s AND s.%[5]s IN (%[6]s)) m
WHERE p.%[2]s > m.last + 1
ORDER BY 1`, n.participant, n.sequence, n.hot, n.archive, n.status, n.settled())

	created := "NULL::timestamptz AS min"
	if n.created != "" {
		created = "min(o." + n.created + ")::timestamptz AS min"
	}
	s.stats = postgres.StatsStatement(relaySchema, "SELECT count(*), "+created+" FROM "+n.hot+" o")
	return s
}

// archiveTable is the archive's table: qualified, or in the hot table's
// schema.
func archiveTable(hot postgres.Table, a layout.QueueSpec) (postgres.Table, error) {
	if !strings.Contains(a.Attempts, ".") && !strings.Contains(a.Attempts, `"`) {
		return postgres.Table{Schema: hot.Schema, Name: a.Attempts}, nil
	}
	schema, name, err := layout.ParseTableName(a.Attempts)
	if err != nil {
		return postgres.Table{}, fmt.Errorf("state.queue.attempts: %w", err)
	}
	return postgres.Table{Schema: schema, Name: name}, nil
}
