package source

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

var errLock = errors.New("lock timeout")

// fakeSweep names a sweep and holds the keys it has left to delete.
type fakeSweep struct {
	name string
	keys []string
	dead map[string]bool
}

// fakePurger deletes keys from its sweeps; locks, when set, says how many
// batches in a row give up on a lock before one goes through.
type fakePurger struct {
	sweeps  map[string]*fakeSweep
	locks   int
	lockRun int
	calls   []string // sweep:cursor:dry of each batch
}

// countingPurger counts a dry run's sweep in one go: its keys, and one
// dead letter or row beside them.
type countingPurger struct{ *fakePurger }

func (c countingPurger) CountSweep(_ context.Context, sw *fakeSweep) (int64, int64, error) {
	c.calls = append(c.calls, sw.name+":count")
	return int64(len(sw.keys)), 1, nil
}

func (f *fakePurger) OutboxSweep(context.Context, bool) (*fakeSweep, error) {
	return f.sweeps["outbox"], nil
}
func (f *fakePurger) DeadLetterSweep() *fakeSweep  { return f.sweeps["dead"] }
func (f *fakePurger) RetryStateSweep() *fakeSweep  { return f.sweeps["retry"] }
func (f *fakePurger) IsLockTimeout(err error) bool { return errors.Is(err, errLock) }

func (f *fakePurger) PurgeBatch(_ context.Context, sw *fakeSweep, cursor *string, limit int, dry bool) (PurgeBatch, error) {
	c := ""
	if cursor != nil {
		c = *cursor
	}
	f.calls = append(f.calls, sw.name+":"+c+map[bool]string{true: ":dry", false: ""}[dry])
	if f.lockRun < f.locks {
		f.lockRun++
		return PurgeBatch{}, errLock
	}
	f.lockRun = 0
	var b PurgeBatch
	var left []string
	for _, k := range sw.keys {
		if k > c && b.Found < limit {
			b.Found++
			b.Last = k
			b.Deleted++
			if sw.dead[k] {
				b.Dead++
			}
			if sw.name == "dead" {
				b.Beside += 2
			}
			if dry {
				left = append(left, k)
			}
			continue
		}
		left = append(left, k)
	}
	sw.keys = left
	return b, nil
}

func newFake() *fakePurger {
	return &fakePurger{sweeps: map[string]*fakeSweep{
		"outbox": {name: "outbox", keys: []string{"a", "b", "c", "d", "e"}, dead: map[string]bool{"b": true}},
		"dead":   {name: "dead", keys: []string{"x"}},
		"retry":  {name: "retry", keys: []string{"r1", "r2"}},
	}}
}

func TestPurgeRunsSweepsInBatches(t *testing.T) {
	f := newFake()
	res, err := Purge(context.Background(), f, PurgeRun{Table: "t", PurgeOptions: PurgeOptions{BatchSize: 2, OlderThan: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	want := PurgeResult{Published: 4, Dead: 1, FailedEvents: 1, Audit: 2, RetryState: 2, Batches: 3}
	if res != want {
		t.Errorf("result %+v, want %+v", res, want)
	}
	if want := []string{"outbox:", "outbox:b", "outbox:d", "dead:", "retry:", "retry:r2"}; !slices.Equal(f.calls, want) {
		t.Errorf("batches %v, want %v", f.calls, want)
	}
}

func TestPurgeRetriesLockTimeouts(t *testing.T) {
	f := newFake()
	f.locks = purgeLockRetries
	res, err := Purge(context.Background(), f, PurgeRun{Table: "t", PurgeOptions: PurgeOptions{BatchSize: 10, Pause: time.Millisecond}})
	if err != nil {
		t.Fatalf("%d lock timeouts in a row: %v", purgeLockRetries, err)
	}
	if res.Published != 4 || res.RetryState != 2 {
		t.Errorf("result %+v", res)
	}
	f = newFake()
	f.locks = purgeLockRetries + 1
	_, err = Purge(context.Background(), f, PurgeRun{Table: "t", PurgeOptions: PurgeOptions{BatchSize: 10}})
	if !errors.Is(err, errLock) || !strings.Contains(err.Error(), "purge t: batch 1:") {
		t.Errorf("%d lock timeouts in a row: %v, want the lock timeout of batch 1", purgeLockRetries+1, err)
	}
}

func TestPurgeDryRun(t *testing.T) {
	f := newFake()
	res, err := Purge(context.Background(), f, PurgeRun{PurgeOptions: PurgeOptions{BatchSize: 2, DryRun: true}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Published != 4 || res.Dead != 1 || len(f.sweeps["outbox"].keys) != 5 {
		t.Errorf("dry run by batches: %+v, %d rows left", res, len(f.sweeps["outbox"].keys))
	}
	for _, c := range f.calls {
		if !strings.HasSuffix(c, ":dry") {
			t.Errorf("batch %s of a dry run", c)
		}
	}
	f = newFake()
	res, err = Purge(context.Background(), countingPurger{f}, PurgeRun{PurgeOptions: PurgeOptions{DryRun: true}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Published != 4 || res.Dead != 1 || res.FailedEvents != 1 || res.Audit != 1 || res.RetryState != 2 ||
		res.Batches != 0 || len(f.calls) != 3 {
		t.Errorf("dry run by counts: %+v, calls %v", res, f.calls)
	}
}

func TestPurgeRefusesNegativeAgeAndKeepsDeleteLayouts(t *testing.T) {
	if _, err := Purge(context.Background(), newFake(), PurgeRun{Table: "t", PurgeOptions: PurgeOptions{OlderThan: -time.Second}}); err == nil {
		t.Error("negative age accepted")
	}
	f := newFake()
	res, err := Purge(context.Background(), f, PurgeRun{KeptRows: true})
	if err != nil || !res.KeptByLayout || res.Published != 0 || len(f.sweeps["outbox"].keys) != 5 || res.FailedEvents != 1 {
		t.Errorf("delete layout: %+v, %v", res, err)
	}
}
