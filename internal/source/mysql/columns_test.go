package mysql_test

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
)

// TestColumnsSerial guards what tells check that a table proves its order:
// AUTO_INCREMENT columns are filled in insert order, others are not.
func TestColumnsSerial(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE s (a BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, c CHAR(36) DEFAULT (UUID()), d DATETIME(3) DEFAULT CURRENT_TIMESTAMP(3), e BIGINT)")
	cols, err := mysql.Columns(context.Background(), e.db, mysql.Table{Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"a": true, "c": false, "d": false, "e": false}
	for _, c := range cols {
		if c.Serial != want[c.Name] {
			t.Errorf("column %s: serial %v, want %v", c.Name, c.Serial, want[c.Name])
		}
	}
}
