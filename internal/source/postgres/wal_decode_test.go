package postgres

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// walTestLayout reads a relation of walTestRelation's columns.
func walTestLayout(t testing.TB) *layout.Layout {
	tmpl := func(s string) layout.Template {
		tt, err := layout.ParseTemplate(s)
		if err != nil {
			t.Fatal(err)
		}
		return tt
	}
	return &layout.Layout{
		ID: layout.Column{Name: "id", Type: "bigint"}, Payload: layout.Column{Name: "body", Type: "bytea"},
		Topic: tmpl("events.{topic}"), Key: tmpl("{k}"), PartitionKey: tmpl("{pk}"),
		OrderKeys: []layout.Template{tmpl("{pk}"), tmpl("{k}")},
		Headers:   "headers", EventType: "type", CreatedAt: "created_at", MaxRetries: "max", RetryCount: "rc",
		Extra: []layout.Template{tmpl("{flag}"), tmpl("{code}")},
	}
}

var walTestRelation = &pglogrepl.RelationMessage{Namespace: "app", RelationName: "events", Columns: []*pglogrepl.RelationMessageColumn{
	{Name: "id", DataType: 20}, {Name: "body", DataType: oidBytea}, {Name: "topic", DataType: 25}, {Name: "k", DataType: 25},
	{Name: "pk", DataType: 25}, {Name: "headers", DataType: 3802}, {Name: "type", DataType: 25}, {Name: "created_at", DataType: 1184},
	{Name: "max", DataType: 21}, {Name: "rc", DataType: 21}, {Name: "flag", DataType: oidBool}, {Name: "code", DataType: oidBpchar},
}}

// walTuple makes the new tuple of an insert: nil is NULL.
func walTestTuple(vals ...*string) *pglogrepl.TupleData {
	td := &pglogrepl.TupleData{}
	for _, v := range vals {
		if v == nil {
			td.Columns = append(td.Columns, &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull})
		} else {
			td.Columns = append(td.Columns, &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(*v)})
		}
	}
	return td
}

func walTestRow(t testing.TB, td *pglogrepl.TupleData) (walTuple, error) {
	byName := map[string]int{}
	for i, c := range walTestRelation.Columns {
		byName[c.Name] = i
	}
	return newWALTuple(walTestRelation, byName, td)
}

func str(s string) *string { return &s }

// TestWALRowOf: a tuple of the stream renders as a claim renders the row:
// templates with fallbacks, NULL or empty values missing, a boolean as
// true/false, a character(n) unpadded, bytea decoded, times in UTC.
func TestWALRowOf(t *testing.T) {
	t.Parallel()
	l := walTestLayout(t)
	w, err := walTestRow(t, walTestTuple(str("42"), str(`\x7b7d`), str("orders"), str("agg-1"), str(""), str(`{"a": "b"}`),
		str("order.placed"), str("2026-01-02 03:04:05.123456+00"), str("4"), str("2"), str("t"), str("EU  ")))
	if err != nil {
		t.Fatal(err)
	}
	r, err := walRowOf(l, w)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	if r.ID != "42" || string(r.Payload) != "{}" || !r.TopicOK || r.Topic != "events.orders" || string(r.Key) != "agg-1" ||
		r.PartitionKey != nil || r.OrderKey != "agg-1" || string(r.Headers) != `{"a": "b"}` || r.EventType != "order.placed" ||
		!r.CreatedAt.Equal(created) || r.MaxAttempts != 5 || r.Attempts != 2 || *r.Extra[0] != "true" || *r.Extra[1] != "EU" {
		t.Fatalf("row %+v (extras %q %q)", r, *r.Extra[0], *r.Extra[1])
	}
	w, err = walTestRow(t, walTestTuple(str("43"), str(`\x`), nil, nil, str("p"), str(""), nil, str("infinity"), nil, nil, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	r, err = walRowOf(l, w)
	if err != nil {
		t.Fatal(err)
	}
	if r.TopicOK || r.Key != nil || string(r.PartitionKey) != "p" || r.OrderKey != "p" || r.Headers != nil ||
		!r.CreatedAt.IsZero() || r.Extra[0] != nil || len(r.Payload) != 0 || r.Payload == nil {
		t.Fatalf("a row of NULLs: %+v", r)
	}
}

// FuzzWALRowOf: no value of the stream stops it but a NULL id.
func FuzzWALRowOf(f *testing.F) {
	f.Add("1", `\x00`, "t", "k", "2026-01-02 03:04:05+00", "3", "f", "x ")
	f.Fuzz(func(t *testing.T, id, body, topic, k, created, n, flag, code string) {
		l := walTestLayout(t)
		w, err := walTestRow(t, walTestTuple(&id, &body, &topic, &k, &k, &topic, &topic, &created, &n, &n, &flag, &code))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := walRowOf(l, w); err != nil && len(body) >= 2 && body[:2] == `\x` {
			if _, herr := decodeByteaText(body); herr == nil {
				t.Fatalf("decoded a valid row with an error: %v", err)
			}
		}
	})
}
