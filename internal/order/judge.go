package order

// Result is what became of one row when its batch was published.
type Result int8

const (
	// NotSent: the row was not given to the sink (fenced, its key stopped
	// in an earlier wave, or the relay shutting down).
	NotSent Result = iota
	// OK: the sink confirmed the message.
	OK
	// Failed: a retryable failure of the message.
	Failed
	// Terminal: the sink refused the message for good.
	Terminal
	// Unavailable: the sink was unavailable (circuit open, deadline
	// passed); not the message's fault.
	Unavailable
	// Invalid: the row could not be made into a message (bad payload, no
	// topic); it never reached the sink.
	Invalid
)

// stops reports whether a row with result r leaves its key waiting: the
// key's later rows in the batch must not go.
func (r Result) stops() bool { return r == NotSent || r == Failed || r == Unavailable }

// Fate is what the batch's commit does with a row.
type Fate int8

const (
	// Published: acknowledged.
	Published Fate = iota + 1
	// Dead: moved to the dead-letter table (a terminal failure; the relay
	// also dead-letters a Retry whose budget is spent).
	Dead
	// Retry: failed on its own account: one attempt charged, tried again
	// after a backoff, its key held meanwhile.
	Retry
	// Hold: left pending through no fault of its own (an earlier row of its
	// key is pending, its sink was unavailable, it was not sent): no
	// attempt charged, its key held for a while.
	Hold
)

// Verdict is Judge's answer for one batch.
type Verdict struct {
	Fates []Fate
	// Violations counts rows a sink delivered after an earlier row of
	// their key in the same call was left pending: the sink broke its
	// ordering contract.
	Violations int
}

// Judge gives each row of a batch its fate from its result. keys are the
// rows' order keys in claim order. With ordering off every row stands on its
// own result.
func Judge(keys []string, results []Result, ordering bool) Verdict {
	v := Verdict{Fates: make([]Fate, len(keys))}
	var blocked map[string]bool // keys with a row left pending earlier in the batch
	for i, k := range keys {
		r := results[i]
		if r == Invalid {
			// Never reaches a sink: dead-lettered whatever its key does.
			v.Fates[i] = Dead
			continue
		}
		if ordering && k != "" && blocked[k] {
			if r == OK {
				v.Violations++
				v.Fates[i] = Published
			} else {
				v.Fates[i] = Hold
			}
			continue
		}
		switch r {
		case OK:
			v.Fates[i] = Published
		case Terminal:
			v.Fates[i] = Dead
		case Failed:
			v.Fates[i] = Retry
		default: // NotSent, Unavailable
			v.Fates[i] = Hold
		}
		if ordering && k != "" && r.stops() {
			if blocked == nil {
				blocked = map[string]bool{}
			}
			blocked[k] = true
		}
	}
	return v
}
