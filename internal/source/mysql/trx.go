package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// openTrx is a connection with an InnoDB transaction open, and how long it
// has been open (whole seconds, as the server counts them).
type openTrx struct {
	thread int64
	age    time.Duration
}

// trxHeader and trxThread find, in the TRANSACTIONS section of SHOW ENGINE
// INNODB STATUS, each active transaction and the connection running it
// ("MySQL thread id" on MySQL, "MariaDB thread id" on MariaDB).
var (
	trxHeader = regexp.MustCompile(`(?m)^---TRANSACTION [^,\n]*, ACTIVE (?:\(PREPARED\) )?(\d+) sec`)
	trxThread = regexp.MustCompile(`(?:MySQL|MariaDB) thread id (\d+)`)
)

// openTransactions lists the transactions open on the server now, from SHOW
// ENGINE INNODB STATUS (the PROCESS privilege). It does not read
// information_schema.INNODB_TRX: that is a cache refreshed only once nobody
// has read it for a tenth of a second, so sessions polling it (replicas
// taking shards over at once, each looking for its predecessor's
// transactions) can keep it from ever being refreshed, and a transaction
// begun meanwhile is never seen.
func openTransactions(ctx context.Context, db *sql.DB) ([]openTrx, error) {
	var typ, name, status string
	if err := db.QueryRowContext(ctx, "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		return nil, err
	}
	return parseTransactions(status)
}

// parseTransactions reads the active transactions of an InnoDB status.
func parseTransactions(status string) ([]openTrx, error) {
	var out []openTrx
	heads := trxHeader.FindAllStringSubmatchIndex(status, -1)
	for i, h := range heads {
		end := len(status)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		body := status[h[1]:end]
		if next := strings.Index(body, "\n---"); next >= 0 {
			body = body[:next] // the section ends with a line of dashes
		}
		m := trxThread.FindStringSubmatch(body)
		if m == nil {
			continue // a transaction of no connection (a purge, a recovered one)
		}
		thread, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("innodb status: thread id %q: %w", m[1], err)
		}
		secs, err := strconv.ParseInt(status[h[2]:h[3]], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("innodb status: age %q: %w", status[h[2]:h[3]], err)
		}
		out = append(out, openTrx{thread: thread, age: time.Duration(secs) * time.Second})
	}
	return out, nil
}

// ownerConnections keeps, of threads, the connections of the owner whose
// connections hold the locks named by prefix (see ConnOptions.Owner). The
// server answers from its live list of connections and locks.
func ownerConnections(ctx context.Context, db *sql.DB, prefix string, threads []int64) ([]int64, error) {
	if len(threads) == 0 {
		return nil, nil
	}
	args := []any{prefix}
	for _, id := range threads {
		args = append(args, id)
	}
	rows, err := db.QueryContext(ctx, `SELECT p.ID FROM information_schema.PROCESSLIST p
WHERE p.ID <> CONNECTION_ID() AND IS_USED_LOCK(CONCAT(?, p.ID)) = p.ID AND p.ID IN (`+placeholders(len(threads), "")+`)`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
