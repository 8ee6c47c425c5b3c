package sqlcore

import "github.com/outbox-relay/outbox-relay/internal/layout"

// The select list of a claimed row, in order: what every store reads back
// into a source.Row. A store's own columns (a row's address, the claim's
// time) follow Attempts; the layout's extra templates come last.
const (
	ColID = iota
	ColPayload
	ColTopic
	ColKey
	ColPartitionKey
	ColOrderKey
	ColHeaders
	ColEventType
	ColAggregateType
	ColAggregateID
	ColCreatedAt
	ColMaxRetries
	ColAttempts
	NumRowColumns
)

// RowColumns are the expressions of a claimed row's columns. The dialect
// fills the ones whose types it reads its own way (ID, Payload, Headers,
// CreatedAt, MaxRetries, Attempts); Row fills the rest.
type RowColumns struct {
	ID, Payload, Topic, Key, PartitionKey, OrderKey, Headers     string
	EventType, AggregateType, AggregateID, CreatedAt, MaxRetries string
	Attempts                                                     string
}

// Row returns the columns of a row of table alias that every dialect
// writes alike: the rendered route, the order key and the event's names.
// An empty key is no key; a missing template or column is NULL.
func (s SQL) Row(l *layout.Layout, alias string) RowColumns {
	return RowColumns{
		Topic:         s.Template(l.Topic, alias),
		Key:           NullIfEmpty(s.OptTemplate(l.Key, alias)),
		PartitionKey:  s.OptTemplate(l.PartitionKey, alias),
		OrderKey:      s.OrderKey(l, alias),
		EventType:     s.OptText(alias, l.EventType),
		AggregateType: s.OptText(alias, l.AggregateType),
		AggregateID:   s.OptText(alias, l.AggregateID),
	}
}

// OptText renders alias.column as text, or a text NULL when the layout has
// no such column.
func (s SQL) OptText(alias, name string) string {
	if name == "" {
		return s.D.NullText()
	}
	return s.D.Text(s.Col(alias, name))
}

// List is the select list in column order, then more (the store's own
// columns), then the layout's extra templates.
func (s SQL) List(c RowColumns, l *layout.Layout, alias string, more ...string) []string {
	out := []string{c.ID, c.Payload, c.Topic, c.Key, c.PartitionKey, c.OrderKey, c.Headers,
		c.EventType, c.AggregateType, c.AggregateID, c.CreatedAt, c.MaxRetries, c.Attempts}
	out = append(out, more...)
	for _, t := range l.Extra {
		out = append(out, s.Template(t, alias))
	}
	return out
}
