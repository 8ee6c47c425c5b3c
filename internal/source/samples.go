package source

import (
	"fmt"
	"strings"
	"time"
)

// Sample is one point of a source's chart: its backlog and delivery rate
// at a moment, as the replica holding it measured them.
type Sample struct {
	Source          string
	At              time.Time // the database's clock when written
	Pending         int64
	OldestSeconds   float64
	EventsPerSecond float64
}

// SampleSpan is how far back samples are kept.
const SampleSpan = time.Hour

// SampleStatements are the statements that keep the samples of one
// database, in its dialect: rs is the quoted relay schema, now the
// database's clock, ph(i) the i-th placeholder (from 1).
type SampleStatements struct {
	rs, now string
	ph      func(i int) string
}

// NewSampleStatements returns the sample statements of a dialect.
func NewSampleStatements(rs, now string, ph func(i int) string) SampleStatements {
	return SampleStatements{rs: rs, now: now, ph: ph}
}

// Insert writes n samples (source, pending, oldest, rate each, in that
// order among the arguments), all at the database's now.
func (s SampleStatements) Insert(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + s.rs + ".source_samples (source, at, pending, oldest_seconds, events_per_second) VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(%s, %s, %s, %s, %s)", s.ph(4*i+1), s.now, s.ph(4*i+2), s.ph(4*i+3), s.ph(4*i+4))
	}
	return b.String()
}

// InsertArgs are the arguments of Insert(len(samples)).
func InsertArgs(samples []Sample) []any {
	args := make([]any, 0, 4*len(samples))
	for _, x := range samples {
		args = append(args, x.Source, x.Pending, x.OldestSeconds, x.EventsPerSecond)
	}
	return args
}

// Prune deletes the samples older than SampleSpan.
func (s SampleStatements) Prune() string {
	return "DELETE FROM " + s.rs + ".source_samples WHERE at < " + s.now + " - INTERVAL '1' HOUR"
}

// Read lists the samples of the last SampleSpan, by source and time.
func (s SampleStatements) Read() string {
	return "SELECT source, at, pending, oldest_seconds, events_per_second FROM " + s.rs + ".source_samples WHERE at >= " +
		s.now + " - INTERVAL '1' HOUR ORDER BY source, at"
}

// ScanSamples reads the rows of Read.
func ScanSamples(rows RowScanner) ([]Sample, error) {
	var out []Sample
	for rows.Next() {
		var x Sample
		if err := rows.Scan(&x.Source, &x.At, &x.Pending, &x.OldestSeconds, &x.EventsPerSecond); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}
