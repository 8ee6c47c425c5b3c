package mysql

import (
	"database/sql"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/sqlcore"
)

// A claimed row's columns: sqlcore's, then this store's own.
const (
	colClaimedAt = sqlcore.NumRowColumns + iota // the claim's time, by the server's clock
	numClaimCols
)

// scanRow fills r from the current row of a claim; extra is the number of
// the layout's extra templates, which follow the fixed columns. The text and byte
// columns are read raw and copied into one string and one slice, so a row
// costs few allocations whatever its width.
func scanRow(rows *sql.Rows, extra int, r *source.Row, claimedAt *time.Time) error {
	var (
		raw        [sqlcore.ColAggregateID + 1]sql.RawBytes
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
		ID: raw[sqlcore.ColID], Payload: raw[sqlcore.ColPayload], Topic: raw[sqlcore.ColTopic], Key: raw[sqlcore.ColKey],
		PartitionKey: raw[sqlcore.ColPartitionKey], OrderKey: raw[sqlcore.ColOrderKey], Headers: raw[sqlcore.ColHeaders],
		EventType: raw[sqlcore.ColEventType], AggregateType: raw[sqlcore.ColAggregateType], AggregateID: raw[sqlcore.ColAggregateID],
	})
}
