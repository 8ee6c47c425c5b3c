package order

import "time"

// Schedule says until when each row left pending (Retry or Hold) keeps its
// key held, and returns the time until which the batch's commit holds each
// key. at[i] comes filled for a Retry (its backoff) and for a row with a time
// of its own (its sink's Until, the fence's); Schedule fills in every Hold: a
// held row waits at least until floor, and at least as long as the row that
// first left its key pending in the batch, so that its key's rows come back
// together in order.
func Schedule(keys []string, fates []Fate, at []time.Time, floor time.Time) map[string]time.Time {
	first := map[string]time.Time{}
	held := map[string]time.Time{}
	for i, f := range fates {
		if f != Retry && f != Hold {
			continue
		}
		k := keys[i]
		if f == Hold {
			if at[i].Before(floor) {
				at[i] = floor
			}
			if b, ok := first[k]; ok && k != "" && at[i].Before(b) {
				at[i] = b
			}
		}
		if k == "" {
			continue
		}
		if _, ok := first[k]; !ok {
			first[k] = at[i]
		}
		if at[i].After(held[k]) {
			held[k] = at[i]
		}
	}
	return held
}
