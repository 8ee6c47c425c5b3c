package mysql_test

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
	"github.com/outbox-relay/outbox-relay/internal/source/sourcetest"
)

func TestSamples(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	sourcetest.Samples(t, sourcetest.SampleKeeper{
		Record: func(xs []source.Sample) error { return mysql.RecordSamples(ctx, e.db, e.relayDB, xs) },
		Read:   func() ([]source.Sample, error) { return mysql.Samples(ctx, e.db, e.relayDB) },
		Age: func(s string) {
			e.exec(t, "UPDATE "+e.relayDB+".source_samples SET at = at - INTERVAL 61 MINUTE WHERE source = '"+s+"'")
		},
		Stored: func(s string) int {
			return queryInt(t, e.db, "SELECT COUNT(*) FROM "+e.relayDB+".source_samples WHERE source = ?", s)
		},
	})
}
