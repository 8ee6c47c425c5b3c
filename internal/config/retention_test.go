package config

import (
	"strings"
	"testing"
	"time"
)

const retentionDoc = `databases:
  main: {dsn: postgres://localhost/app}
sinks:
  kafka: {type: kafka, brokers: [localhost:9092]}
sources:
  - name: orders
    table: public.outbox
  - name: kept
    table: public.kept
`

func TestRetentionConfig(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, retentionDoc+"    retention: {older_than: 168h, include_dead: true}\n", nil)
	if cfg.Sources[0].Retention != nil {
		t.Errorf("a source without a retention block got %+v", cfg.Sources[0].Retention)
	}
	r := cfg.Sources[1].Retention
	if r == nil || r.OlderThan.D() != 168*time.Hour || r.Interval.D() != DefaultRetentionInterval || !r.IncludeDead {
		t.Errorf("retention %+v, want 168h, the default interval, include_dead", r)
	}

	for _, tc := range []struct{ block, want string }{
		{"    retention: {interval: 1h}\n", "sources[1].retention.older_than: required"},
		{"    retention: {older_than: 168h, interval: 10ms}\n", "sources[1].retention.interval: must be at least 1s"},
		{"    retention: {older_than: 7 days}\n", "sources[1].retention.older_than: invalid duration"},
		{"    retention: {older_than: 168h, keep: 3}\n", `unknown field "keep"`},
	} {
		if err := parseErr(t, retentionDoc+tc.block); !strings.Contains(err, tc.want) {
			t.Errorf("%q: error %q, want %q", tc.block, err, tc.want)
		}
	}
	my := strings.Replace(retentionDoc, "{dsn: postgres://localhost/app}", "{driver: mysql, dsn: \"root@tcp(127.0.0.1:3306)/app\"}", 1)
	if cfg := mustParse(t, my+"    retention: {older_than: 168h}\n", nil); cfg.Sources[1].Retention == nil {
		t.Error("retention on MySQL was dropped")
	}
}
