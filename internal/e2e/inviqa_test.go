package e2e

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// A deployment of inviqa/kafka-outbox-relay switches by its image alone: the
// relay started with no configuration file and that relay's environment
// creates kafka_outbox, publishes its rows (keys, partition keys, headers),
// marks them delivered, dead-letters a bad one, and stops cleanly.
func TestInviqaEnvironmentOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	c := kafkaCluster(t, kfake.SeedTopics(3, "orders", "payments"))
	brokers := c.ListenAddrs()
	col := collect(t, brokers, "orders", "payments")
	bin := buildRelay(t)

	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := u.User.Password()
	db := strings.TrimPrefix(u.Path, "/")
	admin := freeAddr(t)
	env := append(inviqaFreeEnv(),
		"DB_DRIVER=postgres", "DB_HOST="+u.Hostname(), "DB_PORT="+u.Port(), "DB_USER="+u.User.Username(), "DB_PASS="+pass,
		"DB_NAME="+db, "KAFKA_HOST="+strings.Join(brokers, ","), "POLL_FREQUENCY_MS=50", "BATCH_SIZE=100",
		"KAFKA_PUBLISH_ATTEMPTS=3", "WRITE_CONCURRENCY=2", "LOG_LEVEL=info", "NEW_RELIC_APP_NAME=kafka-outbox-relay",
		// The one setting of ours: port 80, the original's, may be taken here.
		"OUTBOX_RELAY_ADMIN_LISTEN="+admin)

	p := &relayProcess{out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "run")
	p.cmd.Dir = t.TempDir() // no relay.yaml there
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("relay output:\n%s", p.out.String())
		}
	})

	waitFor(t, 60*time.Second, "kafka_outbox created by the relay", func() (bool, string) {
		if p.exited() {
			t.Fatalf("relay exited: %v\n%s", p.err, p.out.String())
		}
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'kafka_outbox'`).Scan(&n)
		return n == 1, "not yet"
	})

	// The application inserts only the public columns, as the original's
	// documentation tells it to.
	type row struct{ topic, key, pkey, payload, headers string }
	rows := []row{
		{"orders", "UPDATE-SKU-123", "SKU-123", `{"sku": "SKU-123", "op": "update"}`, `{"trace_id": "t-1"}`},
		{"orders", "DELETE-SKU-123", "SKU-123", `{"sku": "SKU-123", "op": "delete"}`, ``},
		{"orders", "customer-7", "", `{"order": 7}`, ``},
		{"payments", "", "", `{"payment": 1}`, ``},
	}
	var ids []string
	for _, r := range rows {
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO kafka_outbox (topic, payload_json, payload_headers, key, partition_key)
VALUES ($1, $2, $3, $4, $5) RETURNING id::text`, r.topic, r.payload, r.headers, r.key, r.pkey).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var badID string
	if err := pool.QueryRow(ctx, `INSERT INTO kafka_outbox (topic, payload_json) VALUES ('orders', '{"broken":') RETURNING id::text`).
		Scan(&badID); err != nil {
		t.Fatal(err)
	}

	got := distinct(col.waitDistinct(t, len(rows), 30*time.Second))
	for i, r := range rows {
		rec := got[ids[i]]
		if rec == nil {
			t.Fatalf("row %s not published", ids[i])
		}
		if rec.Topic != r.topic || string(rec.Key) != r.key || !jsonEqual(t, rec.Value, []byte(r.payload)) {
			t.Errorf("row %d: topic %q key %q value %s", i, rec.Topic, rec.Key, rec.Value)
		}
		if pk := cmp.Or(r.pkey, r.key); pk != "" && rec.Partition != saramaPartition([]byte(pk), 3) {
			t.Errorf("row %d: partition %d, want %d (sarama's placement) for partition key %q", i, rec.Partition, saramaPartition([]byte(pk), 3), pk)
		}
		if src, _ := header(rec, "outbox_source"); src != db+".kafka_outbox" {
			t.Errorf("row %d: outbox_source %q", i, src)
		}
	}
	if v, _ := header(got[ids[0]], "trace_id"); v != "t-1" {
		t.Errorf("trace_id header %q, want t-1", v)
	}
	if got[ids[0]].Offset > got[ids[1]].Offset || got[ids[0]].Partition != got[ids[1]].Partition {
		t.Error("the update and delete of SKU-123 are not in order on one partition")
	}
	if _, ok := got[badID]; ok {
		t.Error("the row with invalid JSON was published")
	}
	waitFor(t, 10*time.Second, "rows marked delivered and the bad row errored", func() (bool, string) {
		var delivered, errored int
		_ = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE push_completed_at IS NOT NULL AND batch_id IS NOT NULL),
  count(*) FILTER (WHERE errored = 1 AND error_reason LIKE '%invalid payload%' AND id = $1::bigint) FROM kafka_outbox`, badID).
			Scan(&delivered, &errored)
		return delivered == len(rows) && errored == 1, fmt.Sprintf("delivered %d, errored %d", delivered, errored)
	})

	if code, body := httpGet(t, "http://"+admin+"/metrics"); code != 200 || !strings.Contains(body, "outbox") {
		t.Errorf("/metrics on the admin address: %d", code)
	}
	out := p.out.String()
	for _, want := range []string{"configured from the settings of inviqa/kafka-outbox-relay", `"variable":"NEW_RELIC_APP_NAME"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s", want)
		}
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := p.wait(t, 30*time.Second); ws.ExitStatus() != 0 {
		t.Errorf("exit status %d after SIGTERM", ws.ExitStatus())
	}
	p.checkOutput(t)
}

// inviqaFreeEnv is childEnv without any variable of inviqa/kafka-outbox-relay.
func inviqaFreeEnv() []string {
	var env []string
	for _, kv := range childEnv() {
		k, _, _ := strings.Cut(kv, "=")
		inviqa := strings.HasPrefix(k, config.InviqaNewRelicPrefix)
		for _, v := range config.InviqaVars {
			inviqa = inviqa || v.Env == k
		}
		if !inviqa {
			env = append(env, kv)
		}
	}
	return env
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// The kafka_outbox that the original relay created on PostgreSQL (json
// payload and headers, smallint counters, char(36) batch ids, its
// golang-migrate version table) is adopted as it is, rows kept: its pending
// rows are published and a row of its that had errored stays a dead letter.
func TestInviqaAdoptsTheOriginalTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pool := pgtest.NewDB(t)
	// The original relay's three migrations, and its version table.
	if _, err := pool.Exec(ctx, `
CREATE TABLE kafka_outbox(
    id SERIAL PRIMARY KEY,
    batch_id CHAR(36) NULL,
    push_started_at timestamp NULL,
    push_completed_at timestamp NULL,
    topic VARCHAR(255) NOT NULL,
    payload_json json NOT NULL,
    payload_headers json NOT NULL,
    push_attempts smallint NOT NULL DEFAULT 0,
    errored smallint NOT NULL DEFAULT 0,
    error_reason VARCHAR (255) NOT NULL DEFAULT '',
    created_at timestamp DEFAULT CURRENT_TIMESTAMP
);
CREATE INDEX outbox_push_completed_at ON kafka_outbox(push_completed_at);
ALTER TABLE kafka_outbox ADD COLUMN partition_key VARCHAR(255) NOT NULL DEFAULT '';
ALTER TABLE kafka_outbox ADD COLUMN key VARCHAR(255) NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS outbox_batch_query ON kafka_outbox(batch_id, created_at);
CREATE TABLE kafka_outbox_schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL);
INSERT INTO kafka_outbox_schema_migrations VALUES (20220408111504, false);
INSERT INTO kafka_outbox (topic, payload_json, payload_headers, key, push_completed_at, batch_id, push_started_at)
VALUES ('orders', '{"n": 0}', '{}', 'k-0', now() - interval '1 minute', 'b6d1a7a4-52d2-4b0e-9d0e-2b1a3f1c9e77', now() - interval '1 minute');
INSERT INTO kafka_outbox (topic, payload_json, payload_headers, key, push_attempts, errored, error_reason)
VALUES ('orders', '{"n": 1}', '{}', 'k-1', 3, 1, 'kafka: broker unavailable');
INSERT INTO kafka_outbox (topic, payload_json, payload_headers, key, partition_key)
VALUES ('orders', '{"n": 2}', '{"trace_id": "t-2"}', 'k-2', 'p-2');`); err != nil {
		t.Fatal(err)
	}
	c := kafkaCluster(t, kfake.SeedTopics(3, "orders"))
	brokers := c.ListenAddrs()
	col := collect(t, brokers, "orders")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	in, err := config.FromInviqa([]string{"DB_DRIVER=postgres", "DB_HOST=" + u.Hostname(), "DB_PORT=" + u.Port(),
		"DB_USER=" + u.User.Username(), "DB_NAME=" + strings.TrimPrefix(u.Path, "/"), "KAFKA_HOST=" + strings.Join(brokers, ","),
		"POLL_FREQUENCY_MS=50", "OUTBOX_RELAY_ADMIN_LISTEN=off"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, in.Config)

	var id2, id3 string
	if err := pool.QueryRow(ctx, `INSERT INTO kafka_outbox (topic, payload_json, payload_headers, key) VALUES ('orders', '{"n": 3}', '{}', 'k-3')
RETURNING id::text`).Scan(&id3); err != nil {
		t.Fatal(err)
	}
	_ = pool.QueryRow(ctx, `SELECT id::text FROM kafka_outbox WHERE key = 'k-2'`).Scan(&id2)
	got := distinct(col.waitDistinct(t, 2, 30*time.Second))
	if r := got[id2]; r == nil || string(r.Key) != "k-2" || r.Partition != saramaPartition([]byte("p-2"), 3) {
		t.Errorf("pending row of the original relay: %+v", r)
	} else if v, _ := header(r, "trace_id"); v != "t-2" {
		t.Errorf("trace_id %q", v)
	}
	if got[id3] == nil {
		t.Error("a row inserted after the switch was not published")
	}
	time.Sleep(300 * time.Millisecond) // a few more polls
	if n := len(distinct(col.records())); n != 2 {
		t.Errorf("%d events published, want 2 (the delivered and the errored row stay as they are)", n)
	}
	var errored int
	if err := pool.QueryRow(ctx, `SELECT errored FROM kafka_outbox WHERE key = 'k-1'`).Scan(&errored); err != nil || errored != 1 {
		t.Errorf("the errored row: errored=%d, %v", errored, err)
	}
	waitFor(t, 10*time.Second, "both rows marked delivered", func() (bool, string) {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM kafka_outbox WHERE push_completed_at IS NOT NULL AND key IN ('k-2', 'k-3')`).Scan(&n)
		return n == 2, fmt.Sprint(n)
	})
}

// saramaPartition is where sarama's default hash partitioner, which the
// original relay used, puts key among n partitions: FNV-1a read as a signed
// 32-bit number, the absolute value of its remainder.
func saramaPartition(key []byte, n int32) int32 {
	h := uint32(0x811c9dc5)
	for _, c := range key {
		h ^= uint32(c)
		h *= 0x01000193
	}
	p := int32(h) % n
	if p < 0 {
		p = -p
	}
	return p
}
