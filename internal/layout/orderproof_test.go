package layout

import (
	"strings"
	"testing"
)

func TestOrderGap(t *testing.T) {
	uuid := Column{Name: "id", Type: "uuid"}
	serialID := Column{Name: "id", Type: "bigint", Serial: true}
	created := Column{Name: "created_at", Type: "timestamp with time zone"}
	seq := Column{Name: "seq", Type: "bigint", Serial: true}
	for _, tt := range []struct {
		name           string
		id, orderBy    string
		cols           []Column
		statementOrder bool
		want           string // a part of the gap; "" when proven
	}{
		{"serial id orders", "id", "id", []Column{serialID}, false, ""},
		{"serial id breaks timestamp ties", "id", "created_at", []Column{serialID, created}, false, ""},
		{"serial order_by", "id", "seq", []Column{uuid, created, seq}, false, ""},
		{"random id as order_by", "id", "id", []Column{uuid}, true, "rows of one key may arrive in any order"},
		{"statement order, random id", "id", "created_at", []Column{uuid, created}, true, "one multi-row INSERT"},
		{"no statement order, random id", "id", "created_at", []Column{uuid, created}, false, "rows written in one transaction"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := &Layout{ID: Column{Name: tt.id}, OrderBy: tt.orderBy}
			got := OrderGap(l, tt.cols, tt.statementOrder)
			switch {
			case tt.want == "" && got != "":
				t.Errorf("gap %q, want none", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Errorf("gap %q, want it to say %q", got, tt.want)
			case tt.want != "" && !strings.Contains(got, "set layout.order_by"):
				t.Errorf("gap %q names no fix", got)
			}
		})
	}
}
