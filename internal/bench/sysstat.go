package bench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/*/stat CPU times.
const clockTicks = 100

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS is this process's peak resident set size in bytes.
func peakRSS() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Maxrss * 1024
}

// procCPU is one process's user+system CPU time from /proc.
func procCPU(pid int) time.Duration {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	sy, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+sy) * time.Second / clockTicks
}

// postgresCPU sums the CPU time of every process named postgres on this
// machine (the server and its backends), when /proc shows them. It counts
// the children's times too: a backend that exits hands its CPU time to the
// postmaster's, so the sum never goes down.
func postgresCPU() time.Duration {
	var total int64
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		stat, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 15 {
			continue
		}
		for _, v := range f[11:15] { // utime, stime, cutime, cstime
			n, _ := strconv.ParseInt(v, 10, 64)
			total += n
		}
	}
	return time.Duration(total) * time.Second / clockTicks
}

// dbCounters are the database-wide counters read around a measurement.
type dbCounters struct {
	walLSN string
	xacts  int64
}

// readCounters reads the server's WAL position and the transactions of the
// databases named (pool's own when none is), summed.
func readCounters(ctx context.Context, pool *pgxpool.Pool, databases ...string) (dbCounters, error) {
	var c dbCounters
	err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text,
  (SELECT COALESCE(sum(xact_commit + xact_rollback), 0)::bigint FROM pg_stat_database
   WHERE CASE WHEN COALESCE(cardinality($1::text[]), 0) = 0 THEN datname = current_database() ELSE datname = ANY($1) END)`,
		databases).Scan(&c.walLSN, &c.xacts)
	return c, err
}

// walBytes is the WAL written between two readings.
func walBytes(ctx context.Context, pool *pgxpool.Pool, from, to dbCounters) int64 {
	var n float64
	_ = pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)", to.walLSN, from.walLSN).Scan(&n)
	return int64(n)
}

func deadTuples(ctx context.Context, pool *pgxpool.Pool, schema string) int64 {
	var n int64
	_ = pool.QueryRow(ctx, "SELECT COALESCE(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = $1", schema).Scan(&n)
	return n
}
