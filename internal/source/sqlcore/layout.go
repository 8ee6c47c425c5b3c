package sqlcore

import (
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// Template renders a template as a text expression that is NULL when a
// reference finds its column, and every fallback, NULL or empty.
func (s SQL) Template(t layout.Template, alias string) string {
	var parts []string
	for _, p := range t {
		if p.Column == "" {
			parts = append(parts, s.D.Literal(p.Literal))
			continue
		}
		var alts []string
		for _, c := range p.Alternatives() {
			alts = append(alts, "NULLIF("+s.D.Text(s.Col(alias, c))+", '')")
		}
		if len(alts) == 1 {
			parts = append(parts, alts[0])
		} else {
			parts = append(parts, "COALESCE("+strings.Join(alts, ", ")+")")
		}
	}
	switch len(parts) {
	case 0:
		return s.D.NullText()
	case 1:
		if len(t.Columns()) == 0 {
			return s.D.Text(parts[0])
		}
		return parts[0]
	}
	return s.D.Concat(parts)
}

// OptTemplate renders a template, or NULL when the layout has none.
func (s SQL) OptTemplate(t layout.Template, alias string) string {
	if len(t) == 0 {
		return "NULL"
	}
	return s.Template(t, alias)
}

// OrderKey is the row's order key: the first of the layout's order key
// templates that is neither NULL nor empty, else ”. Rows whose key is ”
// have no order and hold nothing.
func (s SQL) OrderKey(l *layout.Layout, alias string) string {
	if len(l.OrderKeys) == 0 {
		return "''"
	}
	var parts []string
	for _, t := range l.OrderKeys {
		parts = append(parts, "NULLIF("+s.Template(t, alias)+", '')")
	}
	return "COALESCE(" + strings.Join(parts, ", ") + ", '')"
}

// Pending is the condition of a row neither delivered nor dead-lettered.
func (s SQL) Pending(l *layout.Layout, alias string) string {
	var p string
	switch l.Mode {
	case "flag":
		p = s.Col(alias, l.Flag) + " = " + s.D.Bool(false)
	case "timestamp":
		p = s.Col(alias, l.PublishedAt) + " IS NULL"
	case "status":
		p = s.Col(alias, l.Status) + " = " + s.D.Literal(l.Pending)
	default: // delete: every row present is pending
		p = s.D.Bool(true)
	}
	if l.Errored.Name != "" {
		p += " AND " + s.Col(alias, l.Errored.Name) + " = " + l.ErroredValue(false)
	}
	return p
}

// StateSets returns the SET lists of a published row, a dead-lettered row
// and a row put back in the pending set (a replay).
func (s SQL) StateSets(l *layout.Layout) (published, dead, pending string) {
	q := s.D.Quote
	var pub, dd, pend []string
	switch l.Mode {
	case "flag":
		pub = append(pub, q(l.Flag)+" = "+s.D.Bool(true))
		// A dead-lettered row leaves the pending set with its published
		// timestamp still NULL; failed_events says why.
		dd = append(dd, q(l.Flag)+" = "+s.D.Bool(true))
		pend = append(pend, q(l.Flag)+" = "+s.D.Bool(false))
	case "status":
		pub = append(pub, q(l.Status)+" = "+s.D.Literal(l.Published))
		dd = append(dd, q(l.Status)+" = "+s.D.Literal(l.Failed))
		pend = append(pend, q(l.Status)+" = "+s.D.Literal(l.Pending))
	case "timestamp":
		// Without an errored flag the timestamp is the only state there
		// is: a dead letter takes it out of the pending set with the
		// dead-letter mark, not a delivery time (see layout.DeadLetterMark).
		if l.Errored.Name == "" {
			dd = append(dd, q(l.PublishedAt)+" = "+s.D.Timestamp(layout.DeadLetterMark))
		}
	}
	if l.Errored.Name != "" {
		// The flag alone takes a dead letter out of the pending set; a
		// flag or timestamp column keeps saying it was never published.
		if l.Mode == "flag" {
			dd = dd[:0]
		}
		dd = append(dd, q(l.Errored.Name)+" = "+l.ErroredValue(true))
		pend = append(pend, q(l.Errored.Name)+" = "+l.ErroredValue(false))
	}
	if l.PublishedAt != "" {
		pub = append(pub, q(l.PublishedAt)+" = "+s.D.Now())
		pend = append(pend, q(l.PublishedAt)+" = NULL")
	}
	if l.RetryCount != "" {
		pend = append(pend, q(l.RetryCount)+" = 0")
	}
	if l.Error != "" {
		if reset := s.D.ResetError(q(l.Error)); reset != "" {
			pend = append(pend, reset)
		}
	}
	if l.BatchID.Name != "" {
		pend = append(pend, q(l.BatchID.Name)+" = NULL", q(l.ClaimedAt.Name)+" = NULL")
	}
	return strings.Join(pub, ", "), strings.Join(dd, ", "), strings.Join(pend, ", ")
}

// MaxRowAttempts is the most a row's retry count column is given: what a
// smallint holds, the smallest type a team keeps it in.
const MaxRowAttempts = 32767

// FailureSets is the SET list that records a failure in the row itself,
// where the layout has the columns: its retry count (attempts, capped at
// MaxRowAttempts), then its last error (errText). Empty when the table keeps
// neither.
func (s SQL) FailureSets(l *layout.Layout, attempts, errText string) []string {
	var sets []string
	if l.RetryCount != "" {
		sets = append(sets, s.D.Quote(l.RetryCount)+" = LEAST("+attempts+", "+strconv.Itoa(MaxRowAttempts)+")")
	}
	if l.Error != "" {
		sets = append(sets, s.D.Quote(l.Error)+" = "+errText)
	}
	return sets
}
