package demo

import (
	"encoding/json"

	"github.com/twmb/franz-go/pkg/kgo"
)

func (c *consumer) record(r *kgo.Record) {
	var id string
	for _, h := range r.Headers {
		if h.Key == "event_id" {
			id = string(h.Value)
		}
	}
	var p struct {
		Producer int  `json:"producer"`
		Seq      int  `json:"seq"`
		Rollback bool `json:"rollback"`
	}
	_ = json.Unmarshal(r.Value, &p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sample == nil {
		c.sample = r
	}
	if p.Rollback {
		c.rolled++
	}
	c.seen[id]++
	if c.seen[id] > 1 {
		c.dups++
		return
	}
	// Within one producer, a key's events were written in seq order.
	k := string(r.Key) + "/" + string(rune('a'+p.Producer))
	if last, ok := c.lastSeq[k]; ok && last[1] > p.Seq {
		c.disorder++
	}
	c.lastSeq[k] = [2]int{p.Producer, p.Seq}
}

func (c *consumer) unique() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

func (c *consumer) rolledBackSeen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rolled
}

func (c *consumer) sampleRecord() *kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sample
}

func (c *consumer) result() *Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &Result{Received: len(c.seen), Duplicates: c.dups, OutOfOrder: c.disorder}
}
