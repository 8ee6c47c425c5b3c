package lease

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// Share is one replica's fair share of shards among replicas: shards ÷
// replicas, rounded up.
func Share(shards, replicas int) int {
	if replicas < 1 {
		return shards
	}
	return (shards + replicas - 1) / replicas
}

// leastLoaded is the live replica other than me that holds the fewest
// shards (the first by name among equals), or "" when there is none.
func leastLoaded(counts map[string]int, me string) string {
	best := ""
	for _, o := range slices.Sorted(maps.Keys(counts)) {
		if o != me && (best == "" || counts[o] < counts[best]) {
			best = o
		}
	}
	return best
}

// handOvers is the one rule of balance: given how many shards each live
// replica holds (counts, me among them) and how many shards there are, it
// returns the replicas me hands a shard to now, one entry per shard. A
// shard moves only to a replica holding at least two fewer than me (never
// a hot potato: the taker ends with no more than the giver had). Above its
// share a replica gives down to its share; at or below it, one shard a
// round, so that replicas giving at the same time do not pile their shards
// on one taker.
func handOvers(counts map[string]int, me string, shards int) []string {
	c := maps.Clone(counts)
	share := Share(shards, len(c))
	var out []string
	for {
		t := leastLoaded(c, me)
		if t == "" || c[me] < c[t]+2 || (c[me] <= share && len(out) > 0) {
			return out
		}
		c[me]--
		c[t]++
		out = append(out, t)
	}
}

// Balancer shares one database's shards among the relay processes that
// run them, and holds this process's leases there: it registers the
// process as a live replica with a heartbeat, takes a census of the live
// replicas and of the shards each holds, and from it says whether this
// process may take a free shard (while it holds fewer than its share) and
// which of its shards to hand over to whom (see handOvers); it renews every
// lease the process holds, in one statement. Hold keeps one shard under
// it. One Balancer serves every shard of a Leases, a process alone too.
type Balancer struct {
	leases *Leases
	ttl    time.Duration
	log    *slog.Logger

	mu      sync.Mutex
	shards  map[string]int      // shards run here (a count of Hold loops each)
	held    map[string]*holding // shards held here
	giving  map[string]bool     // shards being handed over
	counts  map[string]int      // the last census, or nil before the first
	changed chan struct{}       // closed (and replaced) when the census changes
	nudge   chan struct{}
}

// NewBalancer returns the balancer of l's shards; leases last ttl, the
// renewals, heartbeat and census run every third of it. Run must be
// running for Hold to acquire anything.
func NewBalancer(l *Leases, ttl time.Duration, log *slog.Logger) *Balancer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Balancer{leases: l, ttl: ttl, log: log, shards: map[string]int{}, held: map[string]*holding{},
		giving: map[string]bool{}, changed: make(chan struct{}), nudge: make(chan struct{}, 1)}
}

// Nudge asks for a census now: a lease was handed over or a replica left
// (a NOTIFY on PostgreSQL).
func (b *Balancer) Nudge() {
	select {
	case b.nudge <- struct{}{}:
	default:
	}
}

// Run keeps this process registered and the census current until ctx
// ends, then leaves the replicas so that the others count without it.
func (b *Balancer) Run(ctx context.Context) {
	t := time.NewTicker(b.ttl / 3)
	defer t.Stop()
	if bell, ok := b.leases.store.(Bell); ok {
		go b.listen(ctx, bell)
	}
	last := time.Time{}
	recount := time.NewTimer(0)
	defer recount.Stop()
	for {
		// A nudge takes a census; the leases are renewed on the ticker's
		// pace (and before, when it is due).
		if time.Since(last) >= b.ttl/4 {
			if err := b.renew(ctx); err != nil && ctx.Err() == nil {
				b.log.Warn("renew the leases", "err", err)
			} else {
				last = time.Now()
			}
		}
		next, err := b.census(ctx)
		if err != nil && ctx.Err() == nil {
			b.log.Warn("replica census", "err", err)
		}
		// A replica counted only until its grace runs out (its sessions
		// are gone: killed, or a blip) is counted out as soon as it does,
		// not at the next tick.
		recount.Stop()
		if next > 0 {
			recount.Reset(next + b.ttl/100)
		}
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := b.leases.Leave(lctx); err != nil {
				b.log.Warn("leaving the replicas", "err", err)
			}
			b.ringOthers(lctx) // they count without this process now
			cancel()
			return
		case <-t.C:
		case <-b.nudge:
		case <-recount.C:
		}
	}
}

// census registers this process, counts the live replicas' shards and
// hands over this process's surplus. It returns how long until a replica
// it counts drops out unless it beats again (0: none).
func (b *Balancer) census(ctx context.Context) (time.Duration, error) {
	b.mu.Lock()
	shards := slices.Sorted(maps.Keys(b.shards))
	b.mu.Unlock()
	counts, next, err := b.leases.census(ctx, b.ttl, shards)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	me := b.leases.owner
	if b.counts == nil {
		// Arrived: the others make room for it.
		others := slices.Collect(maps.Keys(counts))
		go b.ring(context.WithoutCancel(ctx), others...)
	}
	counts[me] = len(b.held) // this process knows its own best
	// Every census wakes the shards standing by: the share, the shards
	// or a reservation may have changed.
	close(b.changed)
	b.changed = make(chan struct{})
	b.counts = counts
	if len(b.giving) > 0 {
		return next, nil // the last hand-over is not over: the census does not show it yet
	}
	to := handOvers(counts, me, len(b.shards))
	// The shards handed over are the last by name: which ones does not
	// matter, that a census picks the same ones again does.
	mine := slices.Sorted(maps.Keys(b.held))
	for i, successor := range to {
		shard := mine[len(mine)-1-i]
		b.giving[shard] = true
		b.held[shard].giveUp <- successor
	}
	if len(to) > 0 {
		b.log.Info("handing shards over to balance the replicas", "shards", len(to), "replicas", len(counts),
			"share", Share(len(b.shards), len(counts)))
	}
	return next, nil
}

// Changed returns a channel closed at the next census.
func (b *Balancer) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// join and part count a Hold loop of shard in and out.
func (b *Balancer) join(shard string) {
	b.mu.Lock()
	b.shards[shard]++
	b.mu.Unlock()
	b.Nudge()
}

func (b *Balancer) part(shard string) {
	b.mu.Lock()
	if b.shards[shard]--; b.shards[shard] <= 0 {
		delete(b.shards, shard)
	}
	b.mu.Unlock()
}

// mayAcquire says whether owner (this process) may acquire the lease in
// row now: a lease handed over and still reserved only by its successor
// (not even by the owner that handed it over); its own lease always; any
// other (none yet, free, expired, or another's whose process is gone) only
// after the first census and while it holds fewer than its share.
//
// A reservation holds only while its successor is live: a lease handed to a
// replica that left (or died) before it took it, which the giver could not
// know when it chose it, is free once a census no longer counts that
// replica.
func (b *Balancer) mayAcquire(row *Row, owner string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case row != nil && row.Expired && row.Reserved:
		if row.Successor == owner {
			return true
		}
		if _, live := b.counts[row.Successor]; live || b.counts == nil {
			return false
		}
	case row != nil && row.Owner == owner:
		return true
	}
	return b.counts != nil && len(b.held) < Share(len(b.shards), len(b.counts))
}

// holding is a lease this process holds, renewed by its balancer.
type holding struct {
	ls     *Lease
	giveUp chan string   // receives the replica to hand it to
	lost   chan struct{} // closed when a renewal finds it taken
	ok     time.Time     // the last successful renewal (or the acquisition)
	closed bool
}

// hold records ls as held here: the balancer renews it with the others of
// its database, one statement for all, and hands it over when the census
// says so.
func (b *Balancer) hold(ls *Lease) *holding {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := &holding{ls: ls, giveUp: make(chan string, 1), lost: make(chan struct{}), ok: time.Now()}
	b.held[ls.Shard] = h
	if b.counts != nil {
		b.counts[b.leases.owner] = len(b.held)
	}
	return h
}

// renewedAt is when h was last renewed.
func (b *Balancer) renewedAt(h *holding) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return h.ok
}

// renew extends every lease held here in one statement; a lease the
// statement did not extend was taken (or expired), and its holding is told.
func (b *Balancer) renew(ctx context.Context) error {
	b.mu.Lock()
	var ls []*Lease
	for _, h := range b.held {
		ls = append(ls, h.ls)
	}
	b.mu.Unlock()
	if len(ls) == 0 {
		return nil
	}
	at := time.Now()
	renewed, err := b.leases.RenewAll(ctx, ls, b.ttl)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range ls {
		h := b.held[l.Shard]
		switch {
		case h == nil || h.ls != l:
			// released meanwhile
		case renewed[l.Shard]:
			h.ok = at
		case !h.closed:
			h.closed = true
			close(h.lost)
		}
	}
	return nil
}

// released records shard as no longer held here.
func (b *Balancer) released(shard string) {
	b.mu.Lock()
	delete(b.held, shard)
	delete(b.giving, shard)
	if b.counts != nil {
		b.counts[b.leases.owner] = len(b.held)
	}
	b.mu.Unlock()
}

// successor is the replica a shard goes to when this process stops: the
// least loaded other live replica (counted as holding it from then on), or
// "" when there is none.
func (b *Balancer) successor() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := leastLoaded(b.counts, b.leases.owner)
	if t != "" {
		b.counts[t]++
	}
	return t
}

// reserve is how long a handed-over shard waits for its successor alone.
func (b *Balancer) reserve() time.Duration { return reserveFor(b.ttl) }

// reserveFor is how long a shard handed over waits for its successor alone
// when leases last ttl: half of it.
func reserveFor(ttl time.Duration) time.Duration { return cmp.Or(ttl/2, time.Second) }

// listen turns the rings of this process's bell into censuses, where the
// store has a bell (see Bell); it returns when ctx ends.
func (b *Balancer) listen(ctx context.Context, bell Bell) {
	for ctx.Err() == nil {
		rung, err := bell.Wait(ctx, b.leases.owner, b.ttl/3)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			b.log.Debug("wait on the bell", "err", err)
			sleepCtx(ctx, b.ttl/3)
		case rung:
			b.Nudge()
		}
	}
}

// ring wakes owners (not this process) where the store has a bell; on
// PostgreSQL the statements that change the leases notify instead.
func (b *Balancer) ring(ctx context.Context, owners ...string) {
	bell, ok := b.leases.store.(Bell)
	if !ok {
		return
	}
	for _, o := range owners {
		if o == b.leases.owner || o == "" {
			continue
		}
		if err := bell.Ring(ctx, o); err != nil {
			b.log.Debug("ring a replica's bell", "replica", o, "err", err)
		}
	}
}

// ringOthers wakes every other replica of the last census.
func (b *Balancer) ringOthers(ctx context.Context) {
	b.mu.Lock()
	others := slices.Collect(maps.Keys(b.counts))
	b.mu.Unlock()
	b.ring(ctx, others...)
}
