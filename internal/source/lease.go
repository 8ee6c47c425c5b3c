package source

// Lease is a shard (a source) held by one relay process: the term grows
// with every change of owner, so a previous owner can be told apart (and
// fenced) after a hand-over.
type Lease struct {
	Shard         string
	Owner         string
	Term          int64
	PreviousOwner string // who held it before, when it changed hands
}
