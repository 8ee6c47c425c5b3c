package source

import (
	"errors"
	"fmt"
	"strings"
)

// Priority has a source's claims take some of its rows before others
// (sources[].event_priority): the rows whose Column matches the first of
// Classes, then those that match the second, and so on; rows that match
// none come last. A class is a pattern in which '*' stands for any run of
// characters ("kitchen.task.*"); the rest is matched exactly.
//
// A claim under a priority reads a window of the first Lookahead pending
// rows in the claim's order and takes from it the rows of the best rank
// first. With ordering, a row's rank is the best rank of its key's rows
// from it on within the window (sqlcore's EffectiveRank): a row that a row
// of a higher class follows is taken with it, so that no row overtakes an
// earlier row of its key, and an urgent event is not kept waiting behind
// its key's earlier ones. Rows beyond the window wait their turn in the
// claim's order: the claim's cost stays bounded by the window however long
// the backlog.
type Priority struct {
	// Column is the column whose value, as text, is matched (the layout's
	// event type by default).
	Column string
	// Classes are the patterns, the highest class first.
	Classes []string
	// Lookahead is how many pending rows a claim considers.
	Lookahead int
}

// MaxPriorityClasses is the most classes a priority may list.
const MaxPriorityClasses = 16

// Validate checks the classes and the lookahead.
func (p *Priority) Validate() error {
	if p.Column == "" {
		return errors.New("no column to match the classes against")
	}
	if len(p.Classes) == 0 || len(p.Classes) > MaxPriorityClasses {
		return fmt.Errorf("classes: want 1 to %d patterns, got %d", MaxPriorityClasses, len(p.Classes))
	}
	for i, c := range p.Classes {
		if strings.Trim(c, "*") == "" {
			return fmt.Errorf("classes[%d]: %q matches every row", i, c)
		}
	}
	if p.Lookahead < 1 {
		return fmt.Errorf("lookahead: must be at least 1, got %d", p.Lookahead)
	}
	return nil
}

// Window is how many rows a claim of limit under the priority considers:
// the lookahead, and at least the window an ordered claim reads anyway
// (ClaimWindow), which reaches past the store's batches in flight.
func (p *Priority) Window(limit int, held int64) int {
	return max(p.Lookahead, ClaimWindow(limit, held))
}
