package e2e

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestChaosShardedReplicas: one source in 4 shards, three relay processes
// sharing them, one killed with SIGKILL at random and replaced every few
// seconds while rows flow over a backlog. Nothing is lost, order holds on
// first delivery, duplicates stay within what the killed processes had in
// flight, and no shard was ever relayed by two processes at once: the test
// keeps the history of holds itself, from each process's log of when it
// started and stopped relaying a shard and from the moment it killed it.
func TestChaosShardedReplicas(t *testing.T) {
	t.Parallel()
	kills, keys, backlog := 4, 200, 5_000
	if chaosFull() {
		kills, keys, backlog = 20, 1000, 100_000
	}
	p := newProcChaosOpts(t, procOpts{leaseTTL: "3s", keys: keys, shards: 4, logLevel: "info"})
	fillChaos(t, p.pool, p.l, "orders", "b", backlog, keys, 0)
	p.rows.Add(int64(backlog))
	procs := []*relayProcess{p.start(), p.start(), p.start()}
	running := slices.Clone(procs)
	killedAt := map[int]time.Time{}
	for k := range kills {
		p.flowing(fmt.Sprintf("events flowing before kill %d", k+1), 300)
		i := rand.N(len(running))
		pid := running[i].cmd.Process.Pid
		killedAt[pid] = time.Now()
		running[i].kill(t)
		t.Logf("kill %d: pid %d", k+1, pid)
		running[i] = p.start()
		procs = append(procs, running[i])
		time.Sleep(time.Duration(1+rand.N(3)) * time.Second) // a few seconds between kills, at random
	}
	p.flowing("events flowing after the last kill", 300)
	rep := p.finish(procs)
	bound := kills * 3 * 50 * 4 // a killed process's batches in flight, in each shard it held
	t.Logf("3 replicas, 4 shards, %d kills, %d keys, a backlog of %d: %s (duplicate bound %d)", kills, keys, backlog, rep, bound)
	if !rep.OK() || rep.Duplicates > bound {
		t.Error(rep)
	}
	for _, pr := range procs {
		if !pr.exited() {
			pr.kill(t)
			killedAt[pr.cmd.Process.Pid] = time.Now()
		}
	}
	holds := holdHistory(t, procs, killedAt)
	checkOneHolder(t, holds)
}

// hold is one process relaying one shard, from its start to its end.
type hold struct {
	shard      string
	pid        int
	term       int64
	start, end time.Time
}

// holdHistory reads, from each process's log, when it started relaying a
// shard and when it stopped (for a lease found lost, the end of its last
// renewal's TTL when that came first: the holder had stopped holding
// before it noticed); a holding that never logged its end ends when the
// test killed its process.
func holdHistory(t *testing.T, procs []*relayProcess, killedAt map[int]time.Time) []hold {
	t.Helper()
	var out []hold
	for _, pr := range procs {
		pid := pr.cmd.Process.Pid
		open := map[string]*hold{}
		sc := bufio.NewScanner(strings.NewReader(pr.out.String()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			f := logFields(sc.Text())
			if f["msg"] != "relaying" && f["msg"] != "stopped relaying" {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, f["time"])
			if err != nil {
				t.Fatalf("pid %d: log time %q: %v", pid, f["time"], err)
			}
			shard := f["shard"]
			if shard == "" {
				shard = f["source"]
			}
			term, _ := strconv.ParseInt(f["term"], 10, 64)
			if f["msg"] == "relaying" {
				if open[shard] != nil {
					t.Fatalf("pid %d started relaying %s twice without stopping", pid, shard)
				}
				open[shard] = &hold{shard: shard, pid: pid, term: term, start: at}
				continue
			}
			h := open[shard]
			if h == nil {
				t.Fatalf("pid %d stopped relaying %s it had not started", pid, shard)
			}
			h.end = at
			// A holder that found its lease lost late (starved of CPU)
			// says until when its last renewal held it.
			if u := f["held_until"]; u != "" {
				until, err := time.Parse(time.RFC3339Nano, u)
				if err != nil {
					t.Fatalf("pid %d: held_until %q: %v", pid, u, err)
				}
				if until.Before(at) {
					h.end = until
				}
			}
			out = append(out, *h)
			delete(open, shard)
		}
		for _, h := range open {
			end, ok := killedAt[pid]
			if !ok {
				t.Fatalf("pid %d never logged the end of its holding of %s and was not killed", pid, h.shard)
			}
			h.end = end
			out = append(out, *h)
		}
	}
	return out
}

// checkOneHolder fails the test when two holdings of one shard overlap.
func checkOneHolder(t *testing.T, holds []hold) {
	t.Helper()
	by := map[string][]hold{}
	for _, h := range holds {
		by[h.shard] = append(by[h.shard], h)
	}
	for shard, hs := range by {
		slices.SortFunc(hs, func(a, b hold) int { return a.start.Compare(b.start) })
		for i := 1; i < len(hs); i++ {
			if prev := hs[i-1]; hs[i].start.Before(prev.end) {
				t.Errorf("%s relayed by pid %d (term %d) from %s while pid %d (term %d) did until %s", shard,
					hs[i].pid, hs[i].term, hs[i].start.Format(time.StampMicro), prev.pid, prev.term, prev.end.Format(time.StampMicro))
			}
		}
		t.Logf("%s: %d holdings", shard, len(hs))
	}
	if len(by) != 4 {
		t.Errorf("holdings of %d shards, want 4", len(by))
	}
}

// logFields splits a text log line (key=value, values quoted when they
// have spaces) into its fields.
func logFields(line string) map[string]string {
	out := map[string]string{}
	for line != "" {
		line = strings.TrimLeft(line, " ")
		k, rest, ok := strings.Cut(line, "=")
		if !ok {
			break
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			if s, err := strconv.QuotedPrefix(rest); err == nil {
				v, _ = strconv.Unquote(s)
				rest = rest[len(s):]
			}
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		out[k] = v
		line = rest
	}
	return out
}
