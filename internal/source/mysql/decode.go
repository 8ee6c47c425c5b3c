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
	r.Fill(source.RawFields{
		ID: raw[colID], Payload: raw[colPayload], Topic: raw[colTopic], Key: raw[colKey],
		PartitionKey: raw[colPartitionKey], OrderKey: raw[colOrderKey], Headers: raw[colHeaders],
		EventType: raw[colEventType], AggregateType: raw[colAggregateType], AggregateID: raw[colAggregateID],
	})
}
