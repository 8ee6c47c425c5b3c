package bench

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/layout"
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

// myTable is the benchmark's outbox table in the run's database: layout
// delete is a table of the benchmark's own whose rows the relay deletes;
// layout mark is seed 004's kafka_outbox, created by the relay's own
// migrations (preset kafka-outbox), whose rows get push_completed_at.
type myTable struct {
	name   string
	layout string // delete|mark
}

func newMyTable(layout string) myTable {
	sfx := fmt.Sprintf("%06x", rand.N(1<<24))
	if layout == "mark" {
		return myTable{name: "kafka_outbox_" + sfx, layout: layout}
	}
	return myTable{name: "outbox_" + sfx, layout: layout}
}

// create makes the delete layout's table; the relay migrates the mark
// layout's.
func (t myTable) create(ctx context.Context, db *sql.DB) error {
	if t.layout == "mark" {
		return nil
	}
	_, err := db.ExecContext(ctx, `CREATE TABLE `+t.name+` (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  aggregate_id VARCHAR(64) NOT NULL,
  event_type VARCHAR(64) NOT NULL,
  payload JSON NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
)`)
	if err != nil {
		return fmt.Errorf("create benchmark table: %w", err)
	}
	return nil
}

// source is the relay's source for the table.
func (t myTable) source(database, topic string, batch, pipeline int, ordering bool) config.Source {
	s := config.Source{Name: "bench", Database: "bench", Table: database + "." + t.name, BatchSize: batch, Pipeline: pipeline, Ordering: &ordering}
	if t.layout == "mark" {
		s.Preset = "kafka-outbox"
		return s
	}
	s.Layout = layout.Spec{
		ID: "id", Payload: "payload", PayloadFormat: "json", Topic: topic, Key: "{aggregate_id}",
		EventType: "event_type", CreatedAt: "created_at", OrderBy: "id",
		State: layout.State{Mode: "delete"},
	}
	return s
}

// fill loads n rows with one LOAD DATA LOCAL INFILE from a reader (one
// statement, one transaction): keys spread over keys aggregates, payloads
// of about payloadBytes bytes of JSON, all to topic.
func (t myTable) fill(ctx context.Context, db *sql.DB, topic string, n, keys, payloadBytes int) error {
	pad := strings.Repeat("x", max(payloadBytes-40, 0))
	handler := "outbox_bench_" + t.name
	gomysql.RegisterReaderHandler(handler, func() io.Reader {
		pr, pw := io.Pipe()
		go func() {
			w := bufio.NewWriterSize(pw, 1<<16)
			for i := range n {
				k := "key-" + strconv.Itoa(i%keys)
				payload := `{"seq":` + strconv.Itoa(i) + `,"key":"` + k + `","pad":"` + pad + `"}`
				if t.layout == "mark" {
					_, _ = w.WriteString(topic + "\t" + k + "\t" + payload + "\n")
				} else {
					_, _ = w.WriteString(k + "\tbench.event\t" + payload + "\n")
				}
			}
			pw.CloseWithError(w.Flush())
		}()
		return pr
	})
	defer gomysql.DeregisterReaderHandler(handler)
	cols := "(aggregate_id, event_type, payload)"
	if t.layout == "mark" {
		cols = "(topic, `key`, payload_json)"
	}
	if _, err := db.ExecContext(ctx, "LOAD DATA LOCAL INFILE 'Reader::"+handler+"' INTO TABLE "+t.name+" "+cols); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+t.name); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// reset empties the table for the next measurement.
func (t myTable) reset(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, "TRUNCATE TABLE "+t.name); err != nil {
		return fmt.Errorf("empty %s: %w", t.name, err)
	}
	return nil
}

func (t myTable) drop(ctx context.Context, db *sql.DB) {
	_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t.name+", "+t.name+"_goose_version")
}
