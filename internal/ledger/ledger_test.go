package ledger

import "testing"

func TestCheck(t *testing.T) {
	type want struct{ lost, unexpected, dups, order int }
	for _, tt := range []struct {
		name      string
		commits   [][2]string // id, key
		delivered []string
		except    map[string]bool
		want      want
	}{
		{"all in order", [][2]string{{"a1", "a"}, {"b1", "b"}, {"a2", "a"}}, []string{"b1", "a1", "a2"}, nil, want{}},
		{"lost", [][2]string{{"a1", "a"}, {"a2", "a"}}, []string{"a1"}, nil, want{lost: 1}},
		{"unexpected", [][2]string{{"a1", "a"}}, []string{"a1", "rolled-back"}, nil, want{unexpected: 1}},
		{"duplicate", [][2]string{{"a1", "a"}, {"a2", "a"}}, []string{"a1", "a2", "a1"}, nil, want{dups: 1}},
		{"out of order", [][2]string{{"a1", "a"}, {"a2", "a"}}, []string{"a2", "a1"}, nil, want{order: 1}},
		{"order judged on first delivery", [][2]string{{"a1", "a"}, {"a2", "a"}}, []string{"a1", "a2", "a1"}, nil, want{dups: 1}},
		{"dead letter excepted", [][2]string{{"a1", "a"}, {"a2", "a"}, {"a3", "a"}}, []string{"a1", "a3"}, map[string]bool{"a2": true}, want{}},
		{"keyless events have no order", [][2]string{{"x1", ""}, {"x2", ""}}, []string{"x2", "x1"}, nil, want{}},
		{"other keys do not order", [][2]string{{"a1", "a"}, {"b1", "b"}, {"b2", "b"}}, []string{"b1", "b2", "a1"}, nil, want{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := New()
			for _, c := range tt.commits {
				l.Commit(c[0], c[1])
			}
			for _, id := range tt.delivered {
				l.Deliver(id)
			}
			r := l.Check(func(id string) bool { return tt.except[id] })
			got := want{len(r.Lost), len(r.Unexpected), r.Duplicates, len(r.OutOfOrder)}
			if got != tt.want {
				t.Errorf("%s: got %+v, want %+v", r, got, tt.want)
			}
			if r.OK() != (tt.want.lost == 0 && tt.want.unexpected == 0 && tt.want.order == 0) {
				t.Errorf("OK() = %v for %s", r.OK(), r)
			}
		})
	}
}
