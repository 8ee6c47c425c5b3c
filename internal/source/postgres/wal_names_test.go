package postgres

import (
	"strings"
	"testing"
)

func TestWALName(t *testing.T) {
	t.Parallel()
	if got := WALName("outbox_relay", "orders"); got != "outbox_relay_orders" {
		t.Errorf("plain name: %q", got)
	}
	seen := map[string]string{}
	for _, src := range []string{"orders:Shop.Outbox", "orders:shop.outbox", "Orders", strings.Repeat("x", 80), strings.Repeat("x", 81)} {
		got := WALName("outbox_relay", src)
		if len(got) > maxWALName {
			t.Errorf("%q: %q is %d bytes", src, got, len(got))
		}
		for _, c := range got {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
				t.Errorf("%q: %q has %q", src, got, c)
			}
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%q and %q share %q", src, other, got)
		}
		seen[got] = src
	}
	a, b := WALSlotName("shop_1", "outbox_relay", "orders"), WALSlotName("shop_2", "outbox_relay", "orders")
	if a == b || !strings.HasPrefix(a, "outbox_relay_orders_") || len(a) > maxWALName {
		t.Errorf("slots of two databases: %q and %q", a, b)
	}
}
