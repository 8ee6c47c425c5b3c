package bench

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// countedNet is the network name of DSNs whose connections count the
// statements they send (see countedConn). The relay under test connects
// through it; the benchmark's own loading and counters do not.
const countedNet = "outbox_bench_tcp"

var registerCountedNet sync.Once

// myStmts counts what the relay's MySQL connections send.
var myStmts mysqlCounter

// mysqlCounter counts the commands the relay's connections send: every
// statement (COM_QUERY; prepared statements' executions too), and among
// them the COMMITs and ROLLBACKs, which end the relay's transactions.
type mysqlCounter struct{ stmts, xacts atomic.Int64 }

// countedDSN returns dsn connecting through countedNet, registering it
// first.
func countedDSN(dsn string) (string, error) {
	registerCountedNet.Do(func() {
		gomysql.RegisterDialContext(countedNet, func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return &countedConn{Conn: c, n: &myStmts}, nil
		})
	})
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("parse mysql dsn: %w", err)
	}
	if cfg.Net != "tcp" {
		return "", fmt.Errorf("mysql dsn: the benchmark connects over tcp, not %s", cfg.Net)
	}
	if (cfg.TLSConfig != "" && cfg.TLSConfig != "false") || cfg.TLS != nil || strings.Contains(cfg.FormatDSN(), "compress=true") {
		return "", fmt.Errorf("mysql dsn: the benchmark counts the relay's statements on its connections, which it cannot read through TLS or compression: drop tls and compress")
	}
	cfg.Net = countedNet
	return cfg.FormatDSN(), nil
}

// countedConn inspects what the driver writes: go-sql-driver writes each
// protocol packet with one Write (no compression, no TLS on the counted
// connections), and a command is the packet of sequence number 0 whose
// first byte names it.
type countedConn struct {
	net.Conn
	n *mysqlCounter
}

const (
	comQuery       = 0x03
	comStmtExecute = 0x17
)

func (c *countedConn) Write(b []byte) (int, error) {
	if len(b) > 4 && b[3] == 0 {
		switch b[4] {
		case comQuery:
			c.n.stmts.Add(1)
			q := b[5:]
			if hasPrefixFold(q, "COMMIT") || hasPrefixFold(q, "ROLLBACK") {
				c.n.xacts.Add(1)
			}
		case comStmtExecute:
			c.n.stmts.Add(1)
		}
	}
	return c.Conn.Write(b)
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && bytes.EqualFold(b[:len(prefix)], []byte(prefix))
}

// mariadbCPU is the MariaDB (or MySQL) server process's CPU time, all its
// threads, when /proc shows it.
func mariadbCPU() time.Duration { return serverCPU("mariadbd")() + serverCPU("mysqld")() }

// redoWritten reads InnoDB's count of redo log bytes written, server-wide.
func redoWritten(ctx context.Context, db *sql.DB) int64 {
	var name string
	var n int64
	_ = db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_os_log_written'").Scan(&name, &n)
	return n
}
