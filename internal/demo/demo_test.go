package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// The README's first command must work: every committed event arrives, no
// rolled-back one, in order.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	r, err := Run(context.Background(), Options{DSN: pgtest.AdminDSN(), Events: 2000, Producers: 3, Keys: 50, Backlog: 3000, Out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if r.Received != r.Committed || r.Committed != 5000 || r.OutOfOrder != 0 || r.BacklogRate <= 0 {
		t.Fatalf("result %+v\n%s", r, out.String())
	}
	if !strings.Contains(out.String(), "all 2000 committed events arrived") || !strings.Contains(out.String(), "the backlog drained") {
		t.Fatalf("output:\n%s", out.String())
	}
}
