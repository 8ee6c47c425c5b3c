package source

import (
	"errors"

	"github.com/outbox-relay/outbox-relay/internal/lease"
)

// Lease, Fence and ErrLeaseLost are the lease package's, named here because
// the Store seam uses them: a store binds its claims to a Lease through its
// Fence, and Batch.Complete fails with ErrLeaseLost when that lease is no
// longer held with the same term (see internal/lease).
type (
	Lease = lease.Lease
	Fence = lease.Fence
)

// ErrLeaseLost is returned by Batch.Complete when the lease under which the
// batch was claimed is no longer held by its owner with the same term:
// another replica took the source over. Nothing of the batch was recorded.
var ErrLeaseLost = lease.ErrLeaseLost

// ErrNoTable is returned when a source's table does not exist (or the role
// cannot see it).
var ErrNoTable = errors.New("table not found")
