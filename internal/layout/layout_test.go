package layout

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const table = "public.outbox"

// cols describes a table: the id is a uuid, everything else text.
func cols(names ...string) []Column {
	out := make([]Column, 0, len(names))
	for _, n := range names {
		typ := "text"
		if n == "id" {
			typ = "uuid"
		}
		out = append(out, Column{Name: n, Type: typ})
	}
	return out
}

// without returns names minus drop.
func without(names []string, drop ...string) []string {
	var out []string
	for _, n := range names {
		if !slices.Contains(drop, n) {
			out = append(out, n)
		}
	}
	return out
}

// view is a Layout with its templates as strings, for comparison.
type view struct {
	ID, Payload                                               Column
	PayloadJSON                                               bool
	Topic, Key, PartitionKey                                  string
	OrderKeys                                                 []string
	Headers, EventType, AggregateType, AggregateID, CreatedAt string
	OrderBy, XID, RetryCount, MaxRetries, Error               string
	Mode, Flag, PublishedAt                                   string
	Status, Pending, Published, Failed                        string
}

func viewOf(l *Layout) view {
	v := view{
		ID: l.ID, Payload: l.Payload, PayloadJSON: l.PayloadJSON,
		Topic: l.Topic.String(), Key: l.Key.String(), PartitionKey: l.PartitionKey.String(),
		Headers: l.Headers, EventType: l.EventType, AggregateType: l.AggregateType, AggregateID: l.AggregateID,
		CreatedAt: l.CreatedAt, OrderBy: l.OrderBy, XID: l.XID, RetryCount: l.RetryCount, MaxRetries: l.MaxRetries,
		Error: l.Error, Mode: l.Mode, Flag: l.Flag, PublishedAt: l.PublishedAt,
		Status: l.Status, Pending: l.Pending, Published: l.Published, Failed: l.Failed,
	}
	for _, t := range l.OrderKeys {
		v.OrderKeys = append(v.OrderKeys, t.String())
	}
	return v
}

// resolve merges and resolves, failing the test on a Merge error.
func resolve(t *testing.T, preset string, over Spec, topic string, names ...string) (*Layout, error) {
	t.Helper()
	l, explicit, err := Merge(preset, over, topic)
	if err != nil {
		t.Fatalf("Merge(%q): %v", preset, err)
	}
	return Resolve(l, explicit, table, cols(names...))
}

func mustResolve(t *testing.T, preset string, over Spec, topic string, names ...string) view {
	t.Helper()
	l, err := resolve(t, preset, over, topic, names...)
	if err != nil {
		t.Fatalf("Resolve(%q, %v): %v", preset, names, err)
	}
	return viewOf(l)
}

// wantFieldError checks that err is a *FieldError with this field and text.
func wantFieldError(t *testing.T, err error, field, msg string) {
	t.Helper()
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error = %v (%T), want a *FieldError for %s", err, err, field)
	}
	if fe.Field != field || fe.Msg != msg {
		t.Errorf("error = {Field: %q, Msg: %q}, want {Field: %q, Msg: %q}", fe.Field, fe.Msg, field, msg)
	}
	if want := field + ": " + msg; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

var (
	idCol      = Column{Name: "id", Type: "uuid"}
	payloadCol = Column{Name: "payload", Type: "text"}
)

func TestPresetNames(t *testing.T) {
	want := []string{"delete", "kafka-outbox", "payment-queue", "prisma", "published-flag", "status"}
	if got := PresetNames(); !slices.Equal(got, want) {
		t.Errorf("PresetNames() = %v, want %v", got, want)
	}
}

func TestMergeUnknownPreset(t *testing.T) {
	l, explicit, err := Merge("outbox", Spec{ID: "id"}, "")
	wantFieldError(t, err, "preset", `unknown preset "outbox" (have: delete, kafka-outbox, payment-queue, prisma, published-flag, status)`)
	if explicit != nil {
		t.Errorf("explicit = %v with an error, want nil", explicit)
	}
	_ = l
}

func TestMergeOverrides(t *testing.T) {
	over := Spec{
		Topic:         "events.{event_type}",
		Key:           "{id}",
		Headers:       "meta",
		PayloadFormat: "raw",
		XIDColumn:     "xid",
		State:         State{Pending: "NEW", PublishedAt: []string{"sent_at"}},
	}
	l, explicit, err := Merge("status", over, "")
	if err != nil {
		t.Fatal(err)
	}
	want := Presets["status"]
	want.Topic, want.Key, want.Headers, want.PayloadFormat, want.XIDColumn = "events.{event_type}", "{id}", "meta", "raw", "xid"
	want.State.Pending = "NEW"
	want.State.PublishedAt = []string{"sent_at"}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("merged layout:\n got %+v\nwant %+v", l, want)
	}
	wantExplicit := map[string]bool{
		"topic": true, "key": true, "headers": true, "payload_format": true, "xid_column": true,
		"state.pending": true, "state.published_at": true,
	}
	if !reflect.DeepEqual(explicit, wantExplicit) {
		t.Errorf("explicit = %v, want %v", explicit, wantExplicit)
	}
}

func TestMergeEveryOverrideIsExplicit(t *testing.T) {
	over := Spec{
		ID: "i", Payload: "p", PayloadFormat: "json", Topic: "{t}", Key: "{k}", PartitionKey: "{pk}", OrderKey: "{ok}",
		Headers: "h", EventType: "et", AggregateType: "at", AggregateID: "ai", CreatedAt: "ca", OrderBy: "ob",
		XIDColumn: "x", RetryCount: "rc", MaxRetries: "mr", Error: "e", ExtraHeaders: map[string]string{"X": "{x}"},
		State: State{Mode: "status", Flag: "f", PublishedAt: []string{"pa"}, Status: "s", Pending: "P", Published: "D", Failed: "F",
			Errored: "er", BatchID: "b", ClaimedAt: "c", Queue: QueueSpec{Attempts: "qa", Participant: "qp", Sequence: "qs",
				Due: "qd", AttemptNo: "qn", Status: "qst", ClaimedAt: "qc", CompletedAt: "qcc", RailReference: "qrr",
				RailCode: "qrc", ErrorCode: "qec", ErrorMessage: "qem", LatencyMS: "ql", Channel: "qch",
				States: QueueStates{Dispatching: "1", Dispatched: "2", Retryable: "3", Failed: "4", Zombie: "5"}}},
	}
	for _, preset := range append(PresetNames(), "") {
		l, explicit, err := Merge(preset, over, "")
		if err != nil {
			t.Fatalf("Merge(%q): %v", preset, err)
		}
		if !reflect.DeepEqual(l, over) {
			t.Errorf("Merge(%q) = %+v, want every field from the overrides %+v", preset, l, over)
		}
		want := []string{
			"aggregate_id", "aggregate_type", "created_at", "error", "event_type", "headers", "id", "key",
			"max_retries", "order_by", "order_key", "partition_key", "payload", "payload_format", "retry_count",
			"state.batch_id", "state.claimed_at", "state.errored", "state.failed", "state.flag", "state.mode", "state.pending", "state.published", "state.published_at",
			"state.status", "topic", "xid_column",
		}
		for _, q := range []string{"attempt_no", "attempts", "channel", "claimed_at", "completed_at", "due", "error_code",
			"error_message", "latency_ms", "participant", "rail_code", "rail_reference", "sequence", "states.dispatched",
			"states.dispatching", "states.failed", "states.retryable", "states.zombie", "status"} {
			want = append(want, "state.queue."+q)
		}
		want = append(want, "extra_headers")
		slices.Sort(want)
		var got []string
		for k, v := range explicit {
			if v {
				got = append(got, k)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("Merge(%q) explicit = %v, want %v", preset, got, want)
		}
	}
}

func TestMergePresetOnly(t *testing.T) {
	for _, name := range PresetNames() {
		l, explicit, err := Merge(name, Spec{}, "")
		if err != nil {
			t.Fatalf("Merge(%q): %v", name, err)
		}
		if !reflect.DeepEqual(l, Presets[name]) {
			t.Errorf("Merge(%q) = %+v, want the preset %+v", name, l, Presets[name])
		}
		if len(explicit) != 0 {
			t.Errorf("Merge(%q) explicit = %v, want none", name, explicit)
		}
	}
}

func TestMergeDoesNotAliasPreset(t *testing.T) {
	l, _, err := Merge("published-flag", Spec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	l.State.PublishedAt[0] = "changed"
	if got := Presets["published-flag"].State.PublishedAt; !slices.Equal(got, []string{"published_at", "processed_at"}) {
		t.Fatalf("changing a merged layout changed the preset: %v", got)
	}
}

func TestMergeSourceTopic(t *testing.T) {
	tests := []struct {
		name       string
		layoutTopc string
		srcTopic   string
		want       string
		explicit   bool
	}{
		{"preset's", "", "", "{topic}", false},
		{"layout's", "orders", "", "orders", true},
		{"source's", "", "orders.{event_type}", "orders.{event_type}", true},
		{"source's over layout's", "orders", "audit", "audit", true},
	}
	for _, tt := range tests {
		l, explicit, err := Merge("delete", Spec{Topic: tt.layoutTopc}, tt.srcTopic)
		if err != nil {
			t.Fatal(err)
		}
		if l.Topic != tt.want || explicit["topic"] != tt.explicit {
			t.Errorf("%s: topic %q explicit %v, want %q explicit %v", tt.name, l.Topic, explicit["topic"], tt.want, tt.explicit)
		}
	}
}

func TestMergeRequiresMode(t *testing.T) {
	_, _, err := Merge("", Spec{ID: "id", Payload: "payload", Topic: "t"}, "")
	wantFieldError(t, err, "state.mode", "required: set a preset or layout.state.mode (flag|timestamp|status|delete|queue)")

	l, explicit, err := Merge("", Spec{ID: "id", State: State{Mode: "delete"}}, "t")
	if err != nil {
		t.Fatal(err)
	}
	if l.State.Mode != "delete" || l.Topic != "t" || !explicit["state.mode"] || !explicit["id"] {
		t.Errorf("Merge without a preset = %+v, explicit %v", l, explicit)
	}
}

var (
	flagCols   = []string{"id", "payload", "event_type", "aggregate_type", "aggregate_id", "created_at", "published", "published_at"}
	statusCols = []string{"id", "payload", "topic", "aggregate_id", "partition_key", "headers", "event_type", "aggregate_type",
		"created_at", "retry_count", "max_retries", "status", "published_at"}
	prismaCols = []string{"id", "payload", "eventType", "aggregateType", "aggregateId", "createdAt", "status", "publishedAt", "error"}
	deleteCols = []string{"id", "payload", "topic", "key"}
)

func TestResolvePublishedFlag(t *testing.T) {
	base := view{
		ID: idCol, Payload: payloadCol, PayloadJSON: true,
		Topic: "{event_type}", Key: "{aggregate_id}", OrderKeys: []string{"{aggregate_id}"},
		EventType: "event_type", AggregateType: "aggregate_type", AggregateID: "aggregate_id",
		CreatedAt: "created_at", OrderBy: "created_at",
		Mode: "flag", Flag: "published", PublishedAt: "published_at",
	}
	tests := []struct {
		name          string
		names         []string
		publishedAt   string
		createdAt     string
		aggregateType string
		orderBy       string
	}{
		{"published_at", flagCols, "published_at", "created_at", "aggregate_type", "created_at"},
		{"processed_at", append(without(flagCols, "published_at"), "processed_at"), "processed_at", "created_at", "aggregate_type", "created_at"},
		{"both: the first candidate wins", append(flagCols, "processed_at"), "published_at", "created_at", "aggregate_type", "created_at"},
		{"neither: no timestamp", without(flagCols, "published_at"), "", "created_at", "aggregate_type", "created_at"},
		{"optional columns missing", without(flagCols, "aggregate_type", "created_at"), "published_at", "", "", "id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustResolve(t, "published-flag", Spec{}, "", tt.names...)
			want := base
			want.PublishedAt, want.CreatedAt, want.AggregateType, want.OrderBy = tt.publishedAt, tt.createdAt, tt.aggregateType, tt.orderBy
			if !reflect.DeepEqual(got, want) {
				t.Errorf("layout:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestResolveStatus(t *testing.T) {
	got := mustResolve(t, "status", Spec{}, "", statusCols...)
	want := view{
		ID: idCol, Payload: payloadCol, PayloadJSON: true,
		Topic: "{topic}", Key: "{aggregate_id}", PartitionKey: "{partition_key}",
		OrderKeys: []string{"{partition_key}", "{aggregate_id}"},
		Headers:   "headers", EventType: "event_type", AggregateType: "aggregate_type", AggregateID: "aggregate_id",
		CreatedAt: "created_at", OrderBy: "created_at", RetryCount: "retry_count", MaxRetries: "max_retries",
		Mode: "status", Status: "status", Pending: "pending", Published: "published", Failed: "failed",
		PublishedAt: "published_at",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layout:\n got %+v\nwant %+v", got, want)
	}

	// The preset's optional columns and templates are dropped when the
	// table lacks them; the order key falls back to the key.
	got = mustResolve(t, "status", Spec{}, "",
		without(statusCols, "partition_key", "headers", "retry_count", "max_retries", "published_at", "event_type")...)
	want.PartitionKey, want.OrderKeys = "", []string{"{aggregate_id}"}
	want.Headers, want.RetryCount, want.MaxRetries, want.PublishedAt, want.EventType = "", "", "", "", ""
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layout without optional columns:\n got %+v\nwant %+v", got, want)
	}

	// Without aggregate_id either, there is no key: one global order.
	got = mustResolve(t, "status", Spec{}, "", without(statusCols, "partition_key", "aggregate_id")...)
	if got.Key != "" || got.PartitionKey != "" || got.OrderKeys != nil || got.AggregateID != "" {
		t.Errorf("without key columns: Key %q PartitionKey %q OrderKeys %q AggregateID %q, want all empty",
			got.Key, got.PartitionKey, got.OrderKeys, got.AggregateID)
	}
}

func TestResolvePrisma(t *testing.T) {
	got := mustResolve(t, "prisma", Spec{}, "", prismaCols...)
	want := view{
		ID: idCol, Payload: payloadCol, PayloadJSON: true,
		Topic: "{eventType}", Key: "{aggregateId}", OrderKeys: []string{"{aggregateId}"},
		EventType: "eventType", AggregateType: "aggregateType", AggregateID: "aggregateId",
		CreatedAt: "createdAt", OrderBy: "createdAt", Error: "error",
		Mode: "status", Status: "status", Pending: "pending", Published: "published", Failed: "failed",
		PublishedAt: "publishedAt",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layout:\n got %+v\nwant %+v", got, want)
	}
	// Snake-case columns do not match the preset's camelCase ones.
	_, err := resolve(t, "prisma", Spec{}, "", "id", "payload", "event_type", "status")
	wantFieldError(t, err, "topic", `column "eventType" not found in public.outbox`)
}

func TestResolveDelete(t *testing.T) {
	got := mustResolve(t, "delete", Spec{}, "", deleteCols...)
	want := view{
		ID: idCol, Payload: payloadCol, PayloadJSON: true,
		Topic: "{topic}", Key: "{key}", OrderKeys: []string{"{key}"},
		OrderBy: "id", Mode: "delete",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layout:\n got %+v\nwant %+v", got, want)
	}
	got = mustResolve(t, "delete", Spec{}, "", "id", "payload", "topic")
	if got.Key != "" || got.OrderKeys != nil {
		t.Errorf("without a key column: Key %q OrderKeys %q, want none", got.Key, got.OrderKeys)
	}
}

func TestResolveExplicitColumnMustExist(t *testing.T) {
	// Each of these is a preset column the table may lack silently; named
	// by the source, it must exist.
	tests := []struct {
		field string
		over  Spec
		col   string
	}{
		{"aggregate_type", Spec{AggregateType: "aggregate_type"}, "aggregate_type"},
		{"created_at", Spec{CreatedAt: "created_at"}, "created_at"},
		{"event_type", Spec{EventType: "kind"}, "kind"},
		{"headers", Spec{Headers: "headers"}, "headers"},
		{"order_by", Spec{OrderBy: "seq"}, "seq"},
		{"xid_column", Spec{XIDColumn: "txid"}, "txid"},
		{"retry_count", Spec{RetryCount: "retries"}, "retries"},
		{"max_retries", Spec{MaxRetries: "max_retries"}, "max_retries"},
		{"error", Spec{Error: "last_error"}, "last_error"},
		{"key", Spec{Key: "{aggregate_type}:{aggregate_id}"}, "aggregate_type"},
		{"partition_key", Spec{PartitionKey: "{tenant}"}, "tenant"},
		{"order_key", Spec{OrderKey: "{tenant}"}, "tenant"},
		{"topic", Spec{Topic: "orders.{tenant}"}, "tenant"},
		{"state.flag", Spec{State: State{Flag: "sent"}}, "sent"},
		{"id", Spec{ID: "event_id"}, "event_id"},
		{"payload", Spec{Payload: "body"}, "body"},
	}
	names := without(flagCols, "aggregate_type", "created_at")
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			// The preset alone resolves on this table.
			if _, err := resolve(t, "published-flag", Spec{}, "", names...); err != nil {
				t.Fatalf("preset alone: %v", err)
			}
			_, err := resolve(t, "published-flag", tt.over, "", names...)
			wantFieldError(t, err, tt.field, `column "`+tt.col+`" not found in public.outbox`)
		})
	}
}

func TestResolveTopic(t *testing.T) {
	// The preset's topic column is missing: the topic is required.
	_, err := resolve(t, "published-flag", Spec{}, "", without(flagCols, "event_type")...)
	wantFieldError(t, err, "topic", `column "event_type" not found in public.outbox`)

	// The source's topic replaces it, literal or not.
	got := mustResolve(t, "published-flag", Spec{}, "orders", without(flagCols, "event_type")...)
	if got.Topic != "orders" {
		t.Errorf("Topic = %q, want orders", got.Topic)
	}
	got = mustResolve(t, "published-flag", Spec{}, "{aggregate_type}.{event_type}.v1", flagCols...)
	if got.Topic != "{aggregate_type}.{event_type}.v1" {
		t.Errorf("Topic = %q", got.Topic)
	}
	_, err = resolve(t, "published-flag", Spec{}, "{aggregate_type}.{kind}", flagCols...)
	wantFieldError(t, err, "topic", `column "kind" not found in public.outbox`)

	// No topic at all.
	_, err = resolve(t, "", Spec{ID: "id", Payload: "payload", State: State{Mode: "delete"}}, "", deleteCols...)
	wantFieldError(t, err, "topic", "required")

	// A template that does not parse.
	_, err = resolve(t, "delete", Spec{}, "orders.{", deleteCols...)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "topic" || !strings.Contains(fe.Msg, `unclosed "{"`) {
		t.Errorf("error = %v, want a topic FieldError about the unclosed brace", err)
	}
}

func TestResolveStatusModeRequiresValues(t *testing.T) {
	full := Spec{ID: "id", Payload: "payload", Topic: "t",
		State: State{Mode: "status", Status: "state", Pending: "P", Published: "D", Failed: "F"}}
	names := []string{"id", "payload", "state"}
	got := mustResolve(t, "", full, "", names...)
	if got.Status != "state" || got.Pending != "P" || got.Published != "D" || got.Failed != "F" {
		t.Errorf("status layout = %+v", got)
	}
	for _, field := range []string{"state.pending", "state.published", "state.failed"} {
		l := full
		switch field {
		case "state.pending":
			l.State.Pending = ""
		case "state.published":
			l.State.Published = ""
		case "state.failed":
			l.State.Failed = ""
		}
		_, err := resolve(t, "", l, "", names...)
		wantFieldError(t, err, field, "required for mode status")
	}
	l := full
	l.State.Status = ""
	_, err := resolve(t, "", l, "", names...)
	wantFieldError(t, err, "state.status", "required")

	_, err = resolve(t, "", full, "", "id", "payload", "status")
	wantFieldError(t, err, "state.status", `column "state" not found in public.outbox`)

	// The status preset's status column must exist too.
	_, err = resolve(t, "status", Spec{}, "", without(statusCols, "status")...)
	wantFieldError(t, err, "state.status", `column "status" not found in public.outbox`)
}

func TestResolveFlagAndTimestampModes(t *testing.T) {
	_, err := resolve(t, "published-flag", Spec{}, "", without(flagCols, "published")...)
	wantFieldError(t, err, "state.flag", `column "published" not found in public.outbox`)

	_, err = resolve(t, "", Spec{ID: "id", Payload: "payload", Topic: "t", State: State{Mode: "flag"}}, "", "id", "payload")
	wantFieldError(t, err, "state.flag", "required")

	ts := Spec{ID: "id", Payload: "payload", Topic: "t",
		State: State{Mode: "timestamp", PublishedAt: []string{"sent_at", "delivered_at"}}}
	got := mustResolve(t, "", ts, "", "id", "payload", "delivered_at")
	if got.PublishedAt != "delivered_at" || got.Mode != "timestamp" {
		t.Errorf("timestamp layout: PublishedAt %q Mode %q, want delivered_at timestamp", got.PublishedAt, got.Mode)
	}
	_, err = resolve(t, "", ts, "", "id", "payload")
	wantFieldError(t, err, "state.published_at", "none of the columns sent_at, delivered_at found in public.outbox")

	ts.State.PublishedAt = nil
	_, err = resolve(t, "", ts, "", "id", "payload")
	wantFieldError(t, err, "state.published_at", "required for mode timestamp")

	// Candidates named by the source must exist even in flag mode.
	_, err = resolve(t, "published-flag", Spec{State: State{PublishedAt: []string{"sent_at"}}}, "", flagCols...)
	wantFieldError(t, err, "state.published_at", "none of the columns sent_at found in public.outbox")

	_, err = resolve(t, "", Spec{ID: "id", Payload: "payload", Topic: "t", State: State{Mode: "archive"}}, "", "id", "payload")
	wantFieldError(t, err, "state.mode", `must be flag, timestamp, status, delete or queue, got "archive"`)
}

func TestResolveOrderKeys(t *testing.T) {
	tests := []struct {
		name  string
		over  Spec
		names []string
		want  []string
	}{
		{"partition key then key", Spec{}, statusCols, []string{"{partition_key}", "{aggregate_id}"}},
		{"key alone", Spec{}, without(statusCols, "partition_key"), []string{"{aggregate_id}"}},
		{"explicit order key alone", Spec{OrderKey: "{aggregate_type}/{aggregate_id}"}, statusCols,
			[]string{"{aggregate_type}/{aggregate_id}"}},
		{"explicit literal order key: one global order", Spec{OrderKey: "all"}, statusCols, []string{"all"}},
		{"explicit partition key", Spec{PartitionKey: "{event_type}"}, statusCols, []string{"{event_type}", "{aggregate_id}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustResolve(t, "status", tt.over, "", tt.names...)
			if !slices.Equal(got.OrderKeys, tt.want) {
				t.Errorf("OrderKeys = %q, want %q", got.OrderKeys, tt.want)
			}
		})
	}
}

func TestResolveOrderBy(t *testing.T) {
	noPreset := Spec{ID: "id", Payload: "payload", Topic: "t", State: State{Mode: "delete"}}
	tests := []struct {
		name  string
		over  Spec
		names []string
		want  string
	}{
		{"created_at", Spec{CreatedAt: "created_at"}, []string{"id", "payload", "created_at"}, "created_at"},
		{"id", Spec{}, []string{"id", "payload"}, "id"},
		{"explicit", Spec{CreatedAt: "created_at", OrderBy: "seq"}, []string{"id", "payload", "created_at", "seq"}, "seq"},
		{"custom id", Spec{ID: "event_id"}, []string{"event_id", "payload"}, "event_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := noPreset
			if tt.over.CreatedAt != "" {
				l.CreatedAt = tt.over.CreatedAt
			}
			if tt.over.OrderBy != "" {
				l.OrderBy = tt.over.OrderBy
			}
			if tt.over.ID != "" {
				l.ID = tt.over.ID
			}
			got := mustResolve(t, "", l, "", tt.names...)
			if got.OrderBy != tt.want {
				t.Errorf("OrderBy = %q, want %q", got.OrderBy, tt.want)
			}
		})
	}
	// A preset whose order_by and created_at columns are both missing
	// orders by id.
	got := mustResolve(t, "published-flag", Spec{}, "", without(flagCols, "created_at")...)
	if got.OrderBy != "id" || got.CreatedAt != "" {
		t.Errorf("OrderBy %q CreatedAt %q, want id and none", got.OrderBy, got.CreatedAt)
	}
}

func TestResolvePayloadFormatAndTypes(t *testing.T) {
	got := mustResolve(t, "delete", Spec{PayloadFormat: "raw"}, "", deleteCols...)
	if got.PayloadJSON {
		t.Error("payload_format raw: PayloadJSON = true, want false")
	}
	l, explicit, err := Merge("delete", Spec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(l, explicit, table, []Column{{Name: "id", Type: "bigint"}, {Name: "payload", Type: "bytea"}, {Name: "topic", Type: "text"}, {Name: "key", Type: "text"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ID != (Column{Name: "id", Type: "bigint"}) || res.Payload != (Column{Name: "payload", Type: "bytea"}) {
		t.Errorf("ID %+v Payload %+v, want the table's types", res.ID, res.Payload)
	}
}

func TestResolveMissingRequired(t *testing.T) {
	_, err := resolve(t, "delete", Spec{}, "", "payload", "topic")
	wantFieldError(t, err, "id", `column "id" not found in public.outbox`)
	_, err = resolve(t, "delete", Spec{}, "", "id", "topic")
	wantFieldError(t, err, "payload", `column "payload" not found in public.outbox`)
	_, err = resolve(t, "", Spec{Payload: "payload", Topic: "t", State: State{Mode: "delete"}}, "", "id", "payload")
	wantFieldError(t, err, "id", "required")
}
