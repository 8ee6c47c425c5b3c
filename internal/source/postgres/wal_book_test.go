package postgres

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

func bookRows(keys ...string) []*walRow {
	out := make([]*walRow, len(keys))
	for i, k := range keys {
		out[i] = &walRow{row: source.Row{ID: k + string(rune('0'+i)), OrderKey: k}}
	}
	return out
}

func ids(rows []*walRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.row.ID)
	}
	return out
}

// TestWALBookHeldKey: a row that backs off holds the later rows of its key
// until it is due; other keys and keyless rows go on; without ordering
// nothing is held.
func TestWALBookHeldKey(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, ordering := range []bool{true, false} {
		b := &walBook{ordering: ordering}
		tx := &walTx{end: 1}
		rows := bookRows("a", "a", "b", "", "")
		tx.left = len(rows)
		b.open(tx)
		b.add(tx, rows)
		first := b.claim(1, now)
		if got := ids(first); len(got) != 1 || got[0] != "a0" {
			t.Fatalf("first claim %v, want a0", got)
		}
		b.backOff(first[0], 1, now.Add(time.Minute))
		got := ids(b.claim(10, now))
		want := []string{"b2", "3", "4"}
		if !ordering {
			want = []string{"a1", "b2", "3", "4"}
		}
		if len(got) != len(want) {
			t.Fatalf("ordering %v: claim %v, want %v", ordering, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("ordering %v: claim %v, want %v", ordering, got, want)
			}
		}
		if ordering {
			// Once due, the row comes back first, then its key's next.
			got := ids(b.claim(10, now.Add(2*time.Minute)))
			if len(got) != 2 || got[0] != "a0" || got[1] != "a1" {
				t.Fatalf("claim once due: %v, want a0 a1", got)
			}
		}
	}
}

// TestWALBookWatermark: the slot confirms a transaction only once every row
// of it and of every transaction committed before it is settled, whatever
// order keys settle in.
func TestWALBookWatermark(t *testing.T) {
	t.Parallel()
	b := &walBook{ordering: true}
	var txs []*walTx
	var all [][]*walRow
	for i, keys := range [][]string{{"a", "a"}, {"b"}, {"c"}} {
		tx := &walTx{end: pglogrepl.LSN(100 * (i + 1)), left: len(keys)}
		rows := bookRows(keys...)
		b.open(tx)
		b.add(tx, rows)
		txs, all = append(txs, tx), append(all, rows)
	}
	b.settle(all[1])
	b.settle(all[2])
	if end, _ := b.advance(); end != 0 {
		t.Fatalf("advance past an unsettled transaction: %v", end)
	}
	b.settle(all[0][:1])
	if end, _ := b.advance(); end != 0 {
		t.Fatalf("advance past a transaction half settled: %v", end)
	}
	b.settle(all[0][1:])
	if end, _ := b.advance(); end != txs[2].end {
		t.Fatalf("advance = %v, want %v", end, txs[2].end)
	}
	if !b.idle() || b.held() != 0 {
		t.Fatalf("book not empty: %d rows, idle %v", b.held(), b.idle())
	}
}

// TestWALBookBounded: a row backing off keeps its transaction and those
// after it from the slot, not the rows settled after it in memory: the
// stream's bound counts the rows not settled.
func TestWALBookBounded(t *testing.T) {
	t.Parallel()
	b := &walBook{ordering: true}
	first := bookRows("a")
	tx := &walTx{end: 1, left: 1}
	b.open(tx)
	b.add(tx, first)
	b.backOff(b.claim(1, time.Now())[0], 1, time.Now().Add(time.Hour))
	for i := range 5000 {
		tx := &walTx{end: pglogrepl.LSN(i + 2), left: 1}
		rows := bookRows("b")
		b.open(tx)
		b.add(tx, rows)
		b.settle(b.claim(1, time.Now()))
	}
	if b.held() != 1 || len(b.rows) > 2048 {
		t.Fatalf("held %d, %d rows kept; want the one backing off and few settled", b.held(), len(b.rows))
	}
	if end, _ := b.advance(); end != 0 {
		t.Fatalf("advance past the row backing off: %v", end)
	}
}
