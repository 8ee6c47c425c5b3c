package order

import (
	"slices"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	const (
		P = Published
		D = Dead
		R = Retry
		H = Hold
	)
	cases := []struct {
		name       string
		keys       []string
		results    []Result
		ordering   bool
		want       []Fate
		violations int
	}{
		{"all delivered", []string{"a", "a", "b"}, []Result{OK, OK, OK}, true, []Fate{P, P, P}, 0},
		{"a retry holds the key's later rows, not others", []string{"a", "b", "a", "a"},
			[]Result{Failed, OK, Failed, NotSent}, true, []Fate{R, P, H, H}, 0},
		{"a terminal failure does not stop its key", []string{"a", "a"}, []Result{Terminal, OK}, true, []Fate{D, P}, 0},
		{"after a terminal failure the next row's failure is its own", []string{"a", "a"}, []Result{Terminal, Failed}, true, []Fate{D, R}, 0},
		{"an unavailable sink holds the key uncharged", []string{"a", "a"}, []Result{Unavailable, Unavailable}, true, []Fate{H, H}, 0},
		{"a row not sent holds its key", []string{"a", "a"}, []Result{NotSent, OK}, true, []Fate{H, P}, 1},
		{"delivered after a retry is a violation", []string{"a", "a"}, []Result{Failed, OK}, true, []Fate{R, P}, 1},
		{"an invalid row is dead even behind a retry", []string{"a", "a"}, []Result{Failed, Invalid}, true, []Fate{R, D}, 0},
		{"keyless rows never hold each other", []string{"", "", ""}, []Result{Failed, OK, Unavailable}, true, []Fate{R, P, H}, 0},
		{"ordering off: every row on its own", []string{"a", "a", "a"}, []Result{Failed, Failed, OK}, false, []Fate{R, R, P}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Judge(c.keys, c.results, c.ordering)
			if !slices.Equal(v.Fates, c.want) || v.Violations != c.violations {
				t.Fatalf("Judge = %v, %d violations; want %v, %d", v.Fates, v.Violations, c.want, c.violations)
			}
		})
	}
}

func TestSchedule(t *testing.T) {
	now := time.Unix(1000, 0)
	s := func(n int) time.Time { return now.Add(time.Duration(n) * time.Second) }
	keys := []string{"a", "a", "b", "", "", "c"}
	fates := []Fate{Retry, Hold, Published, Hold, Retry, Hold}
	at := []time.Time{s(5), {}, {}, {}, s(7), s(9)}
	held := Schedule(keys, fates, at, s(1))
	want := []time.Time{s(5), s(5), {}, s(1), s(7), s(9)}
	if !slices.EqualFunc(at, want, time.Time.Equal) {
		t.Fatalf("times = %v, want %v", at, want)
	}
	if len(held) != 2 || !held["a"].Equal(s(5)) || !held["c"].Equal(s(9)) {
		t.Fatalf("held keys = %v, want a until +5s and c until +9s (keyless rows hold no key)", held)
	}
}

func TestPlanWaves(t *testing.T) {
	keys := []string{"a", "a", "b", "a", "", ""}
	dests := []string{"x", "y", "x", "y", "x", "y"}
	p := NewPlan(keys, []int{0, 1, 2, 3, 4, 5}, func(i, j int) bool { return dests[i] == dests[j] })
	if p.Waves() != 2 {
		t.Fatalf("waves = %d, want 2", p.Waves())
	}
	send, held := p.Wave(0)
	if !slices.Equal(send, []int{0, 2, 4, 5}) || held != nil {
		t.Fatalf("wave 0 = %v held %v", send, held)
	}
	p.Record(0, Failed)
	p.Record(4, Failed) // a keyless failure stops nothing
	send, held = p.Wave(1)
	if len(send) != 0 || !slices.Equal(held, []int{1, 3}) {
		t.Fatalf("wave 1 = %v held %v; want a's second run held", send, held)
	}
}

func TestPlanTerminalDoesNotStop(t *testing.T) {
	p := NewPlan([]string{"a", "a"}, []int{0, 1}, func(i, j int) bool { return i == j })
	p.Record(0, Terminal)
	if send, _ := p.Wave(1); !slices.Equal(send, []int{1}) {
		t.Fatalf("wave 1 = %v, want the row after a terminal failure sent", send)
	}
}

func TestBook(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBook()
	s1 := b.StartClaim()
	t1 := b.Begin(s1, []string{"a", "b", "", ""})
	s2 := b.StartClaim()
	t2 := b.Begin(s2, []string{"a", "c", ""})
	if !t2.Waits("a") || t2.Waits("c") || t2.Waits("") {
		t.Fatal("batch 2 must wait on batch 1 for a only; keyless rows never wait")
	}
	if deps := t2.Deps(); len(deps) != 1 || deps[0] != t1 {
		t.Fatalf("deps = %v", deps)
	}
	// Batch 1 leaves a waiting until +5s: batch 2, claimed before that
	// commit, must hold a; c is untouched.
	b.Finish(t1, map[string]time.Time{"a": now.Add(5 * time.Second)}, true, now)
	select {
	case <-t1.Done():
	default:
		t.Fatal("Done not closed")
	}
	if ok, until := b.May(t2, "a"); ok || !until.Equal(now.Add(5*time.Second)) {
		t.Fatalf("May(a) = %v %v, want held until +5s", ok, until)
	}
	if ok, _ := b.May(t2, "c"); !ok {
		t.Fatal("c must go")
	}
	var sifted []int
	b.Sift(t2, []string{"a", "c", "", "a"}, []int{0, 1, 2, 3}, func(i int, until time.Time) {
		if !until.Equal(now.Add(5 * time.Second)) {
			t.Errorf("Sift: row %d held until %v", i, until)
		}
		sifted = append(sifted, i)
	})
	if !slices.Equal(sifted, []int{0, 3}) {
		t.Fatalf("Sift held rows %v, want the rows of a (0 and 3)", sifted)
	}
	// A batch claimed after that commit sees it in the database: no fence.
	t3 := b.Begin(b.StartClaim(), []string{"a", "d"})
	b.Finish(t2, nil, true, now)
	if ok, _ := b.May(t3, "a"); !ok {
		t.Fatal("a batch claimed after the commit must not be fenced by it")
	}
	// A failed commit fences every key of the batch for claims before it.
	t4 := b.Begin(b.StartClaim(), []string{"d"})
	b.Finish(t3, nil, false, now)
	if ok, _ := b.May(t4, "d"); ok {
		t.Fatal("a failed commit must fence its keys")
	}
	b.Finish(t4, nil, true, now)
	if b.InFlight() != 0 {
		t.Fatalf("keys still held: %d", b.InFlight())
	}
}

// TestPlanSendsEveryWave: when every row is delivered, driving the plan
// wave by wave sends every row once, each key's rows in claim order, and a
// key's next run only in a later wave than its previous one, however many
// runs the keys have and in whatever order the keys come. A key with one
// run after a key with several must not cut the waves short.
func TestPlanSendsEveryWave(t *testing.T) {
	for _, tc := range []struct {
		name  string
		keys  []string
		dests []string
		waves int
	}{
		{"several runs, then one", []string{"a", "a", "a", "b"}, []string{"x", "y", "x", "x"}, 3},
		{"several runs, then one, interleaved", []string{"a", "b", "a", "c", "a"}, []string{"x", "x", "y", "y", "x"}, 3},
		{"one run, then several", []string{"b", "a", "a"}, []string{"x", "x", "y"}, 2},
		{"keyless rows after several runs", []string{"a", "a", "", ""}, []string{"x", "y", "x", "y"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx := make([]int, len(tc.keys))
			for i := range idx {
				idx[i] = i
			}
			p := NewPlan(tc.keys, idx, func(i, j int) bool { return tc.dests[i] == tc.dests[j] })
			if p.Waves() != tc.waves {
				t.Errorf("waves = %d, want %d", p.Waves(), tc.waves)
			}
			wave := make([]int, len(tc.keys))
			for i := range wave {
				wave[i] = -1
			}
			var sent []int
			for w := range p.Waves() {
				send, held := p.Wave(w)
				if len(held) != 0 {
					t.Fatalf("wave %d held %v with every row delivered", w, held)
				}
				for _, i := range send {
					if wave[i] >= 0 {
						t.Fatalf("row %d sent in waves %d and %d", i, wave[i], w)
					}
					wave[i] = w
					sent = append(sent, i)
					p.Record(i, OK)
				}
			}
			for i, w := range wave {
				if w < 0 {
					t.Errorf("row %d (key %q, destination %s) never sent; waves %v", i, tc.keys[i], tc.dests[i], wave)
				}
			}
			last := map[string]int{}
			for _, i := range sent {
				k := tc.keys[i]
				if k == "" {
					continue
				}
				if j, ok := last[k]; ok {
					switch {
					case j > i:
						t.Errorf("key %q: row %d sent after row %d", k, j, i)
					case tc.dests[j] != tc.dests[i] && wave[j] >= wave[i]:
						t.Errorf("key %q: row %d (to %s) in wave %d, not after row %d (to %s) in wave %d",
							k, i, tc.dests[i], wave[i], j, tc.dests[j], wave[j])
					}
				}
				last[k] = i
			}
		})
	}
}
