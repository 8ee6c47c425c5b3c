package postgres

import (
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sqlcore"
)

// priorityClaim is the claim of a source under a priority (see
// source.Priority): $1 source, $2 limit, $3 window (the lookahead), $4 the
// addresses of the rows the store's batches in flight hold, then the lease
// ($5 shard, owner, term) in fenced.
//
//   - c is the window: the first $3 candidates in the claim's order, but
//     the store's own rows in flight (their keys are the order book's to
//     keep), read once and locking nothing, each with its order key, its
//     class, its place and whether another relay holds it claimed;
//   - w ranks them (a row's class; with ordering, the best class of its
//     key's rows from it on, sqlcore's EffectiveRank) and keeps the first
//     $2 by rank, then by the claim's order, leaving out the rows another
//     relay claimed and, with ordering, the rows after them in their key;
//   - the claim locks those by address, skipping a row another transaction
//     holds.
//
// The window is sorted narrow (address, key, rank, place), and only the
// rows the claim takes are fetched whole. Keys are grouped by their bytes
// (COLLATE "C"): the grouping needs only equality, which no collation
// changes for the keys a table holds, and a byte sort is the cheapest.
func priorityClaim(p claimParts, ordering bool, prio *source.Priority) claimSQL {
	fc := "false"
	if p.foreign != "" {
		fc = p.foreign
	}
	cols := []string{"o.ctid AS tid", fc + " AS foreign_claim", sq.OrderKey(p.l, "o") + " AS k", sq.ClassRank("o", prio) + " AS cls"}
	var at, wat []string
	for i, e := range p.order {
		cols = append(cols, fmt.Sprintf("%s AS o%d", e, i))
		at = append(at, fmt.Sprintf("o%d", i))
		wat = append(wat, fmt.Sprintf("w.o%d", i))
	}
	candidate := append(p.candidate[:len(p.candidate):len(p.candidate)], "o.ctid <> ALL($4::tid[])")
	const key = `k COLLATE "C"`
	held := "false"
	if p.foreign != "" && ordering {
		// A row another relay claimed holds its key: the rows after it wait
		// until it is delivered or its claim expires.
		held = "k <> '' AND bool_or(foreign_claim) OVER (PARTITION BY " + key + " ORDER BY " + strings.Join(at, ", ") +
			" ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
	}
	rank := "cls"
	if ordering {
		rank = sqlcore.EffectiveRank("cls", key, at)
	}
	places := strings.Join(at, ", ")
	with := fmt.Sprintf(`WITH c AS MATERIALIZED (
  SELECT %s
  FROM %s o
  %s
  WHERE %s
  ORDER BY %s
  LIMIT $3
), w AS (
  SELECT tid, rank, %s
  FROM (SELECT tid, foreign_claim, %s AS held, %s AS rank, %s FROM c) x
  WHERE NOT foreign_claim AND NOT COALESCE(held, false)
  ORDER BY rank, %s
  LIMIT $2
)`, strings.Join(cols, ", "), p.table, p.retryJoin, strings.Join(candidate, "\n    AND "), strings.Join(p.order, ", "),
		places, held, rank, places, places)
	stmt := func(where []string) string {
		return fmt.Sprintf(`%s
SELECT %s
FROM w
JOIN %s o ON o.ctid = w.tid
%s
WHERE %s
ORDER BY w.rank, %s
LIMIT $2
FOR UPDATE OF o SKIP LOCKED`, with, strings.Join(p.selectList, ",\n  "), p.table, p.retryJoin, strings.Join(where, "\n  AND "), strings.Join(wat, ", "))
	}
	where := []string{sq.Pending(p.l, "o")}
	if p.xid != "" {
		where = append(where, p.xid)
	}
	return claimSQL{
		settings: claimSettings,
		plain:    stmt(where),
		fenced:   stmt(append(where[:len(where):len(where)], leaseHeldSQL(p.rs, 5))),
		windowed: true,
		ownRows:  true,
	}
}
