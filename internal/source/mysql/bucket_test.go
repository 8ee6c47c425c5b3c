package mysql

import (
	"context"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/mytest"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

// TestHash32MatchesGo checks that the bucket hash the claims compute in SQL
// is Go's (source.Hash32) on every key of the vectors, non-ASCII ones
// included, as text of the relay's connections and as a utf8mb4 column.
func TestHash32MatchesGo(t *testing.T) {
	t.Parallel()
	_, dsn := mytest.NewDatabase(t, "hash")
	db, err := Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	mytest.Exec(t, db, "CREATE TABLE k (id INT PRIMARY KEY, v VARCHAR(100) CHARACTER SET utf8mb4 NOT NULL)")
	for i, v := range sourcetest.HashVectors {
		var param, col uint64
		if err := db.QueryRowContext(ctx, "SELECT "+dialect{}.Hash32(asText("?")), v.Key).Scan(&param); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO k VALUES (?, ?)", i, v.Key); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(ctx, "SELECT "+dialect{}.Hash32(asText("v"))+" FROM k WHERE id = ?", i).Scan(&col); err != nil {
			t.Fatal(err)
		}
		if param != uint64(v.Hash) || col != uint64(v.Hash) || uint32(col) != source.Hash32(v.Key) {
			t.Errorf("hash of %q: MySQL %d (as a parameter), %d (as a column), Go %d, want %d", v.Key, param, col, source.Hash32(v.Key), v.Hash)
		}
	}
}

// TestPassedKeys checks the rule of a bucket's claim on the rows it could
// not lock: such a row holds its key, so the rows of its key after it are
// neither returned (when the same read locked them) nor tried.
func TestPassedKeys(t *testing.T) {
	chunk := []windowRow{{id: "1", key: "a"}, {id: "2", key: "b"}, {id: "3", key: ""}, {id: "4", key: "a"}, {id: "5", key: "b"}, {id: "6", key: ""}}
	// Row 2 (key b) was locked by another claimer; so was keyless row 3.
	got := []source.Row{{ID: "1", OrderKey: "a"}, {ID: "4", OrderKey: "a"}, {ID: "5", OrderKey: "b"}, {ID: "6"}}
	var p passedKeys
	kept := p.keep(chunk, got)
	var ids []string
	for _, r := range kept {
		ids = append(ids, r.ID)
	}
	if want := []string{"1", "4", "6"}; !slices.Equal(ids, want) {
		t.Errorf("kept %v, want %v: b's second row follows its first, which another claimer holds", ids, want)
	}
	rest := p.drop([]windowRow{{id: "7", key: "b"}, {id: "8", key: "a"}, {id: "9", key: ""}})
	if got := windowIDs(rest); !slices.Equal(got, []string{"8", "9"}) {
		t.Errorf("left %v to try, want 8 and 9: key b is held for the rest of the claim", got)
	}
}
