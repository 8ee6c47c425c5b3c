package postgres

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sqlcore"
)

// A claimed row's columns: sqlcore's, then this store's own.
const (
	colCtid     = sqlcore.NumRowColumns + iota // the row's physical address, for acknowledging it
	colTie                                     // its place in its transaction (see tieSQL)
	colRetrying                                // whether it has a retry state
	numClaimCols
)

// pgEpoch is where PostgreSQL's binary timestamps count from.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// DecodeRow fills r from the raw values of a row selected by RowSelect; the
// values after them are left to the caller.
func DecodeRow(vals [][]byte, fds []pgconn.FieldDescription, r *source.Row, extras int) error {
	return decodeRow(vals[:numClaimCols+extras], fds[:numClaimCols+extras], r)
}

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
	r.Fill(source.RawFields{
		ID: vals[sqlcore.ColID], Payload: vals[sqlcore.ColPayload], Topic: vals[sqlcore.ColTopic], Key: vals[sqlcore.ColKey],
		PartitionKey: vals[sqlcore.ColPartitionKey], OrderKey: vals[sqlcore.ColOrderKey], Headers: vals[sqlcore.ColHeaders],
		EventType: vals[sqlcore.ColEventType], AggregateType: vals[sqlcore.ColAggregateType], AggregateID: vals[sqlcore.ColAggregateID],
	})

	if v := vals[sqlcore.ColCreatedAt]; v != nil {
		t, err := decodeTimestamptz(v, fds[sqlcore.ColCreatedAt].Format)
		if err != nil {
			return err
		}
		r.CreatedAt = t
	}
	if v := vals[sqlcore.ColMaxRetries]; v != nil {
		n, err := decodeInt4(v, fds[sqlcore.ColMaxRetries].Format)
		if err != nil {
			return err
		}
		r.MaxAttempts = n + 1
	}
	n, err := decodeInt4(vals[sqlcore.ColAttempts], fds[sqlcore.ColAttempts].Format)
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

func decodeInt8(v []byte, format int16) (int64, error) {
	if format == pgtype.BinaryFormatCode {
		if len(v) != 8 {
			return 0, fmt.Errorf("int8 of %d bytes", len(v))
		}
		return int64(binary.BigEndian.Uint64(v)), nil
	}
	return strconv.ParseInt(string(v), 10, 64)
}

func decodeBool(v []byte, format int16) (bool, error) {
	if format == pgtype.BinaryFormatCode {
		if len(v) != 1 {
			return false, fmt.Errorf("bool of %d bytes", len(v))
		}
		return v[0] == 1, nil
	}
	return string(v) == "t", nil
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
