package lease

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
)

// Lease is a shard (a source) held by one relay process: the term grows
// with every change of owner, so a previous owner can be told apart (and
// fenced) after a hand-over.
type Lease struct {
	Shard         string
	Owner         string
	Term          int64
	PreviousOwner string // who held it before, when it changed hands
	// Unended are the owners whose claims may still be open: the previous
	// one and any earlier one that a previous owner did not end before it
	// lost the lease in turn. The new owner ends them all, then calls
	// Leases.Ended.
	Unended []string
}

// maxUnended bounds the owners a lease remembers as not ended.
const maxUnended = 16

// NextUnended is the list a lease taken over from prev, whose list was
// unended, passes to its new owner: prev and every owner of unended, but not
// owner itself (its own claims of an earlier term ended with its worker),
// each once, the most recent last, at most maxUnended.
func NextUnended(unended []string, prev, owner string) []string {
	var out []string
	for _, o := range append(append([]string(nil), unended...), prev) {
		if o == "" || o == owner || slices.Contains(out, o) {
			continue
		}
		out = append(out, o)
	}
	return out[max(0, len(out)-maxUnended):]
}

// JoinOwners and SplitOwners store an owner list in one column (owners
// never contain a space).
func JoinOwners(owners []string) string { return strings.Join(owners, " ") }

// SplitOwners reads what JoinOwners wrote.
func SplitOwners(s string) []string { return strings.Fields(s) }

// ErrLeaseLost is returned by a batch's completion when the lease under
// which the batch was claimed is no longer held by its owner with the same
// term: another replica took the source over. Nothing of the batch was
// recorded.
var ErrLeaseLost = errors.New("lease lost: another replica holds the source")

// Fence holds the lease a store's batches are claimed under. Every batch
// remembers the lease of its claim, and its completing transaction checks
// that the lease is still held with that term: a deposed holder can complete
// nothing. A store without a lease (nil) completes unchecked.
type Fence struct {
	p atomic.Pointer[Lease]
}

// Set binds the store's next claims to l (nil: none).
func (f *Fence) Set(l *Lease) { f.p.Store(l) }

// Get returns the lease claims are bound to now, or nil.
func (f *Fence) Get() *Lease { return f.p.Load() }

// Fenced is a store whose claims and completions are bound to a lease.
type Fenced interface {
	LeaseFence() *Fence
}
