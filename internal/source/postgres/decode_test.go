package postgres

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sqlcore"
)

func TestDecodeRow(t *testing.T) {
	fds := make([]pgconn.FieldDescription, numClaimCols)
	fds[sqlcore.ColCreatedAt].Format = pgtype.BinaryFormatCode
	fds[sqlcore.ColMaxRetries].Format = pgtype.BinaryFormatCode
	fds[sqlcore.ColAttempts].Format = pgtype.TextFormatCode
	int4 := func(n int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }
	when := time.Date(2026, 1, 30, 12, 0, 0, 123456000, time.UTC)
	ts := binary.BigEndian.AppendUint64(nil, uint64(when.Sub(pgEpoch)/time.Microsecond))

	vals := make([][]byte, numClaimCols)
	vals[sqlcore.ColID] = []byte("ckx1")
	vals[sqlcore.ColPayload] = []byte(`{"a":1}`)
	vals[sqlcore.ColTopic] = []byte("tenant.acme")
	vals[sqlcore.ColKey] = []byte("")
	vals[sqlcore.ColPartitionKey] = []byte("")
	vals[sqlcore.ColOrderKey] = []byte("task-1")
	vals[sqlcore.ColHeaders] = nil
	vals[sqlcore.ColEventType] = []byte("kitchen.task.claimed")
	vals[sqlcore.ColAggregateType] = nil
	vals[sqlcore.ColAggregateID] = []byte("task-1")
	vals[sqlcore.ColCreatedAt] = ts
	vals[sqlcore.ColMaxRetries] = int4(5)
	vals[sqlcore.ColAttempts] = []byte("2")

	var r source.Row
	if err := decodeRow(vals, fds, &r); err != nil {
		t.Fatal(err)
	}
	vals[sqlcore.ColPayload][0] = 'X' // the row must not alias the driver's buffer
	if r.ID != "ckx1" || string(r.Payload) != `{"a":1}` || !r.TopicOK || r.Topic != "tenant.acme" ||
		r.OrderKey != "task-1" || r.EventType != "kitchen.task.claimed" || r.AggregateType != "" || r.AggregateID != "task-1" {
		t.Fatalf("decoded %+v", r)
	}
	if r.Key == nil || len(r.Key) != 0 {
		t.Errorf("empty key decoded as %#v, want empty and not nil", r.Key)
	}
	if r.PartitionKey != nil || r.Headers != nil {
		t.Errorf("empty partition key %#v, NULL headers %#v: want nil", r.PartitionKey, r.Headers)
	}
	if !r.CreatedAt.Equal(when) || r.MaxAttempts != 6 || r.Attempts != 2 {
		t.Errorf("created %v, max attempts %d, attempts %d", r.CreatedAt, r.MaxAttempts, r.Attempts)
	}

	vals[sqlcore.ColTopic], vals[sqlcore.ColKey], vals[sqlcore.ColCreatedAt], vals[sqlcore.ColMaxRetries] = nil, nil, nil, nil
	r = source.Row{}
	if err := decodeRow(vals, fds, &r); err != nil {
		t.Fatal(err)
	}
	if r.TopicOK || r.Key != nil || !r.CreatedAt.IsZero() || r.MaxAttempts != 0 {
		t.Errorf("NULLs decoded as %+v", r)
	}
	if err := decodeRow(vals[:5], fds, &r); err == nil {
		t.Error("a short row decoded without error")
	}
}
