package bench

import (
	"fmt"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// A drain's history (--history) is rows already delivered, older than the
// backlog and before it in the claim's order, as a table that keeps its
// delivered rows holds after months of use. They are loaded in their
// delivered state: the columns the relay sets when it acknowledges a row,
// with the values it would give them.

// delivered is the state a layout's rows are in once the relay has
// delivered them: the columns it sets and their values.
type delivered struct {
	// cols are the columns the relay sets on delivery, in the order of
	// values' result.
	cols []string
	// publishedAt is the one of cols that holds the delivery's time: a
	// delivered row has it set, a pending one has it NULL.
	publishedAt string
	// values are row i's values in cols, delivered at at.
	values func(i int, at time.Time) []any
}

// historyBatch is how many history rows share a claim's batch id, where
// the layout records one: the relay's default batch size.
const historyBatch = 1000

// deliveredState is how l marks a row delivered, on a table of the columns
// has says exist (the first of l's published_at candidates that exists is
// the one the relay sets). A layout whose delivered rows leave the table
// (delete, queue) has no such state: history does not apply to it.
func deliveredState(l layout.Spec, has func(col string) bool) (delivered, error) {
	var d delivered
	for _, c := range l.State.PublishedAt {
		if has(c) {
			d.publishedAt = c
			break
		}
	}
	switch l.State.Mode {
	case "delete", "queue":
		return d, fmt.Errorf("layout mode %s deletes delivered rows: a history of delivered rows does not apply", l.State.Mode)
	case "flag", "status", "timestamp":
	default:
		return d, fmt.Errorf("layout mode %q: unknown", l.State.Mode)
	}
	if d.publishedAt == "" {
		return d, fmt.Errorf("layout mode %s: none of the published_at columns %v is in the table", l.State.Mode, l.State.PublishedAt)
	}
	switch l.State.Mode {
	case "flag":
		d.cols = []string{l.State.Flag, d.publishedAt}
		d.values = func(_ int, at time.Time) []any { return []any{true, at} }
	case "status":
		d.cols = []string{l.State.Status, d.publishedAt}
		d.values = func(_ int, at time.Time) []any { return []any{l.State.Published, at} }
	case "timestamp":
		d.cols = []string{d.publishedAt}
		d.values = func(_ int, at time.Time) []any { return []any{at} }
		if l.State.BatchID != "" && l.State.ClaimedAt != "" {
			// The claim recorded its batch id and time; it was claimed a
			// moment before its delivery.
			d.cols = append(d.cols, l.State.BatchID, l.State.ClaimedAt)
			d.values = func(i int, at time.Time) []any {
				return []any{at, historyBatchID(i / historyBatch), at.Add(-time.Millisecond)}
			}
		}
	}
	if slices.Contains(d.cols, "") {
		return d, fmt.Errorf("layout mode %s: a state column is not named (%v)", l.State.Mode, d.cols)
	}
	return d, nil
}

// historyBatchID is the batch id of the history's batch b, a UUID as the
// relay's are.
func historyBatchID(b int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012x", b) }

// keepsDelivered says whether the shape's delivered rows stay in its table
// (its layout marks them): only such a table can have a history.
func (sh *shape) keepsDelivered() bool {
	switch sh.spec().State.Mode {
	case "delete", "queue":
		return false
	}
	return true
}

// spec is the layout the relay reads the shape's table with: its preset's,
// or the benchmark's own.
func (sh *shape) spec() layout.Spec {
	if sh.preset != "" {
		return layout.Presets[sh.preset]
	}
	return sh.layout
}

// historyNote is what a result says when --history asked for delivered
// rows that its table does not keep.
const historyNote = "history does not apply: this table's rows are deleted on delivery, so it was drained without one"
