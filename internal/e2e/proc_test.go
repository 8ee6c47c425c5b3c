package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildRelay builds cmd/outbox-relay (with -race when the tests run with
// it) into the test's temporary directory and returns its path. The Go
// build cache makes a second build in the same run cheap.
func buildRelay(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("go env GOMOD: not in a module")
	}
	bin := filepath.Join(t.TempDir(), "outbox-relay")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/outbox-relay")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Dir(gomod)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return bin
}

// syncBuffer is a bytes.Buffer safe for a child's stdout and stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// relayProcess is the relay running as a child process.
type relayProcess struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error // Wait's result, once done is closed
}

// childEnv is the environment without variables that would override the
// config file.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OUTBOX_RELAY_") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// startRelay starts `outbox-relay run --config cfgPath`. The process is
// killed when the test ends if it is still running.
func startRelay(t *testing.T, bin, cfgPath string) *relayProcess {
	t.Helper()
	p := &relayProcess{out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "run", "--config", cfgPath)
	p.cmd.Env = childEnv()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("relay process %d output:\n%s", p.cmd.Process.Pid, p.out.String())
		}
	})
	return p
}

// exited reports whether the process has ended.
func (p *relayProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to end and returns its wait status.
func (p *relayProcess) wait(t *testing.T, timeout time.Duration) syscall.WaitStatus {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("relay process %d still running after %s", p.cmd.Process.Pid, timeout)
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		t.Fatalf("no wait status for relay process %d", p.cmd.Process.Pid)
	}
	return ws
}

// kill sends SIGKILL and checks that the process died of it.
func (p *relayProcess) kill(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("relay process %d had already exited before the kill (%v):\n%s", p.cmd.Process.Pid, p.err, p.out.String())
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	ws := p.wait(t, 10*time.Second)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("relay process %d: wait status %v, want killed by SIGKILL", p.cmd.Process.Pid, ws)
	}
	if err := syscall.Kill(p.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("relay process %d still exists after SIGKILL (kill 0: %v)", p.cmd.Process.Pid, err)
	}
}

// checkOutput fails the test when the process printed a data race or a
// panic.
func (p *relayProcess) checkOutput(t *testing.T) {
	t.Helper()
	out := p.out.String()
	for _, bad := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
		if strings.Contains(out, bad) {
			t.Errorf("relay process %d printed %q:\n%s", p.cmd.Process.Pid, bad, out)
			return
		}
	}
}
