package metrics

import "testing"

// TestPublishedTotal: the total is every source's count.
func TestPublishedTotal(t *testing.T) {
	m := New(nil)
	if got := m.PublishedTotal(); got != 0 {
		t.Fatalf("no event published: %v", got)
	}
	m.Published.WithLabelValues("a").Add(3)
	m.Published.WithLabelValues("b").Add(4)
	if got := m.PublishedTotal(); got != 7 {
		t.Fatalf("published total = %v, want 7", got)
	}
}
