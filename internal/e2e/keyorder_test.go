package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// keyOrderRun is what a per-key order test under failures checks: events
// {"key": k, "seq": s} written in seq order for each of keys keys.
type keyOrderRun struct {
	keys, perKey int
	// deadLetters reads the dead letters so far: key and seq of each, with
	// its reason.
	deadLetters func() (map[[2]int]string, error)
}

// await waits until every event is delivered or dead-lettered, then checks
// that, per key, first arrivals follow the order the key's rows were
// written. A message the client failed after a later message of its key
// had been handed to it, which then succeeded, cannot be sent again without
// breaking the key's order: it is dead-lettered with that reason (see the
// Kafka sink's documentation). Such a race is rare; each one is accounted
// for, and no other dead letter is allowed. It returns the duplicates and
// the dead letters.
func (k keyOrderRun) await(t *testing.T, col *collector, timeout time.Duration) (dups, deadCount int) {
	t.Helper()
	total := k.keys * k.perKey
	var (
		dead map[[2]int]string
		recs []*kgo.Record
	)
	waitFor(t, timeout, "every event delivered or dead-lettered", func() (bool, string) {
		recs = col.records()
		d, err := k.deadLetters()
		if err != nil {
			return false, err.Error()
		}
		dead = d
		n := len(distinct(recs)) + len(dead)
		return n >= total, fmt.Sprintf("%d delivered, %d dead letters, of %d", len(distinct(recs)), len(dead), total)
	})
	next := make([]int, k.keys) // next seq expected to arrive first, per key
	skipDead := func(key int) {
		for dead[[2]int{key, next[key]}] != "" {
			next[key]++
		}
	}
	type event struct{ Key, Seq int }
	seen := map[[2]int]bool{}
	for _, r := range recs {
		var p event
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Fatal(err)
		}
		if seen[[2]int{p.Key, p.Seq}] {
			dups++
			continue
		}
		seen[[2]int{p.Key, p.Seq}] = true
		skipDead(p.Key)
		if p.Seq != next[p.Key] {
			for _, q := range recs {
				var pp event
				_ = json.Unmarshal(q.Value, &pp)
				if pp.Key == p.Key {
					id, _ := header(q, "event_id")
					t.Logf("key %d: seq %d (event %s) at partition %d offset %d, %s", pp.Key, pp.Seq, id, q.Partition, q.Offset, q.Timestamp.Format("15:04:05.000000"))
				}
			}
			t.Fatalf("key %d: event %d arrived before event %d", p.Key, p.Seq, next[p.Key])
		}
		next[p.Key]++
	}
	for key := range next {
		skipDead(key)
		if next[key] != k.perKey {
			t.Fatalf("key %d: %d of %d events arrived or were dead-lettered", key, next[key], k.perKey)
		}
	}
	for ev, reason := range dead {
		if seen[ev] || !strings.Contains(reason, "a later message with the same key was delivered") {
			t.Errorf("key %d event %d dead-lettered (delivered too: %v): %s", ev[0], ev[1], seen[ev], reason)
		}
	}
	if len(dead) > total/100 {
		t.Errorf("%d of %d events dead-lettered as overtaken: the sink no longer holds a key's messages after a failure", len(dead), total)
	}
	return dups, len(dead)
}

// scanDeadLetters reads (key, seq, reason) rows into a map.
func scanDeadLetters(scan func(dest ...any) error, next func() bool, err func() error) (map[[2]int]string, error) {
	out := map[[2]int]string{}
	for next() {
		var k, seq int
		var reason string
		if e := scan(&k, &seq, &reason); e != nil {
			return nil, e
		}
		out[[2]int{k, seq}] = reason
	}
	return out, err()
}
