package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// Each layout that keeps delivered rows is loaded in the state the relay
// leaves them in; layouts that delete them have no history.
func TestDeliveredState(t *testing.T) {
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name        string
		l           layout.Spec
		cols        []string // the table's
		want        []string
		publishedAt string
		vals        []any // of row 1500
	}{
		{"published-flag", layout.Presets["published-flag"], []string{"id", "published", "published_at"},
			[]string{"published", "published_at"}, "published_at", []any{true, at}},
		// The relay sets the first published_at candidate the table has.
		{"published-flag, processed_at", layout.Presets["published-flag"], []string{"id", "published", "processed_at"},
			[]string{"published", "processed_at"}, "processed_at", []any{true, at}},
		{"status", layout.Presets["status"], []string{"id", "status", "published_at"},
			[]string{"status", "published_at"}, "published_at", []any{"published", at}},
		{"prisma", layout.Presets["prisma"], []string{"id", "status", "publishedAt"},
			[]string{"status", "publishedAt"}, "publishedAt", []any{"published", at}},
		{"kafka-outbox", layout.Presets["kafka-outbox"], []string{"id", "push_completed_at", "batch_id", "push_started_at"},
			[]string{"push_completed_at", "batch_id", "push_started_at"}, "push_completed_at",
			[]any{at, "00000000-0000-4000-8000-000000000001", at.Add(-time.Millisecond)}},
		{"mark", markLayoutPG.layout, []string{"id", "published", "published_at"},
			[]string{"published", "published_at"}, "published_at", []any{true, at}},
	}
	for _, c := range cases {
		d, err := deliveredState(c.l, func(col string) bool { return slices.Contains(c.cols, col) })
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !slices.Equal(d.cols, c.want) || d.publishedAt != c.publishedAt {
			t.Errorf("%s: columns %v (published at %q), want %v (%q)", c.name, d.cols, d.publishedAt, c.want, c.publishedAt)
		}
		if got := d.values(1500, at); !slices.Equal(got, c.vals) {
			t.Errorf("%s: values %v, want %v", c.name, got, c.vals)
		}
	}
	for _, l := range []layout.Spec{layout.Presets["delete"], layout.Presets["payment-queue"], deleteLayoutMy.layout} {
		if _, err := deliveredState(l, func(string) bool { return true }); err == nil {
			t.Errorf("mode %s: no error", l.State.Mode)
		}
	}
	// A table without any of the published_at columns cannot be marked.
	if _, err := deliveredState(layout.Presets["status"], func(c string) bool { return c == "status" }); err == nil {
		t.Error("status without published_at: no error")
	}
}

// Only shapes that keep delivered rows take a history; the others say so
// in their result and drain without one.
func TestHistoryApplies(t *testing.T) {
	keeps := map[string]bool{"published-flag": true, "status": true, "prisma": true, "kafka-outbox": true, "delete": false, "payment-queue": false}
	for name, want := range keeps {
		sp := presetSpecs[name]
		for _, sh := range []*shape{sp.pg, sp.my} {
			if sh != nil && sh.keepsDelivered() != want {
				t.Errorf("preset %s: keeps delivered rows %v, want %v", name, !want, want)
			}
		}
	}
	o := Options{History: 100, Rows: 10}
	for name, sp := range layoutSpecs {
		res, od := newDrainResult(o, "postgres", sp, sp.pg, true)
		if keeps := name == "mark"; keeps != (od.History == 100 && res.History == 100 && res.HistoryNote == "") ||
			!keeps && (od.History != 0 || res.History != 0 || res.HistoryNote == "") {
			t.Errorf("layout %s: history %d (options %d), note %q", name, res.History, od.History, res.HistoryNote)
		}
	}
}

// drainWithHistory drains every preset's table and the mark layout with a
// history of 200 delivered rows before a backlog of 300: the ceiling loop
// and the relay take the backlog's rows only, and afterwards the table
// holds the history and the backlog, all delivered. Tables that delete
// their delivered rows drain without a history and say so.
func drainWithHistory(t *testing.T, base Options) {
	base.Workload, base.Rows, base.History, base.Keys, base.PayloadBytes = "drain", 300, 200, 20, 100
	base.BatchSize, base.Pipeline, base.Orderings, base.Partitions, base.InProcessBroker = 100, 2, []bool{true}, 4, true
	base.MaxTime = 5 * time.Minute
	for _, tables := range []struct{ presets, layouts []string }{{presets: []string{"all"}}, {layouts: []string{"mark"}}} {
		o := base
		o.Presets, o.Layouts = tables.presets, tables.layouts
		rep, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Drain) == 0 {
			t.Fatal("no results")
		}
		for _, r := range rep.Drain {
			if r.Relay.Events != o.Rows || r.Ceiling.Events != o.Rows || r.Relay.CutShort || r.Ceiling.CutShort {
				t.Errorf("%s: relay %d, ceiling %d events (cut short %v, %v), want the backlog's %d",
					r.label(), r.Relay.Events, r.Ceiling.Events, r.Relay.CutShort, r.Ceiling.CutShort, o.Rows)
			}
			if r.Preset == "delete" || r.Preset == "payment-queue" {
				if r.History != 0 || r.HistoryNote == "" || r.TableRowsAfter != nil {
					t.Errorf("%s: history %d, note %q, rows after %v; want none, and a note", r.label(), r.History, r.HistoryNote, r.TableRowsAfter)
				}
				continue
			}
			want := o.History + o.Rows
			if r.History != o.History || r.HistoryNote != "" || r.TableRowsAfter == nil || r.DeliveredAfter == nil ||
				*r.TableRowsAfter != want || *r.DeliveredAfter != want {
				t.Errorf("%s: history %d (%q), table %v rows after, %v delivered; want %d, %d, %d",
					r.label(), r.History, r.HistoryNote, deref(r.TableRowsAfter), deref(r.DeliveredAfter), o.History, want, want)
			}
		}
		var out strings.Builder
		Print(&out, rep)
		if !strings.Contains(out.String(), "history") || strings.Contains(out.String(), "delivered after the relay phase") {
			t.Errorf("the table does not show the history, or shows rows left undelivered:\n%s", out.String())
		}
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestDrainWithHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	drainWithHistory(t, Options{DSN: pgtest.AdminDSN()})
}

func TestDrainWithHistoryMySQL(t *testing.T) {
	if testing.Short() {
		t.Skip("needs MariaDB")
	}
	mytest.Admin(t)
	drainWithHistory(t, Options{Driver: "mysql", MySQLDSN: mytest.AdminDSN()})
}
