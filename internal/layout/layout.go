// Package layout maps an outbox table's columns to events. A layout is data:
// a preset (see Presets) merged with a source's overrides, then checked
// against the real table's columns so that a typo fails at start with the
// field that names it. The package owns the layout as a configuration
// writes it (Spec), its templates and table names, and needs nothing beyond
// the standard library: configuration and stores both build on it.
package layout

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Column is one column of an outbox table as the database describes it.
type Column struct {
	Name string
	// Type is the SQL type as the database spells it (format_type), used
	// for casts such as $1::uuid[].
	Type string
	// Serial says the database fills the column in insert order: an
	// identity column or a sequence default (PostgreSQL), AUTO_INCREMENT
	// (MySQL, MariaDB).
	Serial bool
}

// Layout is a merged layout checked against a real table. Optional columns
// the table lacks are empty strings.
type Layout struct {
	ID      Column
	Payload Column
	// PayloadJSON asks for the payload to be validated as JSON; a row that
	// is not goes to the dead-letter table. Off for json and jsonb columns,
	// which hold nothing else.
	PayloadJSON bool

	Topic, Key, PartitionKey Template
	// OrderKeys are tried in turn; the first that is not empty is the row's
	// order key (the partition key, falling back to the key, as the Kafka
	// partition does). None at all means one global order.
	OrderKeys []Template

	Headers, EventType, AggregateType, AggregateID, CreatedAt string
	OrderBy, XID, RetryCount, MaxRetries, Error               string

	// Extra are templates rendered for each row into source.Row.Extra
	// (see AddExtra).
	Extra []Template
	// HeaderExtras are the headers the configuration adds (extra_headers),
	// each rendered into source.Row.Extra.
	HeaderExtras []HeaderExtra

	Mode        string // flag|timestamp|status|delete|queue, or ModeNone
	Flag        string
	PublishedAt string
	Status      string
	Pending     string
	Published   string
	Failed      string

	// Errored, when set, marks dead-lettered rows: pending rows hold
	// ErroredValue(false), dead letters ErroredValue(true).
	Errored Column
	// BatchID and ClaimedAt record an acknowledged row's claim; a row
	// another relay claimed and never finished is pending again once its
	// ClaimedAt is older than the claim timeout. Both set or neither.
	BatchID, ClaimedAt Column

	// Queue is mode queue's: the table's participant, sequence and due
	// columns, and the archive as configured (its columns are checked by
	// the queue's store, which reads that table).
	Queue *Queue
}

// ErroredValue is the SQL constant of the errored flag: a boolean column
// holds true/false, an integer column 1/0.
func (l *Layout) ErroredValue(on bool) string {
	if l.Errored.Type == "boolean" || l.Errored.Type == "bool" {
		if on {
			return "true"
		}
		return "false"
	}
	if on {
		return "1"
	}
	return "0"
}

// DeadLetterMark is the published timestamp of a dead-lettered row in a
// table whose only state is that timestamp (timestamp mode without an
// errored flag): the row leaves the pending set, and the application's own
// table tells it from a delivery, which never happens at the epoch. It is
// UTC and valid for every timestamp and date type of PostgreSQL, MySQL and
// MariaDB. outbox_relay.failed_events holds the reason.
const DeadLetterMark = "1970-01-01 00:00:01"

// FieldError names the layout field that is wrong.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Merge overlays a source's layout fields on its preset. topic, when not
// empty, replaces the topic template. It returns the merged layout and the
// set of fields the source set itself (those must exist in the table; a
// preset's optional columns that the table lacks are dropped instead).
func Merge(preset string, over Spec, topic string) (Spec, map[string]bool, error) {
	var l Spec
	if preset != "" {
		p, ok := Presets[preset]
		if !ok {
			return l, nil, &FieldError{"preset", fmt.Sprintf("unknown preset %q (have: %s)", preset, strings.Join(PresetNames(), ", "))}
		}
		l = p
		l.State.PublishedAt = append([]string(nil), p.State.PublishedAt...)
	}
	explicit := map[string]bool{}
	set := func(name string, dst *string, v string) {
		if v != "" {
			*dst = v
			explicit[name] = true
		}
	}
	set("id", &l.ID, over.ID)
	set("payload", &l.Payload, over.Payload)
	set("payload_format", &l.PayloadFormat, over.PayloadFormat)
	set("topic", &l.Topic, over.Topic)
	set("topic", &l.Topic, topic)
	set("key", &l.Key, over.Key)
	set("partition_key", &l.PartitionKey, over.PartitionKey)
	set("order_key", &l.OrderKey, over.OrderKey)
	set("headers", &l.Headers, over.Headers)
	if len(over.ExtraHeaders) > 0 {
		l.ExtraHeaders = over.ExtraHeaders
		explicit["extra_headers"] = true
	}
	set("event_type", &l.EventType, over.EventType)
	set("aggregate_type", &l.AggregateType, over.AggregateType)
	set("aggregate_id", &l.AggregateID, over.AggregateID)
	set("created_at", &l.CreatedAt, over.CreatedAt)
	set("order_by", &l.OrderBy, over.OrderBy)
	set("xid_column", &l.XIDColumn, over.XIDColumn)
	set("retry_count", &l.RetryCount, over.RetryCount)
	set("max_retries", &l.MaxRetries, over.MaxRetries)
	set("error", &l.Error, over.Error)
	set("state.mode", &l.State.Mode, over.State.Mode)
	set("state.flag", &l.State.Flag, over.State.Flag)
	set("state.status", &l.State.Status, over.State.Status)
	set("state.pending", &l.State.Pending, over.State.Pending)
	set("state.published", &l.State.Published, over.State.Published)
	set("state.failed", &l.State.Failed, over.State.Failed)
	set("state.errored", &l.State.Errored, over.State.Errored)
	set("state.batch_id", &l.State.BatchID, over.State.BatchID)
	set("state.claimed_at", &l.State.ClaimedAt, over.State.ClaimedAt)
	if len(over.State.PublishedAt) > 0 {
		l.State.PublishedAt = over.State.PublishedAt
		explicit["state.published_at"] = true
	}
	mergeQueue(&l.State.Queue, over.State.Queue, set)
	if l.State.Mode == "" {
		return l, nil, &FieldError{"state.mode", "required: set a preset or layout.state.mode (flag|timestamp|status|delete|queue)"}
	}
	return l, explicit, nil
}

// Resolve checks a merged layout against the table's columns.
func Resolve(l Spec, explicit map[string]bool, table string, cols []Column) (*Layout, error) {
	byName := make(map[string]Column, len(cols))
	for _, c := range cols {
		byName[c.Name] = c
	}
	missing := func(field, col string) error {
		return &FieldError{field, fmt.Sprintf("column %q not found in %s", col, table)}
	}
	out := &Layout{Mode: l.State.Mode, PayloadJSON: l.PayloadFormat != "raw"}
	need := func(field, col string) (Column, error) {
		if col == "" {
			return Column{}, &FieldError{field, "required"}
		}
		c, ok := byName[col]
		if !ok {
			return Column{}, missing(field, col)
		}
		return c, nil
	}
	// optional keeps a column the table has; a missing one is an error only
	// when the source named it itself.
	optional := func(field, col string) (string, error) {
		if col == "" {
			return "", nil
		}
		if _, ok := byName[col]; ok {
			return col, nil
		}
		if explicit[field] {
			return "", missing(field, col)
		}
		return "", nil
	}
	var err error
	if out.ID, err = need("id", l.ID); err != nil {
		return nil, err
	}
	if out.Payload, err = need("payload", l.Payload); err != nil {
		return nil, err
	}
	if t := out.Payload.Type; t == "jsonb" || t == "json" {
		out.PayloadJSON = false // the database only stores valid JSON there
	}
	for _, f := range []struct {
		field string
		src   string
		dst   *string
	}{
		{"headers", l.Headers, &out.Headers},
		{"event_type", l.EventType, &out.EventType},
		{"aggregate_type", l.AggregateType, &out.AggregateType},
		{"aggregate_id", l.AggregateID, &out.AggregateID},
		{"created_at", l.CreatedAt, &out.CreatedAt},
		{"order_by", l.OrderBy, &out.OrderBy},
		{"xid_column", l.XIDColumn, &out.XID},
		{"retry_count", l.RetryCount, &out.RetryCount},
		{"max_retries", l.MaxRetries, &out.MaxRetries},
		{"error", l.Error, &out.Error},
	} {
		if *f.dst, err = optional(f.field, f.src); err != nil {
			return nil, err
		}
	}
	if out.OrderBy == "" {
		out.OrderBy = out.CreatedAt
		if out.OrderBy == "" {
			out.OrderBy = out.ID.Name
		}
	}
	for _, cand := range l.State.PublishedAt {
		if _, ok := byName[cand]; ok {
			out.PublishedAt = cand
			break
		}
	}
	if out.PublishedAt == "" && len(l.State.PublishedAt) > 0 && (explicit["state.published_at"] || l.State.Mode == "timestamp") {
		return nil, &FieldError{"state.published_at", fmt.Sprintf("none of the columns %s found in %s", strings.Join(l.State.PublishedAt, ", "), table)}
	}
	switch l.State.Mode {
	case "flag":
		c, err := need("state.flag", l.State.Flag)
		if err != nil {
			return nil, err
		}
		out.Flag = c.Name
	case "timestamp":
		if out.PublishedAt == "" {
			return nil, &FieldError{"state.published_at", "required for mode timestamp"}
		}
	case "status":
		c, err := need("state.status", l.State.Status)
		if err != nil {
			return nil, err
		}
		out.Status = c.Name
		out.Pending, out.Published, out.Failed = l.State.Pending, l.State.Published, l.State.Failed
		for _, f := range [][2]string{{"state.pending", out.Pending}, {"state.published", out.Published}, {"state.failed", out.Failed}} {
			if f[1] == "" {
				return nil, &FieldError{f[0], "required for mode status"}
			}
		}
	case "delete", ModeNone:
	case "queue":
		if out.Queue, err = resolveQueue(l.State.Queue, need); err != nil {
			return nil, err
		}
		if out.RetryCount == "" {
			return nil, &FieldError{"retry_count", "required for mode queue (the attempts a row has had)"}
		}
	default:
		return nil, &FieldError{"state.mode", fmt.Sprintf("must be flag, timestamp, status, delete or queue, got %q", l.State.Mode)}
	}
	if err := resolveClaimState(out, l.State, explicit, byName, missing); err != nil {
		return nil, err
	}

	tmpl := func(field, src string, required bool) (Template, error) {
		if src == "" {
			if required {
				return nil, &FieldError{field, "required"}
			}
			return nil, nil
		}
		t, err := ParseTemplate(src)
		if err != nil {
			return nil, &FieldError{field, err.Error()}
		}
		for _, c := range t.Columns() {
			if _, ok := byName[c]; !ok {
				if !required && !explicit[field] {
					return nil, nil // a preset's optional column the table lacks
				}
				return nil, missing(field, c)
			}
		}
		return t, nil
	}
	if out.Topic, err = tmpl("topic", l.Topic, true); err != nil {
		return nil, err
	}
	if out.Key, err = tmpl("key", l.Key, false); err != nil {
		return nil, err
	}
	if out.PartitionKey, err = tmpl("partition_key", l.PartitionKey, false); err != nil {
		return nil, err
	}
	orderKey, err := tmpl("order_key", l.OrderKey, false)
	if err != nil {
		return nil, err
	}
	for _, t := range []Template{orderKey, out.PartitionKey, out.Key} {
		if len(t) > 0 {
			out.OrderKeys = append(out.OrderKeys, t)
			if l.OrderKey != "" {
				break
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(l.ExtraHeaders)) {
		field := "extra_headers." + name
		t, err := ParseTemplate(l.ExtraHeaders[name])
		if err != nil {
			return nil, &FieldError{field, err.Error()}
		}
		n, err := out.AddExtra(field, t, cols)
		if err != nil {
			return nil, err
		}
		out.HeaderExtras = append(out.HeaderExtras, HeaderExtra{Name: name, Extra: n})
	}
	return out, nil
}

// HeaderExtra is a header the configuration adds: its name, and the index
// in source.Row.Extra of its rendered value (NULL: no header).
type HeaderExtra struct {
	Name  string
	Extra int
}

// resolveClaimState fills the errored flag and the claim columns. They are
// optional: a preset's column the table lacks is dropped, one the source
// named itself must exist.
func resolveClaimState(out *Layout, st State, explicit map[string]bool, byName map[string]Column, missing func(field, col string) error) error {
	pick := func(field, name string) (Column, error) {
		if name == "" {
			return Column{}, nil
		}
		c, ok := byName[name]
		if !ok {
			if explicit[field] {
				return Column{}, missing(field, name)
			}
			return Column{}, nil
		}
		return c, nil
	}
	var err error
	if out.Errored, err = pick("state.errored", st.Errored); err != nil {
		return err
	}
	if out.Errored.Name != "" {
		if out.Mode == "delete" {
			return &FieldError{"state.errored", "not used with mode delete (a dead-lettered row is deleted)"}
		}
		if !flagType(out.Errored.Type) {
			return &FieldError{"state.errored", fmt.Sprintf("column %q is %s; want a boolean or integer column", out.Errored.Name, out.Errored.Type)}
		}
	}
	if out.BatchID, err = pick("state.batch_id", st.BatchID); err != nil {
		return err
	}
	if out.ClaimedAt, err = pick("state.claimed_at", st.ClaimedAt); err != nil {
		return err
	}
	if (out.BatchID.Name == "") != (out.ClaimedAt.Name == "") {
		return &FieldError{"state", "batch_id and claimed_at need each other: found only one of them in the table"}
	}
	if out.BatchID.Name != "" && out.Mode == "delete" {
		return &FieldError{"state.batch_id", "not used with mode delete (an acknowledged row is deleted)"}
	}
	return nil
}

// flagType says whether a column type can hold the errored flag.
func flagType(t string) bool {
	t = strings.ToLower(t)
	return t == "boolean" || t == "bool" || strings.Contains(t, "int")
}
