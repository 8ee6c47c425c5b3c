package layout

import (
	"slices"
	"testing"
)

// kafkaOutboxCols is seed 004's kafka_outbox as PostgreSQL describes it.
func kafkaOutboxCols() []Column {
	return []Column{
		{Name: "id", Type: "bigint"}, {Name: "batch_id", Type: "character varying(36)"},
		{Name: "push_started_at", Type: "timestamp without time zone"}, {Name: "push_completed_at", Type: "timestamp without time zone"},
		{Name: "topic", Type: "character varying(255)"}, {Name: "payload_json", Type: "text"}, {Name: "payload_headers", Type: "text"},
		{Name: "push_attempts", Type: "integer"}, {Name: "key", Type: "character varying(255)"}, {Name: "partition_key", Type: "character varying(255)"},
		{Name: "errored", Type: "smallint"}, {Name: "error_reason", Type: "text"}, {Name: "created_at", Type: "timestamp without time zone"},
	}
}

func TestKafkaOutboxPreset(t *testing.T) {
	merged, explicit, err := Merge("kafka-outbox", Spec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Resolve(merged, explicit, "public.kafka_outbox", kafkaOutboxCols())
	if err != nil {
		t.Fatal(err)
	}
	v := viewOf(l)
	if v.Payload.Name != "payload_json" || !v.PayloadJSON || v.Topic != "{topic}" || v.Key != "{key}" ||
		v.PartitionKey != "{partition_key}" || v.Headers != "payload_headers" || v.OrderBy != "id" ||
		v.Mode != "timestamp" || v.PublishedAt != "push_completed_at" || v.RetryCount != "push_attempts" ||
		v.Error != "error_reason" || v.CreatedAt != "created_at" {
		t.Fatalf("kafka-outbox resolved to %+v", v)
	}
	// The order key is the partition key, falling back to the key.
	if !slices.Equal(v.OrderKeys, []string{"{partition_key}", "{key}"}) {
		t.Errorf("order keys %v", v.OrderKeys)
	}
	if l.Errored.Name != "errored" || l.ErroredValue(true) != "1" || l.ErroredValue(false) != "0" {
		t.Errorf("errored %+v: values %s/%s", l.Errored, l.ErroredValue(true), l.ErroredValue(false))
	}
	if l.BatchID.Name != "batch_id" || l.ClaimedAt.Name != "push_started_at" {
		t.Errorf("claim columns %+v %+v", l.BatchID, l.ClaimedAt)
	}
}

func TestErroredBooleanColumn(t *testing.T) {
	over := Spec{State: State{Errored: "dead"}}
	merged, explicit, err := Merge("status", over, "")
	if err != nil {
		t.Fatal(err)
	}
	c := append(cols("id", "payload", "topic", "status"), Column{Name: "dead", Type: "boolean"})
	l, err := Resolve(merged, explicit, table, c)
	if err != nil {
		t.Fatal(err)
	}
	if l.ErroredValue(true) != "true" || l.ErroredValue(false) != "false" {
		t.Errorf("boolean errored values %s/%s", l.ErroredValue(true), l.ErroredValue(false))
	}
}

func TestClaimStateErrors(t *testing.T) {
	all := kafkaOutboxCols()
	drop := func(name string) []Column {
		return slices.DeleteFunc(slices.Clone(all), func(c Column) bool { return c.Name == name })
	}
	retype := func(name, typ string) []Column {
		out := slices.Clone(all)
		for i := range out {
			if out[i].Name == name {
				out[i].Type = typ
			}
		}
		return out
	}
	for _, tt := range []struct {
		name  string
		over  Spec
		cols  []Column
		field string
		msg   string
	}{
		{"errored is text", Spec{}, retype("errored", "text"), "state.errored", `column "errored" is text; want a boolean or integer column`},
		{"named errored missing", Spec{State: State{Errored: "failed_flag"}}, all, "state.errored", `column "failed_flag" not found in public.kafka_outbox`},
		{"named claim column missing", Spec{State: State{ClaimedAt: "claimed"}}, all, "state.claimed_at", `column "claimed" not found in public.kafka_outbox`},
		{"only batch_id in the table", Spec{}, drop("push_started_at"), "state", "batch_id and claimed_at need each other: found only one of them in the table"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			merged, explicit, err := Merge("kafka-outbox", tt.over, "")
			if err != nil {
				t.Fatal(err)
			}
			_, err = Resolve(merged, explicit, "public.kafka_outbox", tt.cols)
			wantFieldError(t, err, tt.field, tt.msg)
		})
	}
	// A preset's errored column the table lacks is dropped.
	merged, explicit, _ := Merge("kafka-outbox", Spec{}, "")
	l, err := Resolve(merged, explicit, "public.kafka_outbox", drop("errored"))
	if err != nil || l.Errored.Name != "" {
		t.Fatalf("without errored: %+v, %v", l, err)
	}
	// Mode delete has no row left to mark.
	merged, explicit, _ = Merge("delete", Spec{State: State{Errored: "errored"}}, "")
	_, err = Resolve(merged, explicit, "public.kafka_outbox", append(all, Column{Name: "payload", Type: "jsonb"}))
	wantFieldError(t, err, "state.errored", "not used with mode delete (a dead-lettered row is deleted)")
}
