package mysql

import (
	"slices"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// passedKeys are the keys of the rows a bucket's claim could not lock.
//
// While the shard count of a source changes, the holders of the old and of
// the new buckets claim side by side: a key of bucket 1/4 is a key of bucket
// 1/2 too, and their claims must not overtake each other's rows of it. A
// claim of a bucket (with ordering) therefore takes a row only when every
// earlier row of its key in its window is taken by this claim too, or held
// by this store's own batches in flight (which the window leaves out, and
// whose order the order book keeps). A window row the claim tried to lock
// and did not get (another transaction holds it, or it changed since the
// window was read) holds its key for the rest of the claim: the later rows
// of its key are not tried, and those the same locking read locked are not
// returned. They stay locked, untouched, until the batch ends: that happens
// only while another claimer holds rows of this bucket.
type passedKeys map[string]bool

// keep notes the keys of the rows of chunk (window rows tried in one
// locking read, in the claim's order) missing from got (the rows it
// locked, in the same order), and returns the rows of got that no missing
// row of their key precedes.
func (p *passedKeys) keep(chunk []windowRow, got []source.Row) []source.Row {
	locked := make(map[string]bool, len(got))
	for i := range got {
		locked[got[i].ID] = true
	}
	var drop map[string]bool
	for _, r := range chunk {
		switch {
		case r.key == "":
		case (*p)[r.key]:
			if locked[r.id] {
				if drop == nil {
					drop = map[string]bool{}
				}
				drop[r.id] = true
			}
		case !locked[r.id]:
			if *p == nil {
				*p = passedKeys{}
			}
			(*p)[r.key] = true
		}
	}
	if drop == nil {
		return got
	}
	return slices.DeleteFunc(got, func(r source.Row) bool { return drop[r.ID] })
}

// drop removes from win the rows of the keys passed so far.
func (p passedKeys) drop(win []windowRow) []windowRow {
	if len(p) == 0 {
		return win
	}
	return slices.DeleteFunc(win, func(r windowRow) bool { return r.key != "" && p[r.key] })
}

// windowIDs are the ids of rows.
func windowIDs(rows []windowRow) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	return ids
}
