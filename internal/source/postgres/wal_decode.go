package postgres

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// The type oids whose text output is not what a claim reads of them with
// ::text (see walTuple.text).
const (
	oidBool   = 16
	oidBytea  = 17
	oidBpchar = 1042
)

// walTuple is a row the stream decoded: its columns' values as text, in
// the server's output format (the replication connection sets DateStyle
// ISO and TimeZone UTC), nil for NULL.
type walTuple struct {
	rel    *pglogrepl.RelationMessage
	vals   []*string
	byName map[string]int
}

// newWALTuple reads the new tuple of an insert into rel.
func newWALTuple(rel *pglogrepl.RelationMessage, cols map[string]int, t *pglogrepl.TupleData) (walTuple, error) {
	if t == nil || len(t.Columns) != len(rel.Columns) {
		return walTuple{}, fmt.Errorf("insert into %s.%s: tuple does not match its relation's %d columns", rel.Namespace, rel.RelationName, len(rel.Columns))
	}
	w := walTuple{rel: rel, vals: make([]*string, len(t.Columns)), byName: cols}
	for i, c := range t.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeText:
			s := string(c.Data)
			w.vals[i] = &s
		case pglogrepl.TupleDataTypeNull:
		default:
			return walTuple{}, fmt.Errorf("insert into %s.%s: column %s in format %q, want text", rel.Namespace, rel.RelationName, rel.Columns[i].Name, c.DataType)
		}
	}
	return w, nil
}

// text is a column's value as a claim reads it with ::text: a boolean is
// true/false, not t/f, and a character(n) loses its padding. ok is false
// for NULL or a column the relation lacks.
func (w walTuple) text(col string) (string, bool) {
	i, ok := w.byName[col]
	if !ok || w.vals[i] == nil {
		return "", false
	}
	v := *w.vals[i]
	switch w.rel.Columns[i].DataType {
	case oidBool:
		if v == "t" {
			return "true", true
		}
		return "false", true
	case oidBpchar:
		return strings.TrimRight(v, " "), true
	}
	return v, true
}

// render is t rendered for this row, or nil when a column it needs is NULL
// or empty.
func (w walTuple) render(t layout.Template) *string {
	s, ok := t.Render(w.text)
	if !ok {
		return nil
	}
	return &s
}

// walRowOf renders a row as a claim of l selects it (see rowSelect),
// attempts aside: the route, the order key, the headers and extras from
// the layout's templates, in Go. A row that renders no topic has TopicOK
// false, and its payload is taken as it is: the engine dead-letters both
// as it does a claimed row's.
func walRowOf(l *layout.Layout, w walTuple) (source.Row, error) {
	var f source.RawFields
	id, ok := w.text(l.ID.Name)
	if !ok {
		return source.Row{}, fmt.Errorf("column %s: NULL id", l.ID.Name)
	}
	f.ID = []byte(id)
	if i, ok := w.byName[l.Payload.Name]; ok && w.vals[i] != nil {
		p := []byte(*w.vals[i])
		if w.rel.Columns[i].DataType == oidBytea {
			var err error
			if p, err = decodeByteaText(*w.vals[i]); err != nil {
				return source.Row{}, fmt.Errorf("column %s: %w", l.Payload.Name, err)
			}
		}
		f.Payload = p
	}
	bytes := func(s *string) []byte {
		if s == nil {
			return nil
		}
		return []byte(*s)
	}
	f.Topic = bytes(w.render(l.Topic))
	if len(l.Key) > 0 {
		if k := w.render(l.Key); k != nil && *k != "" {
			f.Key = []byte(*k)
		}
	}
	if len(l.PartitionKey) > 0 {
		f.PartitionKey = bytes(w.render(l.PartitionKey))
	}
	for _, t := range l.OrderKeys {
		if k := w.render(t); k != nil && *k != "" {
			f.OrderKey = []byte(*k)
			break
		}
	}
	if l.Headers != "" {
		if h, ok := w.text(l.Headers); ok && h != "" {
			f.Headers = []byte(h)
		}
	}
	opt := func(col string) []byte {
		if col == "" {
			return nil
		}
		v, _ := w.text(col)
		return []byte(v)
	}
	f.EventType, f.AggregateType, f.AggregateID = opt(l.EventType), opt(l.AggregateType), opt(l.AggregateID)
	var r source.Row
	r.Fill(f)
	if len(l.Extra) > 0 {
		r.Extra = make([]*string, len(l.Extra))
		for i, t := range l.Extra {
			r.Extra[i] = w.render(t)
		}
	}
	// What the engine only reads about a row (its age, its own retry
	// budget, the attempts another relay counted) is left unknown when the
	// value does not parse ('infinity'), rather than stop the stream.
	if v, ok := w.text(l.CreatedAt); ok && l.CreatedAt != "" {
		if t, err := parseWALTime(v); err == nil {
			r.CreatedAt = t
		}
	}
	if v, ok := w.text(l.MaxRetries); ok && l.MaxRetries != "" {
		if n, err := strconv.Atoi(v); err == nil {
			r.MaxAttempts = n + 1
		}
	}
	if v, ok := w.text(l.RetryCount); ok && l.RetryCount != "" {
		if n, err := strconv.Atoi(v); err == nil {
			r.Attempts = n
		}
	}
	return r, nil
}

// decodeByteaText reads bytea's hex output (bytea_output hex: "\x0a1b").
func decodeByteaText(s string) ([]byte, error) {
	if !strings.HasPrefix(s, `\x`) {
		return nil, fmt.Errorf("bytea not in hex output (set bytea_output = hex)")
	}
	return hex.DecodeString(s[2:])
}

// parseWALTime reads a timestamp, timestamptz or date in DateStyle ISO
// with TimeZone UTC; a timestamp without zone is taken as UTC.
func parseWALTime(s string) (time.Time, error) {
	for _, f := range []string{"2006-01-02 15:04:05.999999999Z07", "2006-01-02 15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999Z07:00:00", "2006-01-02 15:04:05.999999999", "2006-01-02"} {
		if t, err := time.Parse(f, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q: not in DateStyle ISO", s)
}
