package bench

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// holdings reads who holds the shards of the benchmark's source: the
// unexpired leases of each database's lease table.
type holdings struct {
	dbs    pgDBs
	schema string // the relay schema, holding the lease table
	perDB  int    // the source's shards in each database
}

// heldLease is one unexpired lease.
type heldLease struct {
	shardKey
	pid      int       // its holder's process (ownerPID)
	acquired time.Time // when its holder took it
}

// shardKey names a shard: its lease in a database.
type shardKey struct{ db, shard string }

// read returns the unexpired leases of every database.
func (h holdings) read(ctx context.Context) ([]heldLease, error) {
	var out []heldLease
	for _, db := range h.dbs {
		rows, err := db.pool.Query(ctx, "SELECT shard, owner, acquired_at FROM "+pgx.Identifier{h.schema}.Sanitize()+".leases WHERE expires_at > now()")
		if err != nil {
			return nil, err
		}
		ls, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (heldLease, error) {
			l := heldLease{shardKey: shardKey{db: db.name}}
			var owner string
			err := row.Scan(&l.shard, &owner, &l.acquired)
			l.pid = ownerPID(owner)
			return l, err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	return out, nil
}

// ownerPID is the process id in a lease's owner (host/pid/nonce), or 0.
func ownerPID(owner string) int {
	parts := strings.Split(owner, "/")
	if len(parts) < 3 {
		return 0
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil {
		return 0
	}
	return pid
}

// balanced says whether, in each of dbs, all perDB shards are held by
// pids and spread over them evenly: the most any holds and the fewest are
// at most one apart.
func balanced(ls []heldLease, dbs []string, perDB int, pids []int) bool {
	for _, db := range dbs {
		count := map[int]int{}
		n := 0
		for _, l := range ls {
			if l.db != db {
				continue
			}
			if !slices.Contains(pids, l.pid) {
				return false
			}
			count[l.pid]++
			n++
		}
		if n != perDB {
			return false
		}
		lo, hi := perDB, 0
		for _, p := range pids {
			lo, hi = min(lo, count[p]), max(hi, count[p])
		}
		if hi-lo > 1 {
			return false
		}
	}
	return true
}

// heldBy counts the shards each process holds.
func heldBy(ls []heldLease) map[int]int {
	out := map[int]int{}
	for _, l := range ls {
		out[l.pid]++
	}
	return out
}

// mostHeld is the process holding the most shards (of those alike, the
// lowest pid) and its shards.
func mostHeld(ls []heldLease) (pid int, shards []shardKey) {
	most := 0
	for p, n := range heldBy(ls) {
		if n > most || n == most && p < pid {
			pid, most = p, n
		}
	}
	for _, l := range ls {
		if l.pid == pid {
			shards = append(shards, l.shardKey)
		}
	}
	return pid, shards
}

// takenOver says whether every one of shards is held by another process
// than gone, and when the last of them was taken.
func takenOver(ls []heldLease, shards []shardKey, gone int) (last time.Time, ok bool) {
	for _, s := range shards {
		i := slices.IndexFunc(ls, func(l heldLease) bool { return l.shardKey == s })
		if i < 0 || ls[i].pid == gone {
			return time.Time{}, false
		}
		if ls[i].acquired.After(last) {
			last = ls[i].acquired
		}
	}
	return last, true
}
