package source

import (
	"context"
	"crypto/rand"
	"fmt"
)

// MaxErrorLen bounds the error texts a store records (retry state, dead
// letters, the table's error column): longer ones are cut and end in "...".
const MaxErrorLen = 2000

// ErrorText is msg as a store records it, cut to MaxErrorLen bytes.
func ErrorText(msg string) string {
	if len(msg) > MaxErrorLen {
		return msg[:MaxErrorLen] + "..."
	}
	return msg
}

// NewBatchID returns a random (version 4) UUID, the id a layout that keeps
// claims records on the rows of one batch.
func NewBatchID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Completion is what completing a batch writes, decided once for every
// store from the batch's rows and its outcome.
type Completion struct {
	Published []int        // indexes of the rows delivered
	Retry     []Retry      // rows to try again later, their errors cut to MaxErrorLen
	Dead      []DeadLetter // rows given up on
	// Forget are the ids of delivered and dead-lettered rows that had
	// retry state: it goes in the same transaction.
	Forget []string
}

// DeadLetter is what the dead-letter table keeps of a row: its route as
// rendered (nil where the row had none), its payload and why it failed.
type DeadLetter struct {
	Index                    int // into the batch's rows
	ID, EventType            string
	Topic, Key, PartitionKey *string
	Headers                  *string // only when they are JSON; else the row's copy keeps them
	Payload                  []byte
	PayloadIsJSON            bool
	Reason                   string // cut to MaxErrorLen
	Attempts                 int
}

// PlanCompletion turns a batch's outcome into what its completion writes.
// hadRetryState says whether the store holds retry state for row i.
func PlanCompletion(rows []Row, o Outcome, hadRetryState func(i int) bool) Completion {
	c := Completion{Published: o.Published}
	for _, i := range o.Published {
		if hadRetryState(i) {
			c.Forget = append(c.Forget, rows[i].ID)
		}
	}
	if len(o.Retry) > 0 {
		c.Retry = make([]Retry, len(o.Retry))
		for i, r := range o.Retry {
			r.Err = ErrorText(r.Err)
			c.Retry[i] = r
		}
	}
	for _, d := range o.Dead {
		r := &rows[d.Index]
		dl := DeadLetter{Index: d.Index, ID: r.ID, EventType: r.EventType, Payload: r.Payload,
			PayloadIsJSON: d.PayloadIsJSON, Reason: ErrorText(d.Reason), Attempts: d.Attempts}
		if r.TopicOK {
			dl.Topic = &r.Topic
		}
		if r.Key != nil {
			dl.Key = ptr(string(r.Key))
		}
		if r.PartitionKey != nil {
			dl.PartitionKey = ptr(string(r.PartitionKey))
		}
		if r.Headers != nil && d.HeadersAreJSON {
			dl.Headers = ptr(string(r.Headers))
		}
		c.Dead = append(c.Dead, dl)
		if hadRetryState(d.Index) {
			c.Forget = append(c.Forget, r.ID)
		}
	}
	return c
}

func ptr(s string) *string { return &s }

// CompletionWriter writes the parts of a completion in the claim's
// transaction; a store may send them as they come or queue them and send
// them together before it commits.
type CompletionWriter interface {
	// CheckLease fails with ErrLeaseLost when the batch's lease changed
	// owner or term since the claim.
	CheckLease(ctx context.Context) error
	Acknowledge(ctx context.Context, rows []int) error
	RecordRetries(ctx context.Context, rs []Retry) error
	DeadLetter(ctx context.Context, ds []DeadLetter) error
	ForgetRetries(ctx context.Context, ids []string) error
}

// WriteCompletion writes c through w. A batch claimed under a lease is
// checked first: a deposed holder writes nothing (a takeover committed after
// the check finds the claim's transaction holding its rows and ends it
// before the new holder claims).
func WriteCompletion(ctx context.Context, w CompletionWriter, c Completion, leased bool) error {
	if leased {
		if err := w.CheckLease(ctx); err != nil {
			return err
		}
	}
	if len(c.Published) > 0 {
		if err := w.Acknowledge(ctx, c.Published); err != nil {
			return fmt.Errorf("acknowledge: %w", err)
		}
	}
	if len(c.Retry) > 0 {
		if err := w.RecordRetries(ctx, c.Retry); err != nil {
			return fmt.Errorf("record retries: %w", err)
		}
	}
	if len(c.Dead) > 0 {
		if err := w.DeadLetter(ctx, c.Dead); err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
	}
	if len(c.Forget) > 0 {
		if err := w.ForgetRetries(ctx, c.Forget); err != nil {
			return fmt.Errorf("clear retry state: %w", err)
		}
	}
	return nil
}

// ClaimWindow is how many rows a claim of limit considers when it reads a
// window of the pending rows: the rows of the store's held batches still in
// flight (each at most limit), which the window passes over, then twice the
// limit.
func ClaimWindow(limit int, held int64) int {
	return limit * int(2+held)
}
