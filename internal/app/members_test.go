package app

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/source"
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
)

// enumDriver names databases by the text after the last "/" of a DSN, and
// lists those of its server as they are set.
type enumDriver struct {
	driver.Driver
	listed []string
	got    driver.ListParams
}

var enum = &enumDriver{}

func init() { driver.Register("fake-enum", enum) }

func (d *enumDriver) DatabaseName(dsn string) (string, error) {
	i := strings.LastIndexByte(dsn, '/')
	if i < 0 || i == len(dsn)-1 {
		return "", errors.New("the connection string names no database")
	}
	return dsn[i+1:], nil
}

func (d *enumDriver) WithDatabase(dsn, name string) (string, error) {
	return dsn[:strings.LastIndexByte(dsn, '/')+1] + name, nil
}

func (d *enumDriver) ListDatabases(_ context.Context, p driver.ListParams) ([]string, error) {
	d.got = p
	return d.listed, nil
}

// TestFindMembers: a listed entry's members are named after the database
// each DSN names (two naming the same one is an error naming both); a
// discovery entry's are those its server lists that its pattern matches,
// each reached at the server's DSN pointed at it.
func TestFindMembers(t *testing.T) {
	cfg := &config.Config{RelaySchema: "relay", Databases: map[string]config.Database{
		"shards": {Driver: "fake-enum", DSNs: []string{"fake://eu/orders_eu", "fake://us/orders_us"}},
		"twice":  {Driver: "fake-enum", DSNs: []string{"fake://eu/orders", "fake://us/orders"}},
		"tenants": {Driver: "fake-enum", DSN: "fake://db/postgres",
			Discover: &config.DatabaseDiscover{Pattern: "tenant_[0-9]*"}},
		"registry": {Driver: "fake-enum", DSN: "fake://db/registry",
			Discover: &config.DatabaseDiscover{Query: "SELECT name FROM tenants"}},
	}}
	cfg.ApplyDefaults()
	names := func(ms []config.Member) (out []string) {
		for _, m := range ms {
			out = append(out, m.Name+"="+m.Database.DSN)
		}
		return out
	}
	ctx := context.Background()

	ms, err := FindMembers(ctx, cfg, "shards")
	if want := []string{"shards/orders_eu=fake://eu/orders_eu", "shards/orders_us=fake://us/orders_us"}; err != nil || !slices.Equal(names(ms), want) {
		t.Errorf("shards: %v, %v; want %v", names(ms), err, want)
	}
	if _, err := FindMembers(ctx, cfg, "twice"); err == nil || !strings.Contains(err.Error(), `databases.twice.dsns[1]: names database "orders", as dsns[0] does`) {
		t.Errorf("twice: %v", err)
	}

	enum.listed = []string{"postgres", "tenant_1", "tenant_2", "tenant_x", "tenant_1"}
	ms, err = FindMembers(ctx, cfg, "tenants")
	if want := []string{"tenants/tenant_1=fake://db/tenant_1", "tenants/tenant_2=fake://db/tenant_2"}; err != nil || !slices.Equal(names(ms), want) {
		t.Errorf("tenants: %v, %v; want %v", names(ms), err, want)
	}
	if enum.got.DSN != "fake://db/postgres" || enum.got.Query != "" || enum.got.RelaySchema != "relay" {
		t.Errorf("listed with %+v", enum.got)
	}
	if ms[0].Database.MaxConns != config.DefaultMemberMaxConns || ms[0].Database.Discover != nil {
		t.Errorf("a member's settings: %+v", ms[0].Database)
	}
	ms, err = FindMembers(ctx, cfg, "registry")
	if err != nil || len(ms) != 4 || enum.got.Query != "SELECT name FROM tenants" {
		t.Errorf("registry: %v, %v (listed with %+v); want every name the query returns", names(ms), err, enum.got)
	}
	if _, err := FindMembers(ctx, cfg, "nope"); err == nil {
		t.Error("an unknown entry: no error")
	}
}

// TestDatabaseDown: a source whose database is out of service is stuck
// with cause database_down at once, naming the database and why, whatever
// its lease; back in service, it stands as its lease says. A placeholder
// (its database being taken up) is starting.
func TestDatabaseDown(t *testing.T) {
	cs := config.Source{Name: "orders@tenants/t1", Database: "tenants/t1", Sink: "kafka",
		Readiness: config.Readiness{MaxClaimFailure: config.Duration(30 * time.Second)}}
	now := time.Now()
	r := newRunningSource(cs, []Shard{{}})
	r.health = &dbHealth{}
	r.shards[0].holding()
	sinks := map[string]string{"kafka": "ok"}
	if c := r.condition(now, sinks); c.Cause == CauseDatabaseDown {
		t.Fatalf("in service: %+v", c)
	}
	if !r.health.set(errors.New("connection refused")) {
		t.Error("set: going out of service is not a change")
	}
	if r.health.set(errors.New("still refused")) {
		t.Error("set: out of service again is a change")
	}
	c := r.condition(now.Add(5*time.Second), sinks)
	if c.State != StateStuck || c.Cause != CauseDatabaseDown || !strings.Contains(c.Reason, "database tenants/t1 out of service for 5s: still refused") {
		t.Errorf("out of service: %+v", c)
	}
	r.health.set(nil)
	if c := r.condition(now, sinks); c.Cause == CauseDatabaseDown {
		t.Errorf("back in service: %+v", c)
	}
	r.placeholder = true
	if c := r.condition(now, sinks); c.State != StateStarting || c.Cause != "" {
		t.Errorf("a placeholder: %+v", c)
	}

	// A source split into buckets: its placeholder has its buckets, none
	// held; out of service, it is stuck whatever its buckets say.
	cs.Shards = 3
	p := newRunningSource(cs, unopened(cs.Shards))
	p.health, p.placeholder = &dbHealth{}, true
	if len(p.shards) != 3 || p.shards[2].bucket != (source.Bucket{Index: 2, Count: 3}) || p.active() != nil {
		t.Errorf("a split placeholder's shards: %d, the last %v", len(p.shards), p.shards[len(p.shards)-1].bucket)
	}
	if c := p.condition(now, sinks); c.State != StateStarting || c.Cause != "" {
		t.Errorf("a split placeholder: %+v", c)
	}
	p.placeholder = false
	for _, sh := range p.shards {
		sh.holding()
	}
	p.health.set(errors.New("refused"))
	if c := p.condition(now, sinks); c.State != StateStuck || c.Cause != CauseDatabaseDown {
		t.Errorf("a split source out of service: %+v", c)
	}
	if got := unopened(0); len(got) != 1 || got[0].Bucket.Split() {
		t.Errorf("an unsplit placeholder's shards: %+v", got)
	}
}

// TestJudgeMembers: status lists a source of a multi-database entry once
// per database this process knows: judged by its record, stuck with cause
// database_down where the database is out of service, not recorded where
// no relay has recorded it yet.
func TestJudgeMembers(t *testing.T) {
	cfg := &config.Config{Databases: map[string]config.Database{
		"tenants": {Driver: "fake-enum", DSN: "fake://db/postgres", Discover: &config.DatabaseDiscover{Pattern: "*"}},
		"main":    {DSN: "postgres://db/main"},
	}, Sources: []config.Source{
		{Name: "orders", Database: "tenants", Table: "public.outbox"},
		{Name: "app", Database: "main", Table: "public.outbox"},
	}}
	cfg.ApplyDefaults()
	a := &App{cfg: cfg, members: map[string]*member{}, health: map[string]*dbHealth{}}
	for _, n := range []string{"t1", "t2", "t3"} {
		a.addMember(cfg.Member("tenants", n, "fake://db/"+n))
	}
	now := time.Now()
	recorded := []SourceStatus{{Source: "orders@tenants/t2", Database: "tenants/t2", Held: true, Owner: "me", RecordedBy: "me",
		HeldSince: at(now.Add(-time.Hour)), LastClaim: at(now), Updated: at(now), Sinks: map[string]string{},
		lease: "orders@tenants/t2"}}
	down := map[string]sourceCondition{"tenants/t1": databaseDown("tenants/t1", errors.New("refused"), time.Minute)}
	got := map[string]SourceStatus{}
	var order []string
	for _, s := range a.judge(recorded, down, now) {
		got[s.Source] = s
		order = append(order, s.Source)
	}
	if want := []string{"orders@tenants/t1", "orders@tenants/t2", "orders@tenants/t3", "app"}; !slices.Equal(order, want) {
		t.Errorf("judged %v, want %v", order, want)
	}
	if s := got["orders@tenants/t1"]; s.Cause != CauseDatabaseDown || s.Stuck == "" || s.Database != "tenants/t1" || s.Table != "public.outbox" {
		t.Errorf("out of service: %+v", s)
	}
	if s := got["orders@tenants/t2"]; s.State != StateRelaying {
		t.Errorf("recorded: %+v", s)
	}
	if s := got["orders@tenants/t3"]; s.Cause != CauseNotRecorded || s.Database != "tenants/t3" {
		t.Errorf("not recorded: %+v", s)
	}
	if s := got["app"]; s.Cause != CauseNotRecorded || s.Database != "main" {
		t.Errorf("a source of a database of the configuration: %+v", s)
	}
}

// TestJudgeSplitMembers: a source split into buckets runs on each database
// of its entry with the buckets' leases (<source>@<entry>/<database>/<i>):
// status groups each database's rows into its source, held while every
// bucket is.
func TestJudgeSplitMembers(t *testing.T) {
	cfg := &config.Config{Databases: map[string]config.Database{
		"tenants": {Driver: "fake-enum", DSN: "fake://db/postgres", Discover: &config.DatabaseDiscover{Pattern: "*"}},
	}, Sources: []config.Source{{Name: "orders", Database: "tenants", Table: "public.outbox", Shards: 2}}}
	cfg.ApplyDefaults()
	a := &App{cfg: cfg, members: map[string]*member{}, health: map[string]*dbHealth{}}
	for _, n := range []string{"t1", "t2"} {
		a.addMember(cfg.Member("tenants", n, "fake://db/"+n))
	}
	now := time.Now()
	row := func(db, lease, owner string, held bool) SourceStatus {
		name := "orders@" + db
		return SourceStatus{Source: name, Database: db, Held: held, Owner: owner, Term: 1, RecordedBy: "a",
			HeldSince: at(now.Add(-time.Hour)), LastClaim: at(now), Updated: at(now), Sinks: map[string]string{}, lease: lease}
	}
	recorded := []SourceStatus{
		row("tenants/t1", "orders@tenants/t1/0", "a", true), row("tenants/t1", "orders@tenants/t1/1", "b", true),
		row("tenants/t2", "orders@tenants/t2/0", "a", true), row("tenants/t2", "orders@tenants/t2/1", "", false),
	}
	got := a.judge(recorded, map[string]sourceCondition{}, now)
	if len(got) != 2 {
		t.Fatalf("judged %d sources, want one a database: %+v", len(got), got)
	}
	if s := got[0]; s.Source != "orders@tenants/t1" || s.State != StateRelaying || !s.Held || s.Owner != "a, b" || len(s.Shards) != 2 {
		t.Errorf("every bucket held: %+v", s)
	}
	if s := got[1]; s.Source != "orders@tenants/t2" || s.Cause != CauseLeaseUnheld ||
		!strings.Contains(s.Reason, "orders@tenants/t2/1") {
		t.Errorf("a bucket unheld: %+v", s)
	}
}
