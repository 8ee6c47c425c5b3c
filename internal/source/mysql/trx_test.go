package mysql

import (
	"slices"
	"testing"
	"time"
)

func TestParseTransactions(t *testing.T) {
	t.Parallel()
	const status = `
------------
TRANSACTIONS
------------
Trx id counter 197570
History list length 0
LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION 421394, not started
MySQL thread id 7, OS thread handle 1, query id 1 localhost root
---TRANSACTION (0x7fbdc4b59680), ACTIVE 1 sec
0 lock struct(s), heap size 1128, 0 row lock(s)
MariaDB thread id 15881, OS thread handle 131656790496960, query id 576787 127.0.0.1 root User sleep
DO SLEEP(3)
---TRANSACTION 197569, ACTIVE 12 sec starting index read
2 lock struct(s), heap size 1128, 2 row lock(s)
MySQL thread id 42, OS thread handle 140453014210240, query id 576786 127.0.0.1 root
---TRANSACTION 197560, ACTIVE (PREPARED) 3 sec
MariaDB thread id 43, OS thread handle 1, query id 2 127.0.0.1 root
---TRANSACTION 197550, ACTIVE 5 sec recovered trx
--------
FILE I/O
--------
MariaDB thread id 99, not a transaction
`
	got, err := parseTransactions(status)
	if err != nil {
		t.Fatal(err)
	}
	want := []openTrx{{15881, time.Second}, {42, 12 * time.Second}, {43, 3 * time.Second}}
	if !slices.Equal(got, want) {
		t.Errorf("transactions %v, want %v", got, want)
	}
}
