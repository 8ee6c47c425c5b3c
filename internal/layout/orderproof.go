package layout

import "fmt"

// OrderGap says when rows of one key can be claimed in another order than
// they were inserted, naming the fix, or returns "" when the table's columns
// prove the order. Rows are claimed by order_by, ties broken (where the
// database can tell, statementOrder) by the statement of their transaction
// that inserted them, then by id. The order is proven when order_by, or the
// id that breaks its ties, is filled by the database in insert order.
func OrderGap(l *Layout, cols []Column, statementOrder bool) string {
	serial := map[string]bool{}
	for _, c := range cols {
		serial[c.Name] = c.Serial
	}
	if serial[l.OrderBy] || serial[l.ID.Name] {
		return ""
	}
	fix := "fix: add a column the database fills in insert order (BIGINT GENERATED ALWAYS AS IDENTITY on PostgreSQL, " +
		"AUTO_INCREMENT on MySQL and MariaDB) and set layout.order_by to it"
	if l.OrderBy == l.ID.Name {
		return fmt.Sprintf("rows are claimed in the order of %s, which the database does not fill in insert order: "+
			"rows of one key may arrive in any order; %s", l.OrderBy, fix)
	}
	if statementOrder {
		return fmt.Sprintf("rows of one key with the same %s are ordered by the statement that inserted them, then by %s, "+
			"which is not filled in insert order: rows written by one multi-row INSERT, or by two transactions that got "+
			"the same %s, may arrive in either order; %s", l.OrderBy, l.ID.Name, l.OrderBy, fix)
	}
	return fmt.Sprintf("rows of one key with the same %s are ordered by %s, which is not filled in insert order: "+
		"rows written in one transaction, or by two transactions that got the same %s, may arrive in either order; %s",
		l.OrderBy, l.ID.Name, l.OrderBy, fix)
}
