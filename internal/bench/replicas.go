package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// replica is a relay process (`outbox-relay run --config`) that the
// handover workload starts, stops and kills: a replica as it runs in
// production, signals and all.
type replica struct {
	cmd  *exec.Cmd
	log  string        // its output
	done chan struct{} // closed when it has ended
	// ended and err are when it ended and how (cmd.Wait), once done is
	// closed.
	ended time.Time
	err   error
}

// replicaSet is the replicas running now, all from one configuration
// file; their output goes to files beside it.
type replicaSet struct {
	bin, config string
	live        []*replica
	started     int
}

// newReplicaSet writes cfg to a file in a directory of its own for the
// replicas to run with bin (default this executable); remove removes the
// directory, their output with it.
func newReplicaSet(cfg *config.Config, bin string) (rs *replicaSet, remove func(), err error) {
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, nil, err
		}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "outbox-bench-replicas-")
	if err != nil {
		return nil, nil, err
	}
	remove = func() { _ = os.RemoveAll(dir) }
	path := filepath.Join(dir, "relay.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		remove()
		return nil, nil, err
	}
	return &replicaSet{bin: bin, config: path}, remove, nil
}

// start starts one more replica.
func (rs *replicaSet) start() error {
	rs.started++
	log := filepath.Join(filepath.Dir(rs.config), fmt.Sprintf("replica-%d.log", rs.started))
	out, err := os.Create(log)
	if err != nil {
		return err
	}
	defer out.Close()
	r := &replica{cmd: exec.Command(rs.bin, "run", "--config", rs.config), log: log, done: make(chan struct{})}
	r.cmd.Env = replicaEnv(os.Environ())
	r.cmd.Stdout, r.cmd.Stderr = out, out
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start a replica (%s run): %w", rs.bin, err)
	}
	go func() {
		r.err = r.cmd.Wait()
		r.ended = time.Now()
		close(r.done)
	}()
	rs.live = append(rs.live, r)
	return nil
}

// replicaEnv is env without what would override the configuration file.
func replicaEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, "OUTBOX_RELAY_") || strings.HasPrefix(kv, "DATABASE_URL=")
	})
}

func (rs *replicaSet) pids() []int {
	out := make([]int, len(rs.live))
	for i, r := range rs.live {
		out[i] = r.cmd.Process.Pid
	}
	return out
}

func (rs *replicaSet) byPID(pid int) *replica {
	for _, r := range rs.live {
		if r.cmd.Process.Pid == pid {
			return r
		}
	}
	return nil
}

// forget takes r, which has ended, out of the set.
func (rs *replicaSet) forget(r *replica) {
	rs.live = slices.DeleteFunc(rs.live, func(x *replica) bool { return x == r })
}

// alive fails, with its output, when a replica has ended unasked.
func (rs *replicaSet) alive() error {
	for _, r := range rs.live {
		if r.exited() {
			return fmt.Errorf("replica %d ended: %v\n%s", r.cmd.Process.Pid, r.err, r.output())
		}
	}
	return nil
}

// stopAll stops every replica with SIGTERM, and kills those still running
// after relayStopTimeout.
func (rs *replicaSet) stopAll() {
	for _, r := range rs.live {
		_ = r.signal(syscall.SIGTERM)
	}
	for _, r := range rs.live {
		if _, err := r.wait(relayStopTimeout); err != nil {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	}
	rs.live = nil
}

func (r *replica) signal(sig syscall.Signal) error { return r.cmd.Process.Signal(sig) }

func (r *replica) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// wait waits, within limit, for the process to end, and says when it did.
func (r *replica) wait(limit time.Duration) (time.Time, error) {
	select {
	case <-r.done:
		return r.ended, nil
	case <-time.After(limit):
		return time.Time{}, fmt.Errorf("replica %d still running %s after it was signalled", r.cmd.Process.Pid, limit)
	}
}

// exitedCleanly says whether the process ended with status 0.
func (r *replica) exitedCleanly() bool { return r.exited() && r.err == nil }

// output is what the process wrote, for an error's message.
func (r *replica) output() string {
	b, _ := os.ReadFile(r.log)
	return string(b)
}
