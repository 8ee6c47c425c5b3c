package bench

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/fixtures"
	"github.com/outbox-relay/outbox-relay/internal/layout"
)

// spec is one outbox table the drain workload measures: a layout of the
// benchmark's own (--layout) or a preset's table as its team wrote it
// (--preset), with its shape on each driver.
type spec struct {
	name   string // the layout's or the preset's name
	preset bool   // named by --preset
	pg, my *shape // nil: the driver has no such table
}

// shape is a spec's table on one driver: how it is made, how the relay
// reads it, and the rows the prefill loads.
type shape struct {
	// table is the table's name: on PostgreSQL in the run's schema, as SQL
	// (quoted where it must be); on MySQL the prefix of the run's table.
	table string
	// preset is the relay's preset for the table, or "" for layout.
	preset string
	layout layout.Spec
	// ddl makes the table: %[1]s is the schema (PostgreSQL, whose
	// statements also run with it as search_path) or the table's name
	// (MySQL). Empty when the relay's own migrations make it (manage_table).
	ddl string
	// extra are other tables of the shape that the claims write (PostgreSQL):
	// analyzed, emptied and left without autovacuum alongside the table.
	extra []string
	cols  []string
	row   func(g *rowGen, i int) []any
}

// rowGen makes the prefill's rows: row i's key is one of keys, its
// payload about size bytes of JSON, its time t0 plus i steps.
type rowGen struct {
	keys  int
	size  int
	topic string
	t0    time.Time
	pad   string
}

func newRowGen(n, keys, size int, topic string) *rowGen {
	// Times end a minute ago, a millisecond a row at most.
	t0 := time.Now().UTC().Add(-time.Duration(n)*time.Millisecond - time.Minute).Truncate(time.Millisecond)
	return &rowGen{keys: max(keys, 1), size: size, topic: topic, t0: t0, pad: strings.Repeat("x", size)}
}

func (g *rowGen) key(i int) string { return "key-" + strconv.Itoa(i%g.keys) }

// uuidKey is key i as a UUID, for the seeds' UUID aggregate columns.
func (g *rowGen) uuidKey(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i%g.keys) }

// payload is row i's event: its sequence number and key, padded to size.
func (g *rowGen) payload(i int, key string) string {
	return g.padded(`{"seq":` + strconv.Itoa(i) + `,"key":"` + key + `","pad":"`)
}

// padded closes a JSON object whose last member is an open string, so
// that the whole is size bytes.
func (g *rowGen) padded(prefix string) string {
	return prefix + g.pad[:min(max(g.size-len(prefix)-2, 0), len(g.pad))] + `"}`
}

func (g *rowGen) at(i int, step time.Duration) time.Time { return g.t0.Add(time.Duration(i) * step) }

// deliveredAt is when history row i was delivered: a second after its
// time, still in the past.
func (g *rowGen) deliveredAt(i int) time.Time { return g.at(i, time.Millisecond).Add(time.Second) }

// randomUUID is a version 4 UUID, as gen_random_uuid() or an
// application's would be.
func randomUUID() string {
	a, b := rand.Uint64(), rand.Uint64()
	a = a&^0xf000 | 0x4000
	b = b&^(0xc<<60) | 0x8<<60
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", a>>32, a>>16&0xffff, a&0xffff, b>>48, b&0xffffffffffff)
}

// The benchmark's own layouts: delete (rows deleted on delivery) and mark
// (a published flag); both keyed by aggregate_id, in id order.
var (
	benchLayout = layout.Spec{
		ID: "id", Payload: "payload", PayloadFormat: "json", Key: "{aggregate_id}",
		EventType: "event_type", CreatedAt: "created_at", OrderBy: "id",
	}
	benchCols = []string{"aggregate_id", "event_type", "payload"}
)

func benchRow(g *rowGen, i int) []any {
	k := g.key(i)
	return []any{k, "bench.event", g.payload(i, k)}
}

func withState(l layout.Spec, s layout.State) layout.Spec { l.State = s; return l }

const pgBenchTable = `CREATE TABLE %[1]s.outbox (
  id BIGSERIAL PRIMARY KEY,
  aggregate_id TEXT NOT NULL,
  event_type TEXT NOT NULL,
  payload JSONB NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  published BOOLEAN NOT NULL DEFAULT false,
  published_at TIMESTAMPTZ
);`

var (
	deleteLayoutPG = &shape{table: "outbox", ddl: pgBenchTable, cols: benchCols, row: benchRow,
		layout: withState(benchLayout, layout.State{Mode: "delete"})}
	markLayoutPG = &shape{table: "outbox", cols: benchCols, row: benchRow,
		ddl:    pgBenchTable + "\nCREATE INDEX outbox_pending ON %[1]s.outbox (id) WHERE published = false;",
		layout: withState(benchLayout, layout.State{Mode: "flag", Flag: "published", PublishedAt: []string{"published_at"}})}
	deleteLayoutMy = &shape{table: "outbox", cols: benchCols, row: benchRow,
		layout: withState(benchLayout, layout.State{Mode: "delete"}),
		ddl: `CREATE TABLE %[1]s (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  aggregate_id VARCHAR(64) NOT NULL,
  event_type VARCHAR(64) NOT NULL,
  payload JSON NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
)`}
)

// The presets' tables. Where a seed has a PostgreSQL table only
// (internal/fixtures), the MySQL one is its translation: the same columns
// and indexes, a partial index becoming one that leads with its condition's
// column, UUIDs in CHAR(36), Prisma's MySQL migration for seed 002's model.
var (
	deletePreset = shapes(&shape{table: "outbox", preset: "delete",
		ddl:  "CREATE TABLE %[1]s.outbox (\n  id bigserial PRIMARY KEY,\n  topic text,\n  key text,\n  payload jsonb NOT NULL\n);",
		cols: []string{"topic", "key", "payload"},
		row: func(g *rowGen, i int) []any {
			k := g.key(i)
			return []any{g.topic, k, g.payload(i, k)}
		}}, "CREATE TABLE %[1]s (\n  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,\n  topic VARCHAR(255) NULL,\n  `key` VARCHAR(255) NULL,\n  payload JSON NOT NULL\n)")
	// Seed 000's journey_matcher.outbox, in the run's schema.
	publishedFlagPreset = shapes(&shape{table: "outbox", preset: "published-flag",
		ddl:  strings.NewReplacer("journey_matcher", "%[1]s", "whatsapp_handler", "%[1]s").Replace(fixtures.Seed000),
		cols: []string{"id", "aggregate_id", "aggregate_type", "event_type", "payload", "correlation_id", "created_at"},
		row: func(g *rowGen, i int) []any {
			k := g.uuidKey(i)
			return []any{randomUUID(), k, "journey", "journey.created", g.payload(i, k), randomUUID(), g.at(i, time.Microsecond)}
		}}, `CREATE TABLE %[1]s (
  id CHAR(36) NOT NULL PRIMARY KEY,
  aggregate_id CHAR(36) NOT NULL,
  aggregate_type VARCHAR(100) NOT NULL,
  event_type VARCHAR(100) NOT NULL,
  payload JSON NOT NULL,
  correlation_id CHAR(36) NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  published_at DATETIME(6) NULL,
  published BOOLEAN NOT NULL DEFAULT FALSE,
  KEY idx_outbox_unpublished (published, created_at)
)`)
	// Seed 001's outbox (unqualified: made with the run's schema as
	// search_path).
	statusPreset = shapes(&shape{table: "outbox", preset: "status", ddl: fixtures.Seed001,
		cols: []string{"id", "aggregate_type", "aggregate_id", "event_type", "topic", "partition_key", "payload", "headers", "created_at"},
		row: func(g *rowGen, i int) []any {
			k := g.uuidKey(i)
			return []any{randomUUID(), "order", k, "order.created", g.topic, k, g.payload(i, k), "{}", g.at(i, time.Microsecond)}
		}}, `CREATE TABLE %[1]s (
  id CHAR(36) NOT NULL PRIMARY KEY,
  aggregate_type VARCHAR(100) NOT NULL,
  aggregate_id CHAR(36) NOT NULL,
  event_type VARCHAR(100) NOT NULL,
  topic VARCHAR(100) NOT NULL,
  partition_key VARCHAR(100) NULL,
  payload JSON NOT NULL,
  headers JSON NULL,
  status ENUM('pending', 'published', 'failed') NOT NULL DEFAULT 'pending',
  retry_count SMALLINT NOT NULL DEFAULT 0,
  max_retries SMALLINT NOT NULL DEFAULT 5,
  published_at DATETIME(6) NULL,
  expires_at DATETIME(6) NOT NULL DEFAULT (CURRENT_TIMESTAMP(6) + INTERVAL 24 HOUR),
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY idx_outbox_status_created (status, created_at),
  KEY idx_outbox_aggregate (aggregate_type, aggregate_id),
  KEY idx_outbox_expires (status, expires_at)
)`)
	// Seed 002's tenant."OutboxEvent", its enum in the run's schema too.
	prismaPreset = shapes(&shape{table: `"OutboxEvent"`, preset: "prisma",
		ddl:  strings.NewReplacer(`"core"`, `%[1]s`, `"tenant"`, `%[1]s`).Replace(fixtures.Seed002),
		cols: []string{"id", "tenantId", "eventType", "aggregateType", "aggregateId", "payload", "createdAt"},
		row: func(g *rowGen, i int) []any {
			k := g.key(i)
			return []any{randomUUID(), "tenant-" + strconv.Itoa(i%8), "order.created", "order", k, g.payload(i, k), g.at(i, time.Millisecond)}
		}}, "CREATE TABLE %[1]s (\n  `id` VARCHAR(191) NOT NULL,\n  `tenantId` VARCHAR(191) NOT NULL,\n  `eventType` VARCHAR(191) NOT NULL,\n"+
		"  `aggregateType` VARCHAR(191) NOT NULL,\n  `aggregateId` VARCHAR(191) NOT NULL,\n  `payload` JSON NOT NULL,\n"+
		"  `status` ENUM('pending', 'published', 'failed') NOT NULL DEFAULT 'pending',\n  `error` TEXT NULL,\n"+
		"  `createdAt` DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),\n  `publishedAt` DATETIME(3) NULL,\n"+
		"  INDEX `OutboxEvent_status_createdAt_idx`(`status`, `createdAt`),\n  INDEX `OutboxEvent_tenantId_idx`(`tenantId`),\n"+
		"  INDEX `OutboxEvent_aggregateType_aggregateId_idx`(`aggregateType`, `aggregateId`),\n  PRIMARY KEY (`id`)\n"+
		") DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
	// Seed 004's kafka_outbox: the relay's migrations make it on both.
	kafkaOutboxPreset = shapes(&shape{table: "kafka_outbox", preset: "kafka-outbox",
		cols: []string{"topic", "key", "payload_json"},
		row: func(g *rowGen, i int) []any {
			k := g.key(i)
			return []any{g.topic, k, g.payload(i, k)}
		}}, "")
	// Seed 003's payment queue, made by its migrations; PostgreSQL only.
	paymentQueuePG = &shape{table: "payment_outbox_pending", preset: "payment-queue", extra: []string{"payment_outbox_attempts"},
		cols: []string{"instruction_id", "participant_id", "sequence_id", "idempotency_key", "rail_type", "payload"},
		row: func(g *rowGen, i int) []any {
			return []any{"ins-" + strconv.Itoa(i), "participant-" + strconv.Itoa(i%g.keys), int64(i/g.keys + 1), "key-" + strconv.Itoa(i), "sepa",
				g.padded(`{"amount":` + strconv.Itoa(100+i%1000) + `,"currency":"EUR","destination":{"account":"DE89370400440532013000"},"pad":"`)}
		}}
)

// shapes is a preset's PostgreSQL shape pg and its MySQL twin, the same
// but for myDDL.
func shapes(pg *shape, myDDL string) [2]*shape {
	my := *pg
	my.ddl = myDDL
	my.table = strings.Trim(pg.table, `"`)
	return [2]*shape{pg, &my}
}

// layoutSpecs are the --layout tables: mark on MySQL is seed 004's
// kafka_outbox; queue is seed 003's payment queue.
var layoutSpecs = map[string]*spec{
	"delete": {name: "delete", pg: deleteLayoutPG, my: deleteLayoutMy},
	"mark":   {name: "mark", pg: markLayoutPG, my: kafkaOutboxPreset[1]},
	"queue":  {name: "queue", pg: paymentQueuePG},
}

// presetSpecs are the --preset tables, one per preset of the relay.
var presetSpecs = map[string]*spec{
	"delete":         {name: "delete", preset: true, pg: deletePreset[0], my: deletePreset[1]},
	"published-flag": {name: "published-flag", preset: true, pg: publishedFlagPreset[0], my: publishedFlagPreset[1]},
	"status":         {name: "status", preset: true, pg: statusPreset[0], my: statusPreset[1]},
	"prisma":         {name: "prisma", preset: true, pg: prismaPreset[0], my: prismaPreset[1]},
	"kafka-outbox":   {name: "kafka-outbox", preset: true, pg: kafkaOutboxPreset[0], my: kafkaOutboxPreset[1]},
	"payment-queue":  {name: "payment-queue", preset: true, pg: paymentQueuePG},
}

// drainSpecs are the tables a drain measures: o.Presets ("all": every
// preset the driver has) or else o.Layouts.
func drainSpecs(o Options) ([]*spec, error) {
	mysql := o.Driver == "mysql"
	var out []*spec
	if len(o.Presets) == 0 {
		for _, l := range o.Layouts {
			sp, ok := layoutSpecs[l]
			if !ok {
				return nil, fmt.Errorf("unknown layout %q (have: delete, mark, queue)", l)
			}
			if mysql && sp.my == nil {
				return nil, fmt.Errorf("layout %s runs the drain workload on PostgreSQL only", l)
			}
			out = append(out, sp)
		}
		return out, nil
	}
	for _, p := range o.Presets {
		if p == "all" {
			for _, name := range layout.PresetNames() {
				if sp := presetSpecs[name]; sp != nil && (!mysql || sp.my != nil) && !slices.Contains(out, sp) {
					out = append(out, sp)
				}
			}
			continue
		}
		sp, ok := presetSpecs[p]
		if !ok {
			return nil, fmt.Errorf("unknown preset %q (have: %s, or all)", p, strings.Join(layout.PresetNames(), ", "))
		}
		if mysql && sp.my == nil {
			return nil, fmt.Errorf("preset %s has no MySQL or MariaDB table: its queue (seed 003) is PostgreSQL's (functions, NOTIFY), and the mysql driver claims outbox tables only (delete, flag, timestamp and status modes)", p)
		}
		if !slices.Contains(out, sp) {
			out = append(out, sp)
		}
	}
	return out, nil
}
