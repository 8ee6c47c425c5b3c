package sqlcore

import (
	"errors"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// ErrNoAge is returned for a layout whose table has no column that dates a
// row (no published-at and no created-at column).
var ErrNoAge = errors.New("the layout has no published-at or created-at column to date rows by")

// Settled are the conditions retention selects rows by, for one alias:
// rows matching none of them (pending, claimed, in backoff, any state the
// layout does not name) are never selected.
type Settled struct {
	// Settled is a row delivered or dead-lettered as the row itself says:
	// where only failed_events tells the two apart, it leaves that test
	// out, so that a locking read can check it again without reading
	// failed_events.
	Settled string
	// Delivered and Dead tell a delivered row from a dead-lettered one.
	Delivered, Dead string
	// Age dates a settled row: when it was published, else when it was
	// created.
	Age string
}

// Retention returns the conditions of a settled row of alias. asTime
// renders a date column as what the cutoff is compared with; openDead is
// the condition that failed_events holds an open (not replayed) dead letter
// for the row, asked only where the row does not record its dead letters.
//
// Where the row records a dead letter (a failed status, an errored flag)
// that tells the two apart. Where it does not (a flag or a timestamp set for
// both), a row is a dead letter while failed_events holds an open entry for
// it.
func (s SQL) Retention(l *layout.Layout, alias string, asTime func(string) string, openDead func() string) (Settled, error) {
	var (
		out   Settled
		dates []string
	)
	switch {
	case l.PublishedAt != "" && l.Mode == "timestamp" && l.Errored.Name == "":
		// A dead letter's timestamp is the dead-letter mark, not a date.
		dates = append(dates, asTime("NULLIF("+s.Col(alias, l.PublishedAt)+", "+s.D.Timestamp(layout.DeadLetterMark)+")"))
	case l.PublishedAt != "":
		dates = append(dates, asTime(s.Col(alias, l.PublishedAt)))
	}
	if l.CreatedAt != "" {
		dates = append(dates, asTime(s.Col(alias, l.CreatedAt)))
	}
	switch len(dates) {
	case 0:
		return out, ErrNoAge
	case 1:
		out.Age = dates[0]
	default:
		out.Age = "COALESCE(" + strings.Join(dates, ", ") + ")"
	}

	switch l.Mode {
	case "status":
		out.Delivered = s.Col(alias, l.Status) + " = " + s.D.Literal(l.Published)
		out.Dead = s.Col(alias, l.Status) + " = " + s.D.Literal(l.Failed)
		out.Settled = "(" + out.Delivered + " OR " + out.Dead + ")"
		return out, nil
	case "flag":
		out.Settled = s.Col(alias, l.Flag) + " = " + s.D.Bool(true)
	case "timestamp":
		out.Settled = s.Col(alias, l.PublishedAt) + " IS NOT NULL"
	default:
		return out, errors.New("layout mode " + l.Mode + " keeps no settled rows")
	}
	if l.Errored.Name != "" {
		errored := s.Col(alias, l.Errored.Name)
		out.Delivered = "(" + out.Settled + " AND " + errored + " = " + l.ErroredValue(false) + ")"
		// A dead letter is errored whatever the state column says.
		out.Dead = errored + " = " + l.ErroredValue(true)
		out.Settled = "(" + out.Delivered + " OR " + out.Dead + ")"
		return out, nil
	}
	open := openDead()
	out.Delivered = "(" + out.Settled + " AND NOT " + open + ")"
	out.Dead = "(" + out.Settled + " AND " + open + ")"
	return out, nil
}
