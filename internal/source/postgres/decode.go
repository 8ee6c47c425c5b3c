package postgres

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Claim query result columns, in order (see buildStatements).
const (
	colID = iota
	colPayload
	colTopic
	colKey
	colPartitionKey
	colOrderKey
	colHeaders
	colEventType
	colAggregateType
	colAggregateID
	colCreatedAt
	colMaxRetries
	colAttempts
	colCtid // the row's physical address, for acknowledging it
	numClaimCols
)

// pgEpoch is where PostgreSQL's binary timestamps count from.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// decodeRow fills r from the raw values of one claimed row. Every text value
// lands in one string and every byte value in one slice, so a row costs two
// allocations whatever its width: this is the relay's per-row hot path.
func decodeRow(vals [][]byte, fds []pgconn.FieldDescription, r *source.Row) error {
	if len(vals) < numClaimCols {
		return fmt.Errorf("claim returned %d columns, want at least %d", len(vals), numClaimCols)
	}
	if extra := vals[numClaimCols:]; len(extra) > 0 {
		r.Extra = make([]*string, len(extra))
		for i, v := range extra {
			if v != nil {
				s := string(v)
				r.Extra[i] = &s
			}
		}
	}
	byteCols := [...]int{colPayload, colKey, colPartitionKey, colHeaders}
	strCols := [...]int{colID, colTopic, colOrderKey, colEventType, colAggregateType, colAggregateID}
	nb, ns := 0, 0
	for _, c := range byteCols {
		nb += len(vals[c])
	}
	for _, c := range strCols {
		ns += len(vals[c])
	}
	buf := make([]byte, 0, nb)
	take := func(c int) []byte {
		if vals[c] == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, vals[c]...)
		return buf[start:len(buf):len(buf)]
	}
	r.Payload = take(colPayload)
	if r.Payload == nil {
		r.Payload = []byte{}
	}
	r.Key = take(colKey)
	if pk := take(colPartitionKey); len(pk) > 0 {
		r.PartitionKey = pk
	}
	r.Headers = take(colHeaders)

	sb := make([]byte, 0, ns)
	for _, c := range strCols {
		sb = append(sb, vals[c]...)
	}
	all := string(sb)
	off := 0
	str := func(c int) string {
		s := all[off : off+len(vals[c])]
		off += len(vals[c])
		return s
	}
	r.ID = str(colID)
	if topic := str(colTopic); topic != "" {
		r.Topic, r.TopicOK = topic, true
	}
	r.OrderKey = str(colOrderKey)
	r.EventType, r.AggregateType, r.AggregateID = str(colEventType), str(colAggregateType), str(colAggregateID)

	if v := vals[colCreatedAt]; v != nil {
		t, err := decodeTimestamptz(v, fds[colCreatedAt].Format)
		if err != nil {
			return err
		}
		r.CreatedAt = t
	}
	if v := vals[colMaxRetries]; v != nil {
		n, err := decodeInt4(v, fds[colMaxRetries].Format)
		if err != nil {
			return err
		}
		r.MaxAttempts = n + 1
	}
	n, err := decodeInt4(vals[colAttempts], fds[colAttempts].Format)
	if err != nil {
		return err
	}
	r.Attempts = n
	return nil
}

func decodeInt4(v []byte, format int16) (int, error) {
	if format == pgtype.BinaryFormatCode {
		if len(v) != 4 {
			return 0, fmt.Errorf("int4 of %d bytes", len(v))
		}
		return int(int32(binary.BigEndian.Uint32(v))), nil
	}
	return strconv.Atoi(string(v))
}

func decodeTimestamptz(v []byte, format int16) (time.Time, error) {
	if format != pgtype.BinaryFormatCode {
		return time.Time{}, fmt.Errorf("timestamptz in text format")
	}
	if len(v) != 8 {
		return time.Time{}, fmt.Errorf("timestamptz of %d bytes", len(v))
	}
	us := int64(binary.BigEndian.Uint64(v))
	return pgEpoch.Add(time.Duration(us) * time.Microsecond), nil
}

// decodeTID reads a tid (block, offset) in binary or text format.
func decodeTID(v []byte, format int16) (pgtype.TID, error) {
	if format == pgtype.BinaryFormatCode {
		if len(v) != 6 {
			return pgtype.TID{}, fmt.Errorf("tid of %d bytes", len(v))
		}
		return pgtype.TID{BlockNumber: binary.BigEndian.Uint32(v), OffsetNumber: binary.BigEndian.Uint16(v[4:]), Valid: true}, nil
	}
	var t pgtype.TID
	if err := t.Scan(string(v)); err != nil {
		return pgtype.TID{}, fmt.Errorf("tid %q: %w", v, err)
	}
	return t, nil
}
