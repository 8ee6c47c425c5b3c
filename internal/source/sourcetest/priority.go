package sourcetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// priorityRows is a backlog of two classes over keys, by topic ("hi.<n>"
// urgent, anything else not; "HI.<n>" differs in case only, and is not):
//
//	c1 a1 c2 b1 a2 c3 d1 e1 b2 a3 c4 d2 c5 d3
//
// where a row of key a, b, d is urgent at a3, b1, d1, d2, d3, and every c
// and e row is not. Before a3, key a has two rows that are not urgent.
func priorityRows() (rows []Row, names []string) {
	for _, r := range []struct{ name, key, topic string }{
		{"c1", "c1", "lo.1"}, {"a1", "a", "lo.2"}, {"c2", "c2", "lo.3"}, {"b1", "b", "hi.1"},
		{"a2", "a", "lo.4"}, {"c3", "c3", "lo.5"}, {"d1", "d", "hi.2"}, {"e1", "e", "HI.3"},
		{"b2", "b", "lo.6"}, {"a3", "a", "hi.4"}, {"c4", "c4", "lo.7"}, {"d2", "d", "hi.5"},
		{"c5", "c5", "lo.8"}, {"d3", "d", "hi.6"},
	} {
		k := map[string]int{"a": 1, "b": 2, "c1": 3, "c2": 4, "c3": 5, "c4": 6, "c5": 7, "d": 8, "e": 9}[r.key]
		rows = append(rows, Row{Topic: r.topic, Key: key(700 + k), Payload: fmt.Sprintf(`{"row": %q}`, r.name)})
		names = append(names, r.name)
	}
	return rows, names
}

// testPriorityClasses: a store under a priority (sources[].event_priority)
// claims the rows of the urgent class first. With ordering, a row is taken
// with the earlier rows of its key (a1 and a2 come with a3), never without
// them, and a row that only an earlier row of its key is urgent before
// (b2) waits its turn; without ordering, each row goes by its own class.
// The class is matched case-sensitively. A second claim, the first held,
// takes the rest in the claim's order.
func (s *suite) testPriorityClasses(t *testing.T) {
	prio := &source.Priority{Column: "topic", Classes: []string{"hi.*"}, Lookahead: 100}
	for _, tc := range []struct {
		ordering      bool
		first, second []string
	}{
		{true, []string{"a1", "b1", "a2", "d1", "a3", "d2", "d3"}, []string{"c1", "c2", "c3"}},
		{false, []string{"b1", "d1", "a3", "d2"}, []string{"d3", "c1", "a1"}},
	} {
		t.Run(fmt.Sprintf("ordering=%v", tc.ordering), func(t *testing.T) {
			tbl, src := s.newTable(t)
			rs, names := priorityRows()
			got := tbl.Insert(t, rs...)
			name := map[string]string{}
			for i, id := range got {
				name[id] = names[i]
			}
			named := func(b source.Batch) []string {
				var out []string
				for _, id := range ids(b) {
					out = append(out, name[id])
				}
				return out
			}
			st := tbl.Open(t, Options{Source: src, Ordering: tc.ordering, Priority: prio})
			first := claim(t, st, len(tc.first))
			defer release(t, first)
			// A batch's rows are in the order of the table within each key;
			// which keys come first is the store's.
			if f := named(first); !sameSet(f, tc.first) || !keysInOrder(rowsOf(first)) {
				t.Fatalf("first claim took %v, want %v (the urgent class and, with ordering, the earlier rows of its keys) with each key's rows in order", f, tc.first)
			}
			second := claim(t, st, len(tc.second))
			defer release(t, second)
			if sec := named(second); !sameSet(sec, tc.second) || !keysInOrder(rowsOf(second)) {
				t.Fatalf("second claim took %v, want %v", sec, tc.second)
			}
		})
	}
}

// sameSet says whether a and b hold the same names.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// keysInOrder says whether each key's rows in rows come in the order of
// their payloads' insertion (their ids as the table numbers them are not
// comparable across layouts; the payload's row name is: a1 < a2 < a3).
func keysInOrder(rows []source.Row) bool {
	last := map[string]string{}
	for _, r := range rows {
		p := string(r.Payload)
		if prev, ok := last[r.OrderKey]; ok && prev > p {
			return false
		}
		last[r.OrderKey] = p
	}
	return true
}
