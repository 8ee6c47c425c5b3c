package config

import "time"

// DefaultRetentionInterval is how often a running relay applies a source's
// retention when the source does not say.
const DefaultRetentionInterval = time.Hour

// Retention has the running relay delete the source's settled rows older
// than OlderThan every Interval, as the retention command does; only the
// replica holding the source's lease does it. The relay's role then needs
// DELETE on the table.
type Retention struct {
	// OlderThan is how long ago a row must have been settled (published or
	// dead-lettered) to be deleted, e.g. 168h.
	OlderThan   Duration `yaml:"older_than"`
	Interval    Duration `yaml:"interval"`     // default 1h
	IncludeDead bool     `yaml:"include_dead"` // also dead-lettered rows
}

// retentionDefaults fills a retention block's interval.
func (d defaulter) retention(r **Retention, p string) {
	if *r == nil {
		return
	}
	c := **r // copy: the caller may share the pointer
	d.dur(&c.Interval, p+".interval", DefaultRetentionInterval)
	*r = &c
}

func (c *Config) validateRetention(ps *problems, p string, s *Source) {
	r := s.Retention
	if r == nil {
		return
	}
	if r.OlderThan <= 0 {
		ps.add(p+".older_than", "required: how long ago a row must have been settled to be deleted, e.g. 168h")
	}
	if r.Interval < Duration(time.Second) {
		ps.add(p+".interval", "must be at least 1s, got %s", r.Interval)
	}
}
