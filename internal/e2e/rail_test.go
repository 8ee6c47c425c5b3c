package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"
)

// railCall is one request a payment rail received.
type railCall struct {
	ID          string // Idempotency-Key: the outbox id
	Participant string
	Seq         int64
	N           int // 1 for the first request of this id, 2 for the next...
	Body        string
	Status      int
	At          time.Time
}

// answer is what the rail does with a request: its status and body, after
// a delay (a timeout when longer than the relay waits).
type answer struct {
	status int
	body   string
	delay  time.Duration
}

// rail is a payment rail over HTTP that checks what a strict dispatcher
// promises: a participant's requests come one at a time, never past the
// first sequence number it has not accepted; violations are kept.
type rail struct {
	srv    *httptest.Server
	decide func(c railCall) answer

	mu         sync.Mutex
	calls      []railCall
	inFlight   map[string]int   // participant -> requests in progress
	now, peak  int              // requests in progress, and their most at once
	accepted   map[string]int64 // participant -> highest sequence settled (2xx, or a 4xx refusal)
	violations []string
}

func newRail(t *testing.T, decide func(c railCall) answer) *rail {
	t.Helper()
	r := &rail{decide: decide, inFlight: map[string]int{}, accepted: map[string]int64{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *rail) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	p, _ := url.PathUnescape(req.Header.Get("X-Outbox-Key"))
	seq, _ := strconv.ParseInt(req.Header.Get("X-Outbox-Sequence-Id"), 10, 64)
	c := railCall{ID: req.Header.Get("Idempotency-Key"), Participant: p, Seq: seq, Body: string(body), At: time.Now()}
	r.mu.Lock()
	for _, old := range r.calls {
		if old.ID == c.ID {
			c.N = max(c.N, old.N)
		}
	}
	c.N++
	if r.inFlight[p] > 0 {
		r.violations = append(r.violations, fmt.Sprintf("participant %s: sequence %d sent while another of its dispatches was in flight", p, seq))
	}
	if last := r.accepted[p]; seq > last+1 {
		r.violations = append(r.violations, fmt.Sprintf("participant %s: sequence %d sent before %d was settled", p, seq, last+1))
	}
	r.inFlight[p]++
	r.now++
	r.peak = max(r.peak, r.now)
	r.mu.Unlock()

	a := r.decide(c)
	if a.delay > 0 {
		select {
		case <-time.After(a.delay):
		case <-req.Context().Done():
		}
	}
	c.Status = a.status
	r.mu.Lock()
	r.inFlight[p]--
	r.now--
	// Accepted, or refused for good: the sequence number is settled.
	settled := a.status/100 == 2 || (a.status/100 == 4 && a.status != 408 && a.status != 429)
	if settled && req.Context().Err() == nil && seq > r.accepted[p] {
		r.accepted[p] = seq
	}
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

// snapshot returns the requests answered so far and the violations.
func (r *rail) snapshot() ([]railCall, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]railCall(nil), r.calls...), append([]string(nil), r.violations...)
}

// ok is a rail's acceptance with its reference for the payment.
func ok(ref string) answer {
	return answer{status: 200, body: fmt.Sprintf(`{"reference": %q, "code": "ACCP"}`, ref)}
}
