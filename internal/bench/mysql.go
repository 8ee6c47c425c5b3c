package bench

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// DefaultMySQLDSN is the local MariaDB the benchmark uses with driver mysql.
const DefaultMySQLDSN = "root@tcp(127.0.0.1:3306)/"

// myRun is a run on MySQL or MariaDB: a database of its own, dropped at the
// end, and a plain pool on it for loading and reading counters.
type myRun struct {
	name     string  // the run's database
	db       *sql.DB // plain connections, not counted
	relayDSN string  // the relay's DSN: the run's database, counted connections
}

// openMyRun creates the run's database on the server at dsn.
func openMyRun(ctx context.Context, dsn string) (*myRun, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse mysql dsn: %w", err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", cfg.Addr, err)
	}
	defer admin.Close()
	name := fmt.Sprintf("outbox_bench_%06x", rand.N(1<<24))
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		return nil, fmt.Errorf("create the run's database on %s: %w", cfg.Addr, err)
	}
	cfg.DBName = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	r := &myRun{name: name, db: db}
	if r.relayDSN, err = countedDSN(cfg.FormatDSN()); err != nil {
		r.close(ctx)
		return nil, err
	}
	return r, nil
}

// close drops the run's database and whatever it still holds.
func (r *myRun) close(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	_, _ = r.db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+r.name)
	_ = r.db.Close()
}

// killQueries ends the statements still running in the run's database on
// other connections: the server runs a statement on after its client gave
// up on it and closed the connection.
func (r *myRun) killQueries(ctx context.Context) {
	rows, err := r.db.QueryContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST
WHERE DB = ? AND ID <> CONNECTION_ID() AND COMMAND IN ('Query', 'Execute')`, r.name)
	if err != nil {
		return
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if rows.Scan(&id) == nil {
			ids = append(ids, id)
		}
	}
	_ = rows.Close()
	for _, id := range ids {
		_, _ = r.db.ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(id, 10))
	}
}

// myTable is the benchmark's outbox table in the run's database, of one
// shape; a table of a name of its own, so that the relay's migrations make
// a fresh kafka_outbox for each.
type myTable struct {
	name   string
	layout string // the layout's or preset's name, for the report
	sh     *shape
}

func newMyTable(layout string, sh *shape) myTable {
	return myTable{name: fmt.Sprintf("%s_%06x", sh.table, rand.N(1<<24)), layout: layout, sh: sh}
}

// create makes the table; the relay's migrations make kafka_outbox
// (openMyRelay).
func (t myTable) create(ctx context.Context, db *sql.DB) error {
	if t.sh.ddl == "" {
		return nil
	}
	if _, err := db.ExecContext(ctx, expand(t.sh.ddl, "`"+t.name+"`")); err != nil {
		return fmt.Errorf("create benchmark table %s: %w", t.layout, err)
	}
	return nil
}

// statsFixed makes InnoDB keep the table's statistics where they are
// (persistent, not recalculated after changes): only ANALYZE TABLE updates
// them. Applied right after the table is made, while it is empty.
func (t myTable) statsFixed(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, "ALTER TABLE `"+t.name+"` STATS_PERSISTENT=1, STATS_AUTO_RECALC=0"); err != nil {
		return fmt.Errorf("fix the statistics of %s: %w", t.name, err)
	}
	return nil
}

// source is the relay's source for the table.
func (t myTable) source(database, topic string, batch, pipeline int, ordering bool) config.Source {
	name := t.name
	if strings.ToLower(name) != name {
		name = `"` + name + `"`
	}
	s := config.Source{Name: "bench", Database: "bench", Table: database + "." + name, BatchSize: batch, Pipeline: pipeline, Ordering: &ordering}
	if t.sh.preset == "" {
		s.Layout = t.sh.layout
		s.Layout.Topic = topic
		return s
	}
	s.Preset, s.Topic = t.sh.preset, topic
	return s
}

// fill loads history delivered rows (deliveredState) and then n pending
// ones for topic, each with one LOAD DATA LOCAL INFILE from a reader (one
// statement, one transaction): keys spread over keys, payloads of about
// payloadBytes bytes of JSON. The history comes first, so that it is older
// and, in the claim's order, before the backlog. With analyze, ANALYZE
// TABLE follows.
func (t myTable) fill(ctx context.Context, db *sql.DB, topic string, history, n, keys, payloadBytes int, analyze bool) error {
	g := newRowGen(history+n, keys, payloadBytes, topic)
	if history > 0 {
		d, err := t.delivered(ctx, db)
		if err != nil {
			return err
		}
		row := func(i int) []any { return append(t.sh.row(g, i), d.values(i, g.deliveredAt(i))...) }
		if err := t.load(ctx, db, append(slices.Clip(t.sh.cols), d.cols...), 0, history, row); err != nil {
			return fmt.Errorf("prefill the history: %w", err)
		}
	}
	if err := t.load(ctx, db, t.sh.cols, history, history+n, func(i int) []any { return t.sh.row(g, i) }); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	if !analyze {
		return nil
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE `"+t.name+"`"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// load loads rows from to to (row gives each) into cols with one LOAD
// DATA LOCAL INFILE from a reader.
func (t myTable) load(ctx context.Context, db *sql.DB, cols []string, from, to int, row func(i int) []any) error {
	handler := "outbox_bench_" + t.name
	gomysql.RegisterReaderHandler(handler, func() io.Reader {
		pr, pw := io.Pipe()
		go func() {
			w := bufio.NewWriterSize(pw, 1<<16)
			for i := from; i < to; i++ {
				for j, v := range row(i) {
					if j > 0 {
						_ = w.WriteByte('\t')
					}
					_, _ = w.WriteString(loadText(v))
				}
				_ = w.WriteByte('\n')
			}
			pw.CloseWithError(w.Flush())
		}()
		return pr
	})
	defer gomysql.DeregisterReaderHandler(handler)
	_, err := db.ExecContext(ctx, "LOAD DATA LOCAL INFILE 'Reader::"+handler+"' INTO TABLE `"+t.name+"` (`"+strings.Join(cols, "`, `")+"`)")
	return err
}

// delivered is the table's delivered state (deliveredState).
func (t myTable) delivered(ctx context.Context, db *sql.DB) (delivered, error) {
	rows, err := db.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", t.name)
	if err != nil {
		return delivered{}, fmt.Errorf("read the columns of %s: %w", t.name, err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return delivered{}, fmt.Errorf("read the columns of %s: %w", t.name, err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return delivered{}, fmt.Errorf("read the columns of %s: %w", t.name, err)
	}
	d, err := deliveredState(t.sh.spec(), func(c string) bool { return slices.Contains(cols, c) })
	if err != nil {
		return d, fmt.Errorf("%s: %w", t.layout, err)
	}
	return d, nil
}

// counts are the table's rows and, of them, those delivered (their
// published-at column set), after a relay phase.
func (t myTable) counts(ctx context.Context, db *sql.DB) (rows, done int, err error) {
	d, err := t.delivered(ctx, db)
	if err != nil {
		return 0, 0, err
	}
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(`"+d.publishedAt+"`) FROM `"+t.name+"`").Scan(&rows, &done); err != nil {
		return 0, 0, fmt.Errorf("count the rows of %s: %w", t.name, err)
	}
	return rows, done, nil
}

// loadText is v as LOAD DATA reads it (the values have no tabs, newlines
// or backslashes).
func loadText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case time.Time:
		return v.UTC().Format("2006-01-02 15:04:05.000000")
	case nil:
		return `\N`
	default:
		return fmt.Sprint(v)
	}
}

// plannerRows is the table's row count in InnoDB's persistent statistics
// (mysql.innodb_table_stats), else information_schema's estimate.
func (t myTable) plannerRows(ctx context.Context, db *sql.DB, database string) *int64 {
	var n int64
	err := db.QueryRowContext(ctx, "SELECT n_rows FROM mysql.innodb_table_stats WHERE database_name = ? AND table_name = ?", database, t.name).Scan(&n)
	if err != nil {
		err = db.QueryRowContext(ctx, "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", database, t.name).Scan(&n)
	}
	if err != nil {
		return nil
	}
	return &n
}

// reset empties the table for the next measurement.
func (t myTable) reset(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, "TRUNCATE TABLE `"+t.name+"`"); err != nil {
		return fmt.Errorf("empty %s: %w", t.name, err)
	}
	return nil
}

func (t myTable) drop(ctx context.Context, db *sql.DB) {
	_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS `"+t.name+"`, `"+t.name+"_goose_version`")
}
