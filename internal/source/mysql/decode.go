package mysql

import (
	"database/sql"
	"time"

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
	colClaimedAt
	numClaimCols
)

// scanRow fills r from the current row of a claim; extra is the number of
// the layout's extra templates, which follow the fixed columns. The text and byte
// columns are read raw and copied into one string and one slice, so a row
// costs few allocations whatever its width.
func scanRow(rows *sql.Rows, extra int, r *source.Row, claimedAt *time.Time) error {
	var (
		raw        [colAggregateID + 1]sql.RawBytes
		created    sql.NullTime
		maxRetries sql.NullInt64
		attempts   int64
	)
	dest := make([]any, 0, numClaimCols+extra)
	for i := range raw {
		dest = append(dest, &raw[i])
	}
	dest = append(dest, &created, &maxRetries, &attempts, claimedAt)
	var ex []sql.NullString
	if extra > 0 {
		ex = make([]sql.NullString, extra)
		for i := range ex {
			dest = append(dest, &ex[i])
		}
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	if extra > 0 {
		r.Extra = make([]*string, extra)
		for i, v := range ex {
			if v.Valid {
				s := v.String
				r.Extra[i] = &s
			}
		}
	}
	fillRow(raw[:], r)
	if created.Valid {
		r.CreatedAt = created.Time.UTC()
	}
	if maxRetries.Valid {
		r.MaxAttempts = int(maxRetries.Int64) + 1
	}
	r.Attempts = int(attempts)
	return nil
}

// fillRow copies the raw text and byte columns of one claimed row into r.
func fillRow(raw []sql.RawBytes, r *source.Row) {
	byteCols := [...]int{colPayload, colKey, colPartitionKey, colHeaders}
	strCols := [...]int{colID, colTopic, colOrderKey, colEventType, colAggregateType, colAggregateID}
	nb, ns := 0, 0
	for _, c := range byteCols {
		nb += len(raw[c])
	}
	for _, c := range strCols {
		ns += len(raw[c])
	}
	buf := make([]byte, 0, nb)
	take := func(c int) []byte {
		if raw[c] == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, raw[c]...)
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
		sb = append(sb, raw[c]...)
	}
	all := string(sb)
	off := 0
	str := func(c int) string {
		s := all[off : off+len(raw[c])]
		off += len(raw[c])
		return s
	}
	r.ID = str(colID)
	if topic := str(colTopic); topic != "" {
		r.Topic, r.TopicOK = topic, true
	}
	r.OrderKey = str(colOrderKey)
	r.EventType, r.AggregateType, r.AggregateID = str(colEventType), str(colAggregateType), str(colAggregateID)
}
