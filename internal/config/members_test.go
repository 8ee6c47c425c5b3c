package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func checkTenants(t *testing.T, c *Config) {
	t.Helper()
	tenants, regions, registry, main := c.Databases["tenants"], c.Databases["regions"], c.Databases["registry"], c.Databases["main"]
	if !tenants.Multi() || !regions.Multi() || !registry.Multi() || main.Multi() {
		t.Errorf("Multi: tenants %v, regions %v, registry %v, main %v; want true, true, true, false",
			tenants.Multi(), regions.Multi(), registry.Multi(), main.Multi())
	}
	if tenants.MaxConns != DefaultMemberMaxConns || regions.MaxConns != 2 || main.MaxConns != DefaultDatabaseMaxConns {
		t.Errorf("max_conns: tenants %d, regions %d, main %d; want %d (each database of a multi entry), 2, %d",
			tenants.MaxConns, regions.MaxConns, main.MaxConns, DefaultMemberMaxConns, DefaultDatabaseMaxConns)
	}
	if tenants.Discover.Interval.D() != 30*time.Second || registry.Discover.Interval.D() != DefaultDiscoverInterval {
		t.Errorf("discover.interval: tenants %s, registry %s", tenants.Discover.Interval, registry.Discover.Interval)
	}
	if registry.Discover.Query == "" || registry.Driver != "mysql" {
		t.Errorf("registry = %+v", registry)
	}
}

// TestMemberExpansion: a member of a multi-database entry has the entry's
// settings with its own DSN, and the entry's sources run on it renamed
// <source>@<entry>/<database>, everything else copied; sources of other
// databases do not.
func TestMemberExpansion(t *testing.T) {
	c := mustParse(t, mustRead(t, "testdata/tenants.good.yaml"), nil)
	m := c.Member("tenants", "tenant_042", "postgres://relay@db:5432/tenant_042")
	want := Member{Name: "tenants/tenant_042", Entry: "tenants", DBName: "tenant_042",
		Database: Database{Driver: "postgres", DSN: "postgres://relay@db:5432/tenant_042", MaxConns: DefaultMemberMaxConns}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("Member = %+v\nwant     %+v", m, want)
	}
	got := c.SourcesOn(m.Name)
	if len(got) != 2 {
		t.Fatalf("SourcesOn(%s) = %d sources, want orders and services", m.Name, len(got))
	}
	orders, services := got[0], got[1]
	if orders.Index != 0 || orders.Source.Name != "orders@tenants/tenant_042" || orders.Source.Database != "tenants/tenant_042" {
		t.Errorf("orders on the member = index %d, %q on %q", orders.Index, orders.Source.Name, orders.Source.Database)
	}
	tmpl := c.Sources[0]
	tmpl.Name, tmpl.Database = orders.Source.Name, orders.Source.Database
	if !reflect.DeepEqual(orders.Source, tmpl) {
		t.Errorf("the member's source differs from its template beyond name and database:\n%+v\n%+v", orders.Source, tmpl)
	}
	if services.Index != 1 || services.Source.Name != "services@tenants/tenant_042" || services.Source.Discover == nil {
		t.Errorf("services on the member = %+v", services)
	}
	if c.Sources[0].Name != "orders" || c.Sources[0].Database != "tenants" {
		t.Error("SourcesOn changed the configuration's own sources")
	}

	if on := c.SourcesOn("main"); len(on) != 1 || on[0].Source.Name != "app" || on[0].Index != 3 {
		t.Errorf("SourcesOn(main) = %+v, want app unchanged", on)
	}
	for _, name := range []string{"tenants", "main/x", "nope", "nope/x"} {
		if on := c.SourcesOn(name); on != nil {
			t.Errorf("SourcesOn(%q) = %+v, want none (an entry itself, or not a database)", name, on)
		}
	}
	if e, db, ok := SplitMemberName("tenants/a/b"); !ok || e != "tenants" || db != "a/b" {
		t.Errorf("SplitMemberName = %q, %q, %v", e, db, ok)
	}
	if _, _, ok := SplitMemberName("main"); ok {
		t.Error("SplitMemberName(main) is a member")
	}
}

func TestDiscoverMatcher(t *testing.T) {
	tests := []struct {
		pattern string
		match   []string
		miss    []string
	}{
		{"tenant_*", []string{"tenant_", "tenant_001", "tenant_a.b"}, []string{"tenant", "xtenant_1", "Tenant_1"}},
		{"t?_x", []string{"t1_x", "ta_x"}, []string{"t12_x", "t_x"}},
		{"db[0-9][!a]", []string{"db1b", "db9z"}, []string{"db1a", "dbx1", "db1"}},
		{"a.b+c", []string{"a.b+c"}, []string{"aXb+c", "a.bbc"}},
		{"café_?", []string{"café_1", "café_é"}, []string{"cafe_1", "café_12"}},
		{"regex:^tenant_[0-9]+$", []string{"tenant_7"}, []string{"tenant_x", "tenant_7a"}},
		{"regex:eu", []string{"orders_eu", "eu"}, []string{"us"}},
		{"", []string{"anything"}, nil}, // a query rule: every name it returns
	}
	for _, tt := range tests {
		m, err := (&DatabaseDiscover{Pattern: tt.pattern}).Matcher()
		if err != nil {
			t.Fatalf("%q: %v", tt.pattern, err)
		}
		for _, n := range tt.match {
			if !m(n) {
				t.Errorf("%q does not match %q", tt.pattern, n)
			}
		}
		for _, n := range tt.miss {
			if m(n) {
				t.Errorf("%q matches %q", tt.pattern, n)
			}
		}
	}
	for _, bad := range []string{"t[", "t[]", "t[!]", "regex:("} {
		if _, err := (&DatabaseDiscover{Pattern: bad}).Matcher(); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestMultiDatabaseValidation: each way of getting a multi-database entry
// wrong is an error naming the entry and the field.
func TestMultiDatabaseValidation(t *testing.T) {
	const sinks = "sinks:\n  kafka: {type: kafka, brokers: [localhost:9092]}\nsources:\n  - {name: o, database: t, table: public.outbox}\n"
	tests := []struct{ db, want string }{
		{"t: {dsns: [a], max_conns: 0}", "databases.t.max_conns: must be at least 1, got 0"},
		{"t: {dsn: x, discover: {pattern: 'a*', interval: -1s}}", "databases.t.discover.interval: must be positive, got -1s"},
		{"t: {dsn: x, discover: {pattern: 'a*', interval: 1 minute}}", `databases.t.discover.interval: invalid duration "1 minute"`},
		{"t: {dsn: x, discover: {pattern: 'a*', tables: [x]}}", `databases.t.discover: unknown field "tables"`},
		{"t: {dsn: x, dsns: a}", `databases.t.dsns: expected a list, got "a"`},
		{"t: {driver: mysql, discover: {query: SHOW DATABASES}}", "databases.t.dsn: required with discover"},
	}
	for _, tt := range tests {
		msg := parseErr(t, "databases:\n  "+tt.db+"\n"+sinks)
		if !strings.Contains(msg, tt.want) {
			t.Errorf("%s: error does not contain %q:\n%s", tt.db, tt.want, msg)
		}
	}
	// DATABASE_URL does not give a dsns entry a dsn.
	cfg := mustParse(t, "databases:\n  t: {dsns: [postgres://h/a]}\n"+sinks, map[string]string{"DATABASE_URL": "postgres://h/x"})
	if cfg.Databases["t"].DSN != "" {
		t.Errorf("DATABASE_URL filled the dsn of a dsns entry: %q", cfg.Databases["t"].DSN)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestTableOn: {database} in a template's table is each member's database,
// quoted when it must be; a source on one database may not use it.
func TestTableOn(t *testing.T) {
	for _, tt := range []struct{ table, db, want string }{
		{"{database}.kafka_outbox", "shop_eu", "shop_eu.kafka_outbox"},
		{"{database}.kafka_outbox", "Shop-EU", `"Shop-EU".kafka_outbox`},
		{`{database}.kafka_outbox`, `a"b`, `"a""b".kafka_outbox`},
		{"public.outbox", "shop_eu", "public.outbox"},
	} {
		if got := TableOn(tt.table, tt.db); got != tt.want {
			t.Errorf("TableOn(%q, %q) = %q, want %q", tt.table, tt.db, got, tt.want)
		}
	}
	const sinks = "sinks:\n  kafka: {type: kafka, brokers: [localhost:9092]}\n"
	c := mustParse(t, "databases:\n  shops: {driver: mysql, dsns: ['relay@tcp(db:3306)/Shop-EU']}\n"+sinks+
		"sources:\n  - {name: o, table: '{database}.kafka_outbox', preset: kafka-outbox}\n", nil)
	if on := c.SourcesOn("shops/Shop-EU"); len(on) != 1 || on[0].Source.Table != `"Shop-EU".kafka_outbox` {
		t.Errorf("SourcesOn = %+v", on)
	}
	msg := parseErr(t, "databases:\n  main: {dsn: x}\n"+sinks+"sources:\n  - {name: o, table: '{database}.outbox'}\n")
	if want := "sources[0].table: {database} stands for each database of an entry with dsns or discover; main is one database"; !strings.Contains(msg, want) {
		t.Errorf("error does not contain %q:\n%s", want, msg)
	}
	msg = parseErr(t, "databases:\n  t: {dsns: [x]}\n"+sinks+"sources:\n  - {name: o, table: '{database}'}\n")
	if !strings.Contains(msg, "sources[0].table: invalid table name") {
		t.Errorf("a table of {database} alone: %s", msg)
	}
}

// FuzzDiscoverMatcher: any pattern either fails to compile or matches
// without panicking, and a glob without metacharacters matches itself
// alone.
func FuzzDiscoverMatcher(f *testing.F) {
	for _, s := range []string{"tenant_*", "t?[a-z][!0-9]", "regex:^a(b|c)$", "[", "a]b", "[]]"} {
		f.Add(s, "tenant_1")
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		m, err := (&DatabaseDiscover{Pattern: pattern}).Matcher()
		if err != nil {
			return
		}
		m(name)
		if pattern != "" && !strings.ContainsAny(pattern, "*?[") && !strings.HasPrefix(pattern, regexPrefix) {
			if !m(pattern) || m(pattern+"x") {
				t.Errorf("the plain glob %q does not match itself alone", pattern)
			}
		}
	})
}
