package bench

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// A small handover run: two replicas of the relay's own executable, one
// stopped with SIGTERM and one killed; each time the shards it held are
// found held by the other. The times are not asserted.
func TestHandover(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL and the go command")
	}
	bin := filepath.Join(t.TempDir(), "outbox-relay")
	// The test runs in internal/bench: the command is two levels up.
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/outbox-relay").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rep, err := Run(context.Background(), Options{Workload: "handover", DSN: pgtest.AdminDSN(), Replicas: 2, Shards: 3,
		LeaseTTL: 3 * time.Second, RelayBinary: bin, BatchSize: 100, Pipeline: 1, Partitions: 1, InProcessBroker: true})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Handover
	if r == nil || len(r.Rounds) != 2 || r.Shards != 3 || r.LeaseTTL != 3 {
		t.Fatalf("handover result %+v: want 2 rounds on 3 shards, lease_ttl 3 s", r)
	}
	for i, want := range []string{"SIGTERM", "SIGKILL"} {
		if ho := r.Rounds[i]; ho.Signal != want || ho.Held != 2 || ho.Seconds < 0 || ho.ExitSeconds < 0 {
			t.Errorf("round %d: %+v, want %s of the replica holding 2 of the 3 shards", i, ho, want)
		}
	}
}
