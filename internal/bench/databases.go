package bench

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
)

// The databases of a run on PostgreSQL. Every run works in a database of
// its own (ownDatabase), so that the database-wide counters are the run's
// alone. With --databases N, drain, idle and handover work instead on N
// more, named after it (<run's database>_0001, ...), made on the same
// server and dropped at the end: the relay runs them as one entry of
// several databases (docs/tenants.md), listed (drain, handover) or
// discovered by that pattern (idle).

// checkDatabases says whether o's --databases applies to its workload.
func checkDatabases(o Options) error {
	switch {
	case o.Databases < 0:
		return fmt.Errorf("--databases %d: must be 0 or more", o.Databases)
	case o.Databases == 0:
		return nil
	case o.Driver == "mysql":
		return fmt.Errorf("--databases runs on PostgreSQL only")
	case o.Workload != "drain" && o.Workload != "idle" && o.Workload != "handover":
		return fmt.Errorf("--databases applies to the drain, idle and handover workloads")
	}
	return nil
}

// roomFor fails, saying why, when the server pool is on has fewer than need
// connections free: a relay refused connections midway leaves databases
// out of service, and the run waiting for them.
func roomFor(ctx context.Context, pool *pgxpool.Pool, need int, why string) error {
	var limit, used int
	err := pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
  (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')`).Scan(&limit, &used)
	if err != nil {
		return fmt.Errorf("read max_connections: %w", err)
	}
	return checkRoom(need, limit, used, why)
}

// relayConnections is the most connections replicas relay processes open
// to dbs databases of perDB connections each (max_conns): each also keeps
// one listening for NOTIFY.
func relayConnections(dbs, replicas, perDB int) int { return dbs * max(replicas, 1) * (perDB + 1) }

// checkRoom is roomFor's rule: need connections more must fit under the
// server's limit with used in use.
func checkRoom(need, limit, used int, why string) error {
	if used+need <= limit {
		return nil
	}
	return fmt.Errorf("%s: %d in all, but the server has %d free (max_connections %d, %d in use): ask for fewer, or raise max_connections",
		why, need, max(limit-used, 0), limit, used)
}

// pgDB is one database of the run: its name, its DSN and a pool of the
// benchmark's own on it (for loading and reading; the relay's statements
// are counted on the relay's connections, not on these).
type pgDB struct {
	name string
	dsn  string
	pool *pgxpool.Pool
}

// pgDBs are the databases a workload works on: the run's own alone, or
// those --databases made.
type pgDBs []pgDB

func (dbs pgDBs) names() []string {
	out := make([]string, len(dbs))
	for i, db := range dbs {
		out[i] = db.name
	}
	return out
}

func (dbs pgDBs) dsns() []string {
	out := make([]string, len(dbs))
	for i, db := range dbs {
		out[i] = db.dsn
	}
	return out
}

// each runs fn on every database (the i-th of dbs) in turn, up to the
// first error.
func (dbs pgDBs) each(fn func(i int, db pgDB) error) error {
	for i, db := range dbs {
		if err := fn(i, db); err != nil {
			return fmt.Errorf("database %s: %w", db.name, err)
		}
	}
	return nil
}

// counters reads the counters around a measurement: the server's WAL
// position and the transactions of every database, summed.
func (dbs pgDBs) counters(ctx context.Context) (dbCounters, error) {
	return readCounters(ctx, dbs[0].pool, dbs.names()...)
}

// deadTuples sums the dead tuples of schema's tables over the databases.
func (dbs pgDBs) deadTuples(ctx context.Context, schema string) int64 {
	var n int64
	for _, db := range dbs {
		n += deadTuples(ctx, db.pool, schema)
	}
	return n
}

// dropSchema drops schema, and all it holds, in every database.
func (dbs pgDBs) dropSchema(ctx context.Context, schema string) {
	for _, db := range dbs {
		_, _ = db.pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	}
}

// closePools closes the benchmark's pools (the databases stay): a run of
// many databases that needs none keeps the server's connections for the
// relay.
func (dbs pgDBs) closePools() {
	for _, db := range dbs {
		db.pool.Close()
	}
}

// ownDatabase creates a database for the run, so that the database-wide
// counters (transactions, idle queries) are the run's alone, and returns it
// with a pool on it. Without the privilege to create one, the run uses
// dsn's database. drop closes the pool and drops the database.
func ownDatabase(ctx context.Context, dsn string) (db pgDB, drop func(), err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return db, nil, fmt.Errorf("connect to %s: %w", dsn, err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("outbox_bench_%06x", rand.N(1<<24))
	dsns, dropDB, err := createDatabases(ctx, conn, dsn, []string{name})
	if err != nil {
		name, dsns, dropDB = conn.Config().Database, []string{dsn}, func() {}
	}
	db = pgDB{name: name, dsn: dsns[0]}
	if db.pool, err = openPool(ctx, db.dsn, 40); err != nil { // 40: the load generator's producers
		dropDB()
		return db, nil, err
	}
	return db, func() { db.pool.Close(); dropDB() }, nil
}

// moreDatabases makes n databases named after the run's own database
// (own_0001, ...) on its server, each with a pool of the benchmark's.
// drop closes the pools and drops the databases.
func moreDatabases(ctx context.Context, own pgDB, n int) (pgDBs, func(), error) {
	conn, err := pgx.Connect(ctx, own.dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", own.dsn, err)
	}
	defer conn.Close(ctx)
	names := make([]string, n)
	for i := range names {
		names[i] = memberName(own.name, i)
	}
	dsns, dropDBs, err := createDatabases(ctx, conn, own.dsn, names)
	if err != nil {
		return nil, nil, fmt.Errorf("--databases %d: %w", n, err)
	}
	dbs := make(pgDBs, n)
	drop := func() { dbs.closePools(); dropDBs() }
	for i := range dbs {
		dbs[i] = pgDB{name: names[i], dsn: dsns[i]}
		if dbs[i].pool, err = openPool(ctx, dsns[i], 4); err != nil {
			dbs = dbs[:i]
			drop()
			return nil, nil, err
		}
	}
	return dbs, drop, nil
}

// workDatabases are the databases drain and handover work on: the run's
// own, or with o.Databases that many more, once the server is found to
// have room for the relay's connections to them. drop drops those made.
func workDatabases(ctx context.Context, own pgDB, o Options) (pgDBs, func(), error) {
	if o.Databases == 0 || o.Workload != "drain" && o.Workload != "handover" {
		return pgDBs{own}, func() {}, nil
	}
	// The relay's (with handover, a replica more while one is replaced),
	// and a connection of the benchmark's own to each database.
	replicas := o.Replicas
	if o.Workload == "handover" {
		replicas++
	}
	need := relayConnections(o.Databases, replicas, o.maxConns()) + o.Databases
	why := fmt.Sprintf("--databases %d: each replica may open max_conns (%d) and a listening connection to each database", o.Databases, o.maxConns())
	if err := roomFor(ctx, own.pool, need, why); err != nil {
		return nil, nil, err
	}
	return moreDatabases(ctx, own, o.Databases)
}

// memberName is the name of the i-th database --databases makes for the
// run whose own database is own; memberPattern matches them all and no
// other (a discovery glob).
func memberName(own string, i int) string { return fmt.Sprintf("%s_%04d", own, i+1) }

func memberPattern(own string) string { return own + "_*" }

// createDatabases creates the databases names on the server conn is
// connected to (dsn names it) and returns a DSN for each; drop drops them,
// ending their sessions. A failure drops those already made.
func createDatabases(ctx context.Context, conn *pgx.Conn, dsn string, names []string) (dsns []string, drop func(), err error) {
	var made []string
	drop = func() {
		if len(made) == 0 {
			return
		}
		ctx := context.WithoutCancel(ctx)
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		for _, name := range made {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		}
	}
	for _, name := range names {
		d, err := postgres.WithDatabase(dsn, name)
		if err != nil {
			drop()
			return nil, nil, err
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			drop()
			return nil, nil, fmt.Errorf("create database %s: %w", name, err)
		}
		made = append(made, name)
		dsns = append(dsns, d)
	}
	return dsns, drop, nil
}

func openPool(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("dsn: %w", err)
	}
	pc.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return pool, nil
}

// share is database i's part of n rows spread over dbs databases: as even
// as can be, the first ones one more.
func share(n, i, dbs int) int {
	if dbs <= 1 {
		return n
	}
	s := n / dbs
	if i < n%dbs {
		s++
	}
	return s
}
