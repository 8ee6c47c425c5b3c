package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"syscall"
	"time"
)

// HandoverResult is how long the shards of a replica that stops take to
// be held by the other replicas: stopped with SIGTERM (it hands them over
// as it goes) and killed with SIGKILL (the others find it gone, at the
// latest when its leases run out).
type HandoverResult struct {
	Replicas int `json:"replicas"`
	// Shards counts the leases in all: the source's buckets (--shards) in
	// each database.
	Shards    int        `json:"shards"`
	Databases int        `json:"databases,omitempty"`
	LeaseTTL  float64    `json:"lease_ttl_seconds"`
	Rounds    []Handover `json:"rounds"`
}

// Handover is one replica stopped.
type Handover struct {
	Signal string `json:"signal"`
	// Held is how many shards the replica held when it was signalled.
	Held int `json:"shards_held"`
	// Seconds runs from the signal until the last of those shards was
	// taken by another replica (its lease's acquired_at: both read on the
	// server's clock); ExitSeconds until the process ended.
	Seconds     float64 `json:"seconds"`
	ExitSeconds float64 `json:"exit_seconds"`
}

// handoverSignals are the ways a replica is stopped, in the order each
// round tries them.
var handoverSignals = []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}

// handoverRun runs o.Replicas relay processes (replicas.go) on an idle
// table split into o.Shards buckets in each of dbs and, o.Repeat times,
// stops one with SIGTERM and then one with SIGKILL, each time once the
// shards are spread evenly and with the replica holding the most, and
// measures from the leases table how long its shards take to be held by
// the others. A replica stopped is replaced before the next.
func handoverRun(ctx context.Context, dbs pgDBs, k kafkaEnv, o Options) (*HandoverResult, error) {
	t := newTable("delete", deleteLayoutPG, "")
	defer dbs.dropSchema(ctx, t.schema)
	if err := dbs.each(func(_ int, db pgDB) error { return t.in(db.dsn).create(ctx, db.pool) }); err != nil {
		return nil, err
	}
	cfg, err := relayConfig(dbs, kafkaTarget(k), o, t, true)
	if err != nil {
		return nil, err
	}
	defer dbs.dropSchema(ctx, cfg.RelaySchema)
	rs, removeDir, err := newReplicaSet(cfg, o.RelayBinary)
	if err != nil {
		return nil, err
	}
	defer removeDir()
	defer rs.stopAll()
	perDB := max(o.Shards, 1)
	res := &HandoverResult{Replicas: o.Replicas, Shards: perDB * len(dbs), Databases: o.Databases, LeaseTTL: cfg.LeaseTTL.D().Seconds()}
	h := holdings{dbs: dbs, schema: cfg.RelaySchema, perDB: perDB}
	progress(o, "handover: starting %d replicas on %d shards", o.Replicas, res.Shards)
	for range o.Replicas {
		if err := rs.start(); err != nil {
			return res, err
		}
	}
	settle := time.Minute + 2*cfg.LeaseTTL.D()
	for range max(o.Repeat, 1) {
		for _, sig := range handoverSignals {
			if err := h.waitBalanced(ctx, rs, settle); err != nil {
				return res, err
			}
			ho, err := h.stopOne(ctx, rs, sig, cmp.Or(cfg.Shutdown.Timeout.D(), time.Minute)+2*cfg.LeaseTTL.D())
			if err != nil {
				return res, err
			}
			res.Rounds = append(res.Rounds, ho)
			progress(o, "handover: %s: the %d shards it held taken by the others %.3f s after the signal; it exited after %.3f s",
				ho.Signal, ho.Held, ho.Seconds, ho.ExitSeconds)
			if err := rs.start(); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// stopOne signals the replica holding the most shards and waits, within
// limit, until every one of them is held by another live replica.
func (h holdings) stopOne(ctx context.Context, rs *replicaSet, sig syscall.Signal, limit time.Duration) (Handover, error) {
	ho := Handover{Signal: sigName(sig)}
	ls, err := h.read(ctx)
	if err != nil {
		return ho, err
	}
	victim, shards := mostHeld(ls)
	r := rs.byPID(victim)
	if r == nil {
		return ho, fmt.Errorf("the shards' holder, pid %d, is no replica of the run", victim)
	}
	ho.Held = len(shards)
	var t0 time.Time
	if err := h.dbs[0].pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t0); err != nil {
		return ho, err
	}
	sent := time.Now()
	if err := r.signal(sig); err != nil {
		return ho, err
	}
	for {
		ls, err := h.read(ctx)
		if err != nil {
			return ho, err
		}
		if last, ok := takenOver(ls, shards, victim); ok {
			ho.Seconds = last.Sub(t0).Seconds()
			break
		}
		if time.Since(sent) > limit {
			return ho, fmt.Errorf("%s: the shards of pid %d not all held by others after %s", ho.Signal, victim, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	exited, err := r.wait(limit)
	if err != nil {
		return ho, err
	}
	ho.ExitSeconds = exited.Sub(sent).Seconds()
	if sig == syscall.SIGTERM && !r.exitedCleanly() {
		return ho, fmt.Errorf("pid %d stopped with SIGTERM: %v\n%s", victim, r.err, r.output())
	}
	rs.forget(r)
	return ho, nil
}

// waitBalanced waits, within limit, until every shard is held by a live
// replica, evenly (per database at most one apart), and has stayed so for
// a second.
func (h holdings) waitBalanced(ctx context.Context, rs *replicaSet, limit time.Duration) error {
	start := time.Now()
	var since time.Time
	var why string
	for {
		if err := rs.alive(); err != nil {
			return err
		}
		ls, err := h.read(ctx)
		switch {
		case err != nil:
			since, why = time.Time{}, err.Error() // the replicas have not made the lease table yet
		case balanced(ls, h.dbs.names(), h.perDB, rs.pids()):
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) >= time.Second {
				return nil
			}
		default:
			since, why = time.Time{}, fmt.Sprintf("held: %v", heldBy(ls))
		}
		if time.Since(start) > limit {
			return fmt.Errorf("handover: the shards not spread over the replicas %v after %s (%s)", rs.pids(), limit, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sigName(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGTERM"
}

// printHandover writes the handover results.
func printHandover(w io.Writer, r *HandoverResult) {
	fmt.Fprintf(w, "handover: %d replicas, %d shards (%s), lease_ttl %.0f s\n", r.Replicas, r.Shards, databasesNote(r.Databases), r.LeaseTTL)
	for _, ho := range r.Rounds {
		fmt.Fprintf(w, "  %s  %2d shards held by the others %8.3f s after the signal; the process ended after %.3f s\n",
			ho.Signal, ho.Held, ho.Seconds, ho.ExitSeconds)
	}
}

func databasesNote(n int) string {
	if n == 0 {
		return "one database"
	}
	return fmt.Sprintf("over %d databases", n)
}
