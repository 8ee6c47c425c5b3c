package sqlcore

import (
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/layout"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

// BucketKey is a row's bucket key (see source.BucketKey): with ordering,
// the first of the layout's order key templates that is neither NULL nor
// empty, else the row's id as text (idText, in the dialect's spelling).
func (s SQL) BucketKey(l *layout.Layout, alias, idText string, ordering bool) string {
	if !ordering || len(l.OrderKeys) == 0 {
		return idText
	}
	var parts []string
	for _, t := range l.OrderKeys {
		parts = append(parts, "NULLIF("+s.Template(t, alias)+", '')")
	}
	return "COALESCE(" + strings.Join(parts, ", ") + ", " + idText + ")"
}

// InBucket is the condition that the row at alias is in bucket b: its
// bucket key's hash modulo b.Count is b.Index (source.BucketOf in SQL).
// It is empty for the whole source, so that a store of one bucket writes
// the SQL it wrote before buckets existed. Every claim of a bucket filters
// its candidates with it.
func (s SQL) InBucket(l *layout.Layout, alias, idText string, ordering bool, b source.Bucket) string {
	if !b.Split() {
		return ""
	}
	return s.D.Hash32(s.BucketKey(l, alias, idText, ordering)) + " % " + strconv.Itoa(b.Count) + " = " + strconv.Itoa(b.Index)
}
